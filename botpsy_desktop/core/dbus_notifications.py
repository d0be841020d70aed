"""Native notifications without Qt, with action buttons: one client for Linux, Windows and macOS.

On Linux it speaks to the freedesktop org.freedesktop.Notifications service itself; on Windows
and macOS it hands the notification to desktop-notifier (core/native_notifications.py: WinRT
toasts, macOS UserNotifications), behind the same calls and callbacks.

desktop-notifier (6.2.0) was evaluated for Linux too and is not used there: its D-Bus backend
passes the body to the server unescaped and never asks whether the server reads it as markup
(``body-markup``), so a receipt's ``<b>``... could hide or restyle words the person approves;
and it cannot say whether the server shows action buttons (``actions``), which the approval
notifications need to offer Approve only where a button can be seen. It checks the sender of
``ActionInvoked`` through dbus-fast's proxy (as this client does with a match rule), so that
guarantee would have held. On Windows and macOS the OS itself delivers the clicks (no bus
another program can write to), and the text is set as plain text (a toast's XML text node,
an NSString), so what this client guarantees holds there.

Spoken over D-Bus with jeepney (pure Python, made for the job) on a thread of its own, so that
both the window (ui/desktop_notify.py wraps this in Qt signals) and ``botpsy daemon`` (no Qt)
can notify and hear the action buttons. QtDBus is not used: from Python (PySide6 6.12) it
cannot marshal a D-Bus ``uint32`` (``QDBusArgument << int`` writes a uint16, a plain int
becomes an int32), and ``Notify`` takes ``replaces_id`` as a uint32, which real servers
(GLib's) check strictly. Where there is no session bus or no notification server (Windows,
macOS, a bare session), :attr:`available` stays False and the caller falls back.
"""

from __future__ import annotations

import contextlib
import html
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

NAME = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"
CALL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class _Notify:
    key: str
    summary: str
    body: str
    actions: tuple[tuple[str, str], ...]
    urgency: int
    replaces: int
    category: str


@dataclass(frozen=True)
class _Close:
    nid: int


@dataclass
class NotifyHandlers:
    """Who hears the client, on its D-Bus thread: ``ready(available)`` once connected (or not),
    ``shown(key, id)`` when the server accepted a notification, ``action(id, action)`` when the
    user clicked one of its actions, ``closed(id, reason)`` when it went away, ``failed(text)``."""

    ready: list[Callable[[bool], None]] = field(default_factory=list)
    shown: list[Callable[[str, int], None]] = field(default_factory=list)
    action: list[Callable[[int, str], None]] = field(default_factory=list)
    closed: list[Callable[[int, int], None]] = field(default_factory=list)
    failed: list[Callable[[str], None]] = field(default_factory=list)


def _call(callbacks: list[Any], *args: Any) -> None:
    for callback in list(callbacks):
        with contextlib.suppress(Exception):  # a listener's bug must not end the D-Bus thread
            callback(*args)


