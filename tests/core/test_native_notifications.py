"""The Windows and macOS notification client (core/native_notifications.py) on Linux.

What runs here is the app's side: its queue, ids, buttons and callbacks, through the real
desktop-notifier package. desktop-notifier picks its backend by the OS, so on Linux it speaks
its own D-Bus backend to the tests' notification server; its WinRT (Windows) and
UserNotifications (macOS) backends cannot run on Linux and are not tested here.
"""

from __future__ import annotations

import threading

import pytest

from botpsy_desktop.core.dbus_notifications import DesktopNotifications
from botpsy_desktop.core.native_notifications import start_native
from tests.helpers.notification_server import notification_server
from tests.helpers.services import needs, programs

needs_dbus = needs(programs("dbus-daemon"), "dbus-daemon (a private D-Bus)", "apt install dbus")


@needs_dbus
def test_buttons_are_shown_and_their_clicks_heard_through_desktop_notifier(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("desktop_notifier", reason="pip install -e .[test] installs it")
    with notification_server(["body", "actions"]) as server:
        # desktop-notifier connects to the session bus: the private one, with the test server
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", server.address)
        client = DesktopNotifications(server.address)
        clicked: list[tuple[int, str]] = []
        shown: list[tuple[str, int]] = []
        heard, seen = threading.Event(), threading.Event()
        client.on.action.append(lambda nid, action: (clicked.append((nid, action)), heard.set()))
        client.on.shown.append(lambda key, nid: (shown.append((key, nid)), seen.set()))
        start_native(client)
        try:
            assert client.wait_ready(10) and client.actions and not client.markup
            actions = [("default", "Open BotPsy"), ("approve", "Approve"), ("deny", "Deny")]
            assert client.notify("approval:7", "Approve?", "Cancel all alarms", actions)
            note = server.wait_for(lambda e: e["event"] == "notify", 10)
            assert note is not None and seen.wait(10)
            assert note["summary"] == "Approve?" and note["body"] == "Cancel all alarms"
            assert note["actions"] == ["default", "", "approve", "Approve", "deny", "Deny"]
            (key, nid), *_ = shown
            assert key == "approval:7"
            server.invoke(note["id"], "approve")  # the person's click, from the server
            assert heard.wait(10)
            assert clicked == [(nid, "approve")]  # the app's own id and action key
        finally:
            client.shutdown()
