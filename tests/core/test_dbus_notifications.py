"""The Qt-free notification client (what `botpsy daemon` notifies with) on a real server."""

from __future__ import annotations

import threading

from botpsy_desktop.core.dbus_notifications import DesktopNotifications
from tests.helpers.notification_server import notification_server
from tests.helpers.services import needs, programs

needs_dbus = needs(programs("dbus-daemon"), "dbus-daemon (a private D-Bus)", "apt install dbus")


@needs_dbus
def test_notifications_with_buttons_are_shown_and_their_clicks_heard() -> None:
    with notification_server(["body", "actions"]) as server:
        client = DesktopNotifications(server.address).start()
        clicked: list[tuple[int, str]] = []
        heard = threading.Event()
        client.on.action.append(lambda nid, action: (clicked.append((nid, action)), heard.set()))
        shown: list[tuple[str, int]] = []
        client.on.shown.append(lambda key, nid: shown.append((key, nid)))
        try:
            assert client.wait_ready() and client.actions and not client.markup
            assert client.notify(
                "approval:1", "Approve?", "Cancel <all> & more", [("deny", "Deny")]
            )
            note = server.wait_for(lambda e: e["event"] == "notify", 10)
            assert note is not None
            assert note["body"] == "Cancel <all> & more"  # plain text: shown as written
            assert note["actions"] == ["deny", "Deny"]
            server.invoke(note["id"], "deny")
            assert heard.wait(10)
            assert clicked == [(note["id"], "deny")] and shown == [("approval:1", note["id"])]
        finally:
            client.shutdown()


@needs_dbus
def test_a_server_reading_markup_gets_the_text_escaped() -> None:
    with notification_server(["body", "body-markup"]) as server:
        client = DesktopNotifications(server.address).start()
        try:
            assert client.wait_ready() and client.markup and not client.actions
            client.notify("note:x", "Routine", "<b>hidden?</b> & shown", [("deny", "Deny")])
            note = server.wait_for(lambda e: e["event"] == "notify", 10)
            assert note is not None
            assert note["body"] == "&lt;b&gt;hidden?&lt;/b&gt; &amp; shown"
            assert note["actions"] == []  # no buttons where the server shows none
        finally:
            client.shutdown()


def test_without_a_notification_server_it_says_so() -> None:
    client = DesktopNotifications("unix:path=/nonexistent/bus").start()
    try:
        assert not client.wait_ready() and not client.notify("k", "t", "b")
    finally:
        client.shutdown()


@needs_dbus
def test_a_click_forged_by_another_program_on_the_bus_is_not_heard() -> None:
    from jeepney import DBusAddress, new_signal
    from jeepney.io.blocking import open_dbus_connection

    with notification_server(["body", "actions"]) as server:
        client = DesktopNotifications(server.address).start()
        clicked: list[tuple[int, str]] = []
        heard = threading.Event()
        client.on.action.append(lambda nid, action: (clicked.append((nid, action)), heard.set()))
        forger = open_dbus_connection(server.address)
        try:
            assert client.wait_ready()
            client.notify("approval:1", "Approve?", "Cancel all alarms", [("approve", "Approve")])
            note = server.wait_for(lambda e: e["event"] == "notify", 10)
            assert note is not None
            address = DBusAddress(
                "/org/freedesktop/Notifications", interface="org.freedesktop.Notifications"
            )
            forger.send(new_signal(address, "ActionInvoked", "us", (note["id"], "approve")))
            assert not heard.wait(1.5) and clicked == []  # not from the notification server
            server.invoke(note["id"], "approve")  # the user's click, from the server
            assert heard.wait(10) and clicked == [(note["id"], "approve")]
        finally:
            forger.close()
            client.shutdown()