class DesktopNotifications:
    """A client of the desktop's notification server; every call is asynchronous.

    ``bus`` is "SESSION" (the user's session bus, $DBUS_SESSION_BUS_ADDRESS) or a D-Bus
    address. Listeners in :attr:`on` are called on the client's own thread.
    """

    def __init__(self, bus: str = "SESSION", app_name: str = "BotPsy") -> None:
        self.bus = bus
        self.app_name = app_name
        self.available = False
        self.actions = False
        self.markup = False  # the server reads the body as markup: text is escaped for it
        self.server = ""
        self.on = NotifyHandlers()
        self.started = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None

    def start(self) -> DesktopNotifications:
        """Connect on a thread of its own (at once off Linux: nothing to connect to)."""
        if self._thread is not None:
            return self
        if sys.platform in ("win32", "darwin"):
            from botpsy_desktop.core.native_notifications import start_native

            start_native(self)
            return self
        if not sys.platform.startswith("linux"):
            self._give_up()
            return self
        self._thread = threading.Thread(target=self._run, name="botpsy-notify", daemon=True)
        self._thread.start()
        return self

    # -- API (any thread) ---------------------------------------------------------------------
    def notify(
        self,
        key: str,
        summary: str,
        body: str,
        actions: list[tuple[str, str]] | None = None,
        *,
        urgency: int = 1,
        replaces: int = 0,
        category: str = "x-botpsy.alarm",
    ) -> bool:
        """Queue a notification; ``actions`` are (key, label) pairs shown as buttons where the
        server supports them. False if no server is available (use the fallback)."""
        if not self.available:
            return False
        pairs = tuple(actions or ()) if self.actions else ()
        if self.markup:  # shown as written: no tag in a receipt may hide or restyle its words
            body = html.escape(body, quote=False)
        self._queue.put(_Notify(key, summary, body, pairs, urgency, replaces, category))
        return True

    def close_notification(self, nid: int) -> None:
        if self.available and nid:
            self._queue.put(_Close(nid))

    def wait_ready(self, timeout: float = 5.0) -> bool:
        """Block until connected or given up (tests, start-up); True if available."""
        self.started.wait(timeout)
        return self.available

    def shutdown(self) -> None:
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(2)

    # -- the D-Bus thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            from jeepney import (
                DBusAddress,
                HeaderFields,
                MatchRule,
                Message,
                MessageType,
                new_method_call,
            )
            from jeepney.bus_messages import message_bus
            from jeepney.io.threading import open_dbus_router
        except ImportError:
            self._give_up()
            return
        try:
            with open_dbus_router(self.bus) as router:
                address = DBusAddress(PATH, bus_name=NAME, interface=NAME)
                caps = router.send_and_get_reply(
                    new_method_call(address, "GetCapabilities"), timeout=CALL_TIMEOUT_S
                )
                if caps.header.message_type != MessageType.method_return:
                    self._give_up()
                    return
                info = router.send_and_get_reply(
                    new_method_call(address, "GetServerInformation"), timeout=CALL_TIMEOUT_S
                )
                if info.header.message_type == MessageType.method_return and info.body:
                    self.server = str(info.body[0])
                # only the server's own signals: a click (ActionInvoked) may approve an action,
                # so one sent by any other program on the bus must not count as a click
                owner = router.send_and_get_reply(
                    message_bus.GetNameOwner(NAME), timeout=CALL_TIMEOUT_S
                )
                if owner.header.message_type != MessageType.method_return:
                    self._give_up()
                    return
                rule = MatchRule(type="signal", interface=NAME, path=PATH, sender=owner.body[0])
                # jeepney's receiver thread walks the router's filters, unguarded, for every
                # message it dispatches; adding or removing one meanwhile killed that thread
                # ("dictionary changed size during iteration": no reply heard after it). So
                # the filter is added before the bus is asked for these signals, while no reply
                # is awaited, and never removed: closing the router ends that thread first.
                router.filter(rule, queue=self._queue)
                router.send_and_get_reply(message_bus.AddMatch(rule), timeout=CALL_TIMEOUT_S)
                self.actions = "actions" in caps.body[0]
                self.markup = "body-markup" in caps.body[0]
                self.available = True
                self.started.set()
                _call(self.on.ready, True)
                self._serve(router, address, Message, new_method_call, HeaderFields.member)
        except Exception as exc:  # no bus, refused, went away: never raised into the app
            if self.available:
                self.available = False
                _call(self.on.failed, f"The notification service went away: {exc}")
            else:
                self._give_up()

    def _serve(
        self, router: Any, address: Any, message_type: Any, method_call: Any, member_field: Any
    ) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, message_type):
                member = item.header.fields.get(member_field)
                if member == "ActionInvoked":
                    nid, action = item.body
                    _call(self.on.action, int(nid), str(action))
                elif member == "NotificationClosed":
                    nid, reason = item.body
                    _call(self.on.closed, int(nid), int(reason))
            elif isinstance(item, _Notify):
                flat = [part for pair in item.actions for part in pair]
                hints = {
                    "urgency": ("y", item.urgency),
                    "desktop-entry": ("s", "botpsy-desktop"),
                    "category": ("s", item.category),
                }
                call = method_call(
                    address,
                    "Notify",
                    "susssasa{sv}i",
                    (self.app_name, item.replaces, "", item.summary, item.body, flat, hints, 0),
                )
                reply = router.send_and_get_reply(call, timeout=CALL_TIMEOUT_S)
                if reply.body and isinstance(reply.body[0], int):
                    _call(self.on.shown, item.key, int(reply.body[0]))
                else:
                    _call(self.on.failed, f"The notification server refused it: {reply.body}")
            elif isinstance(item, _Close):
                with contextlib.suppress(TimeoutError):
                    router.send_and_get_reply(
                        method_call(address, "CloseNotification", "u", (item.nid,)),
                        timeout=CALL_TIMEOUT_S,
                    )

    def _give_up(self) -> None:
        self.available = False
        self.started.set()
        _call(self.on.ready, False)
