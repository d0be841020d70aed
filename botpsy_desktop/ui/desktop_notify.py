"""Native notifications on Linux: the freedesktop org.freedesktop.Notifications D-Bus service.

Spoken over D-Bus with jeepney (pure Python) on a thread of its own, never the GUI thread.
QtDBus is not used for the calls: from Python (PySide6 6.12) it cannot marshal a D-Bus
``uint32`` (``QDBusArgument << int`` writes a uint16, a plain int becomes an int32), and
``Notify`` takes ``replaces_id`` as a uint32, which real servers (GLib's) check strictly.
Where there is no session bus or no notification server, :attr:`available` stays False and the
caller falls back to the tray message.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import threading
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import QObject, Signal

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


@dataclass(frozen=True)
class _Close:
    nid: int


class FreedesktopNotifications(QObject):
    """A client of the desktop's notification server; every call is asynchronous.

    ``bus`` is "SESSION" (the user's session bus) or a D-Bus address. Signals arrive queued
    on the GUI thread: ``ready(available)`` once connected (or not), ``shown(key, id)`` when
    the server accepted a notification, ``actionInvoked(id, action)`` when the user clicked
    one of its actions, ``closed(id, reason)`` when it went away.
    """

    ready = Signal(bool)
    shown = Signal(str, int)
    actionInvoked = Signal(int, str)
    closed = Signal(int, int)
    failed = Signal(str)

    def __init__(
        self, bus: str = "SESSION", app_name: str = "BotPsy", parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self.bus = bus
        self.app_name = app_name
        self.available = False
        self.actions = False
        self.server = ""
        self.started = threading.Event()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None
        if not sys.platform.startswith("linux"):
            self.started.set()
            return
        self._thread = threading.Thread(target=self._run, name="botpsy-notify", daemon=True)
        self._thread.start()

    # -- API (GUI thread) -------------------------------------------------------------------
    def notify(
        self,
        key: str,
        summary: str,
        body: str,
        actions: list[tuple[str, str]] | None = None,
        *,
        urgency: int = 1,
        replaces: int = 0,
    ) -> bool:
        """Queue a notification; ``actions`` are (key, label) pairs shown as buttons where the
        server supports them. False if no server is available (use the fallback)."""
        if not self.available:
            return False
        pairs = tuple(actions or ()) if self.actions else ()
        self._queue.put(_Notify(key, summary, body, pairs, urgency, replaces))
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

    # -- the D-Bus thread -------------------------------------------------------------------
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
                rule = MatchRule(type="signal", interface=NAME, path=PATH)
                router.send_and_get_reply(message_bus.AddMatch(rule), timeout=CALL_TIMEOUT_S)
                with router.filter(rule, queue=self._queue):
                    self.actions = "actions" in caps.body[0]
                    self.available = True
                    self.started.set()
                    self.ready.emit(True)
                    self._serve(router, address, Message, new_method_call, HeaderFields.member)
        except Exception as exc:  # no bus, refused, went away: never raised into the app
            if self.available:
                self.available = False
                self.failed.emit(f"The notification service went away: {exc}")
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
                    self.actionInvoked.emit(int(nid), str(action))
                elif member == "NotificationClosed":
                    nid, reason = item.body
                    self.closed.emit(int(nid), int(reason))
            elif isinstance(item, _Notify):
                flat = [part for pair in item.actions for part in pair]
                hints = {
                    "urgency": ("y", item.urgency),
                    "desktop-entry": ("s", "botpsy-desktop"),
                    "category": ("s", "x-botpsy.alarm"),
                }
                call = method_call(
                    address,
                    "Notify",
                    "susssasa{sv}i",
                    (self.app_name, item.replaces, "", item.summary, item.body, flat, hints, 0),
                )
                reply = router.send_and_get_reply(call, timeout=CALL_TIMEOUT_S)
                if reply.body and isinstance(reply.body[0], int):
                    self.shown.emit(item.key, int(reply.body[0]))
                else:
                    self.failed.emit(f"The notification server refused it: {reply.body}")
            elif isinstance(item, _Close):
                with contextlib.suppress(TimeoutError):
                    router.send_and_get_reply(
                        method_call(address, "CloseNotification", "u", (item.nid,)),
                        timeout=CALL_TIMEOUT_S,
                    )

    def _give_up(self) -> None:
        self.available = False
        self.started.set()
        self.ready.emit(False)
