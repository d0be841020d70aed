"""Native notifications in the window: the Qt-free client (core/dbus_notifications.py: the
freedesktop server on Linux, desktop-notifier on Windows and macOS) with its callbacks turned
into Qt signals, delivered queued on the GUI thread.

Where there is no notification service (a bare Linux session, an unsigned macOS app, a refused
permission), :attr:`available` stays False and the caller falls back to the tray message.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from botpsy_desktop.core.dbus_notifications import CALL_TIMEOUT_S, NAME, PATH, DesktopNotifications

__all__ = ["CALL_TIMEOUT_S", "NAME", "PATH", "FreedesktopNotifications"]


class FreedesktopNotifications(QObject):
    """A client of the desktop's notification server; every call is asynchronous.

    ``bus`` is "SESSION" (the user's session bus) or a D-Bus address. Signals arrive queued
    on the GUI thread: ``ready(available)`` once connected (or not), ``shown(key, id)`` when
    the server accepted a notification, ``actionInvoked(id, action)`` when the user clicked
    one of its actions, ``closed(id, reason)`` when it went away. :attr:`client` is the Qt-free
    client itself (the stored approval queue's notifications share it).
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
        self.client = DesktopNotifications(bus, app_name)
        on = self.client.on
        on.ready.append(self.ready.emit)
        on.shown.append(self.shown.emit)
        on.action.append(self.actionInvoked.emit)
        on.closed.append(self.closed.emit)
        on.failed.append(self.failed.emit)
        self.client.start()

    @property
    def bus(self) -> str:
        return self.client.bus

    @property
    def available(self) -> bool:
        return self.client.available

    @property
    def actions(self) -> bool:
        return self.client.actions

    @property
    def server(self) -> str:
        return self.client.server

    @property
    def started(self) -> Any:
        return self.client.started

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
        return self.client.notify(key, summary, body, actions, urgency=urgency, replaces=replaces)

    def close_notification(self, nid: int) -> None:
        self.client.close_notification(nid)

    def wait_ready(self, timeout: float = 5.0) -> bool:
        """Block until connected or given up (tests, start-up); True if available."""
        return self.client.wait_ready(timeout)

    def shutdown(self) -> None:
        self.client.shutdown()
