"""The system-tray icon and its menu; the app copes with desktops that have no tray."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QApplication, QMenu, QSystemTrayIcon

from botpsy_desktop.agent.gate import InboxEntry
from botpsy_desktop.ui.icons import tray_icon
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.quick import QuickCommandBox


class Tray(QObject):
    """Open, quick command, pending approvals, alarms, quit. ``available`` is False without a
    tray. A background run's new approval request is announced with a tray message while the
    window is hidden; the "approvals waiting" entry opens the pending-approvals panel."""

    def __init__(self, window: MainWindow, quick: QuickCommandBox) -> None:
        super().__init__()
        self.window = window
        self.quick = quick
        self.available = QSystemTrayIcon.isSystemTrayAvailable()
        self.icon: QSystemTrayIcon | None = None
        self.menu = QMenu()
        self.open_action = QAction("Open BotPsy", self.menu)
        self.open_action.triggered.connect(self.show_window)
        self.quick_action = QAction("Quick command…", self.menu)
        self.quick_action.triggered.connect(quick.popup)
        self.pending_action = QAction("No approvals waiting", self.menu)
        self.pending_action.triggered.connect(self.show_pending)
        self.alarms_menu = QMenu("Alarms")
        self.quit_action = QAction("Quit BotPsy", self.menu)
        self.quit_action.triggered.connect(self.quit)
        for action in (self.open_action, self.quick_action, self.pending_action):
            self.menu.addAction(action)
        self.menu.addMenu(self.alarms_menu)
        self.menu.addSeparator()
        self.menu.addAction(self.quit_action)
        self.menu.aboutToShow.connect(self.refresh)
        if self.available:
            self.icon = QSystemTrayIcon(tray_icon(), self)
            self.icon.setToolTip("BotPsy")
            self.icon.setContextMenu(self.menu)
            self.icon.activated.connect(self._activated)
            self.icon.messageClicked.connect(self._message_clicked)
            self.icon.show()
        self.last_message: tuple[str, str] | None = None  # what the tray last announced
        self._message_opens = ""  # what clicking that message opens
        window.pending.changed.connect(lambda _n: self.refresh())
        window.pending.arrived.connect(self._approval_arrived)
        self.refresh()

    def pending(self) -> int:
        """Approvals waiting: open approval dialogs plus the background runs' queue."""
        dialogs = [*self.window.open_dialogs, *self.quick.dialogs]
        shown = {id(d.request) for d in dialogs if not d.request.decided}
        queued = {id(e.request) for e in self.window.pending.entries()}
        return len(shown | queued)

    def refresh(self) -> None:
        n = self.pending()
        self.pending_action.setText(
            f"{n} approval{'s' if n != 1 else ''} waiting" if n else "No approvals waiting"
        )
        self.pending_action.setEnabled(n > 0)
        if self.icon is not None:
            self.icon.setIcon(tray_icon(badge=n))
        self._refresh_alarms()

    def _refresh_alarms(self) -> None:
        """Upcoming and ringing alarms; a ringing one can be snoozed or dismissed from here."""
        self.alarms_menu.clear()
        service = self.window.app.alarms
        if service is None:
            self.alarms_menu.setEnabled(False)
            return
        from botpsy_desktop.adapters.alarms.when import format_time

        now = service.now()
        alarms = [a for a in service.alarms() if a.next_ring is not None or a.status == "ringing"]
        if not alarms:
            self.alarms_menu.addAction("No alarms").setEnabled(False)
        for alarm in alarms[:8]:
            name = alarm.label or alarm.kind.value
            if alarm.status == "ringing":
                snooze = self.alarms_menu.addAction(f"⏰ {name}: snooze")
                snooze.triggered.connect(lambda _c=False, i=alarm.id: service.snooze(i))
                dismiss = self.alarms_menu.addAction(f"⏰ {name}: dismiss")
                dismiss.triggered.connect(lambda _c=False, i=alarm.id: service.dismiss(i))
            elif alarm.next_ring is not None:
                self.alarms_menu.addAction(
                    f"{name} — {format_time(alarm.next_ring, now)}"
                ).setEnabled(False)

    def _activated(self, reason: QSystemTrayIcon.ActivationReason) -> None:
        if reason == QSystemTrayIcon.ActivationReason.Trigger:
            if self.window.isVisible() and self.window.isActiveWindow():
                self.window.hide()
            else:
                self.show_window()

    def show_window(self) -> None:
        self.window.show()
        self.window.raise_()
        self.window.activateWindow()

    def show_pending(self) -> None:
        """The open approval dialog of a request in the foreground, else the queue's panel."""
        for dialog in [*self.window.open_dialogs, *self.quick.dialogs]:
            if not dialog.request.decided:
                dialog.show()
                dialog.raise_()
                dialog.activateWindow()
                return
        self.window.show_approvals()

    def notify(self, title: str, text: str, opens: str = "") -> bool:
        """A tray message (the portable notification); False where there is no tray."""
        self.last_message = (title, text)
        self._message_opens = opens
        if self.icon is None or not QSystemTrayIcon.supportsMessages():
            return False
        self.icon.showMessage(title, text, QSystemTrayIcon.MessageIcon.Information, 15000)
        return True

    native_approvals: Callable[[], bool] | None = None
    """True while approvals raise the desktop's own notifications (agent/approval_notes.py,
    with Approve / Deny / Open): the tray message would say it twice."""

    def _approval_arrived(self, entry: InboxEntry) -> None:
        self.refresh()
        if self.window.isVisible() and not self.window.isMinimized():
            return  # the status bar shows it
        if self.native_approvals is not None and self.native_approvals():
            return
        origin = self.window.pending.origin_text(entry)
        self.notify(
            "BotPsy needs your approval",
            f"{origin[0].upper()}{origin[1:]} wants to run {entry.request.tool}. "
            "Nothing runs until you approve it.",
            opens="approvals",
        )

    def _message_clicked(self) -> None:
        if self._message_opens == "approvals":
            self.show_pending()
        else:
            self.show_window()

    def quit(self) -> None:
        self.window.quitting = True
        self.window.close()
        self.quick.close()
        QApplication.quit()
