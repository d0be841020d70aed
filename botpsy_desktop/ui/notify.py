"""Alarm notifications: a small window, or a native notification while hidden, with a sound."""

from __future__ import annotations

import math
import struct
import wave
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QTimer, QUrl, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSystemTrayIcon,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.adapters.alarms.records import AlarmFired, MissedAlarm
from botpsy_desktop.ui.assets import asset
from botpsy_desktop.ui.desktop_notify import FreedesktopNotifications


def alarm_sound(fallback: Path) -> Path:
    """The shipped alarm sound (assets/sounds/alarm.wav), else a chime written to ``fallback``."""
    return asset("sounds/alarm.wav") or chime(fallback)


def chime(path: Path) -> Path:
    """Write a short two-tone chime WAV once (the fallback when the shipped sound is missing)."""
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    rate = 22050
    frames = bytearray()
    for freq, length in ((880.0, 0.18), (0.0, 0.06), (660.0, 0.28)):
        for i in range(int(rate * length)):
            fade = min(1.0, (int(rate * length) - i) / (rate * 0.03))
            value = math.sin(2 * math.pi * freq * i / rate) * 0.4 * fade if freq else 0.0
            frames += struct.pack("<h", int(value * 32767))
    tmp = path.with_suffix(".tmp")
    with wave.open(str(tmp), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(frames))
    tmp.replace(path)
    return path


class AlarmWindow(QDialog):
    """One ringing alarm: what it is, when it was due, Snooze and Dismiss (keyboard first)."""

    def __init__(
        self, event: AlarmFired, service: AlarmService, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self.fired = event  # (never `self.event`: that is QObject.event)
        self.service = service
        self.setObjectName("alarmWindow")
        self.setWindowTitle(f"BotPsy {event.kind.value}")
        self.setWindowFlag(Qt.WindowType.WindowStaysOnTopHint)
        layout = QVBoxLayout(self)
        title = QLabel(f"⏰ {event.label or event.kind.value.capitalize()}")
        title.setObjectName("alarmTitle")
        layout.addWidget(title)
        self.detail = QLabel(event.line())
        self.detail.setWordWrap(True)
        layout.addWidget(self.detail)
        row = QHBoxLayout()
        self.snooze_button = QPushButton("&Snooze")
        self.dismiss_button = QPushButton("&Dismiss")
        self.dismiss_button.setDefault(True)
        self.snooze_button.clicked.connect(self.snooze)
        self.dismiss_button.clicked.connect(self.dismiss)
        row.addWidget(self.snooze_button)
        row.addWidget(self.dismiss_button)
        layout.addLayout(row)
        self.outcome = ""

    def snooze(self) -> None:
        try:
            alarm = self.service.snooze(self.fired.id)
            self.outcome = f"snoozed until {alarm.next_ring}"
        except Exception as exc:  # shown, never raised into Qt
            self.outcome = f"could not snooze: {exc}"
        self.accept()

    def dismiss(self) -> None:
        try:
            self.service.dismiss(self.fired.id)
            self.outcome = "dismissed"
        except Exception as exc:
            self.outcome = f"could not dismiss: {exc}"
        self.accept()


class AlarmNotifier(QObject):
    """Carries alarms from the scheduler thread to the GUI thread and shows them, with sound.

    While the window is open a ringing alarm is a small window (Snooze/Dismiss). While it is
    hidden or closed (the app in the tray) the alarm is a native notification: the desktop's
    notification server over D-Bus (``desktop``) with Snooze and Dismiss buttons where the
    server offers actions, else the tray's message. Without either, the small window shows.
    Notifications of alarms snoozed or dismissed elsewhere (the tray menu, ``botpsy``) close.
    """

    fired = Signal(object)  # AlarmFired, emitted on the scheduler thread, queued to the GUI
    routineFired = Signal(object)  # AlarmFired of a routine: run, never rung (ui/routines.py)

    def __init__(
        self,
        service: AlarmService,
        sound_file: Path,
        tray: QSystemTrayIcon | None = None,
        parent: QWidget | None = None,
        desktop: FreedesktopNotifications | None = None,
    ) -> None:
        super().__init__()
        self.service = service
        self.tray = tray
        self.parent_widget = parent
        self.desktop = desktop
        self.windows: list[AlarmWindow] = []
        self.native: dict[int, int] = {}  # notification id -> alarm id
        self.notes: set[int] = set()  # plain notifications (a routine's answer) on the desktop
        self.sent: list[tuple[str, str, str]] = []  # (channel, title, text) of each notification
        self.sound = None
        try:
            from PySide6.QtMultimedia import QSoundEffect

            self.sound = QSoundEffect(self)
            self.sound.setSource(QUrl.fromLocalFile(str(chime(sound_file))))
            self.sound.setLoopCount(3)
        except (ImportError, OSError):  # no QtMultimedia (libpulse missing): notify silently
            self.sound = None
        if desktop is not None:
            desktop.shown.connect(self._on_shown)
            desktop.actionInvoked.connect(self._on_action)
            desktop.closed.connect(self._on_closed)
        self.sweeper = QTimer(self)  # closes what was handled elsewhere
        self.sweeper.timeout.connect(self.sweep)
        self.sweeper.start(2000)
        self.fired.connect(self.show_alarm)
        self._listener = self.fired.emit  # one object, so remove_listener finds it
        service.add_listener(self._listener)

    def window_hidden(self) -> bool:
        w = self.parent_widget
        return w is not None and (not w.isVisible() or w.isMinimized())

    def show_alarm(self, event: AlarmFired) -> AlarmWindow | None:
        """Ring: the sound, and a notification or the small window (see the class).

        A routine does not ring: it is handed on (``routineFired``) to be run.
        """
        if event.kind is AlarmKind.ROUTINE:
            self.routineFired.emit(event)
            return None
        if event.kind is AlarmKind.RESTORE:  # a change's way back: the app carries it out
            return None
        if self.sound is not None:
            self.sound.play()
        title = f"⏰ {event.label or event.kind.value.capitalize()}"
        text = event.line()
        channel = ""
        if self.window_hidden():
            channel = self._notify_natively(event, title, text)
        if channel == "dbus-actions":
            return None  # Snooze and Dismiss are on the notification itself
        window = AlarmWindow(event, self.service, self.parent_widget)
        self.windows.append(window)
        window.finished.connect(self._forget)
        window.show()
        window.raise_()
        return window

    def _notify_natively(self, event: AlarmFired, title: str, text: str) -> str:
        desktop = self.desktop
        if desktop is not None and desktop.available:
            actions = [("default", "Open BotPsy"), ("snooze", "Snooze"), ("dismiss", "Dismiss")]
            if desktop.notify(f"alarm:{event.id}", title, text, actions, urgency=2):
                channel = "dbus-actions" if desktop.actions else "dbus"
                self.sent.append((channel, title, text))
                return channel
        if self.tray is not None and QSystemTrayIcon.supportsMessages():
            self.tray.showMessage(title, text, QSystemTrayIcon.MessageIcon.Information, 15000)
            self.sent.append(("tray", title, text))
            return "tray"
        return ""

    def notify(self, title: str, text: str) -> str:
        """A plain notification (e.g. a routine's answer): the desktop's, else the tray's, else
        the window's status bar. Returns the channel used."""
        desktop = self.desktop
        channel = ""
        if desktop is not None and desktop.notify(
            f"note:{title}", title, text, [("default", "Open BotPsy")]
        ):
            channel = "dbus"  # (notify says False when there is no notification server)
        if not channel and self.tray is not None and QSystemTrayIcon.supportsMessages():
            self.tray.showMessage(title, text, QSystemTrayIcon.MessageIcon.Information, 15000)
            channel = "tray"
        if not channel:
            status = getattr(self.parent_widget, "statusBar", None)
            if callable(status):
                line = " · ".join(part for part in text.splitlines() if part.strip())
                status().showMessage(f"{title}: {line}", 30000)  # one line
                channel = "status"
        self.sent.append((channel, title, text))
        return channel

    def _on_shown(self, key: str, nid: int) -> None:
        if key.startswith("alarm:"):
            self.native[nid] = int(key.split(":", 1)[1])
        elif key.startswith("note:"):
            self.notes.add(nid)  # clicking it opens the window

    def _show_window(self) -> None:
        if self.parent_widget is not None:
            self.parent_widget.show()
            self.parent_widget.raise_()
            self.parent_widget.activateWindow()

    def _on_action(self, nid: int, action: str) -> None:
        if nid in self.notes:
            self.notes.discard(nid)
            if action == "default":
                self._show_window()
            return
        alarm_id = self.native.get(nid)
        if alarm_id is None:
            return
        try:
            if action == "snooze":
                self.service.snooze(alarm_id)
            elif action == "dismiss":
                self.service.dismiss(alarm_id)
            elif action == "default":
                self._show_window()
                return
        except Exception as exc:  # shown, never raised into Qt
            self.sent.append(("error", "Alarm", f"could not {action}: {exc}"))
        self.native.pop(nid, None)
        self._stop_sound_if_quiet()

    def _on_closed(self, nid: int, _reason: int) -> None:
        self.notes.discard(nid)
        self.native.pop(nid, None)
        self._stop_sound_if_quiet()

    def sweep(self) -> None:
        """Close notifications and windows of alarms no longer ringing (handled elsewhere)."""
        if not self.native and not self.windows:
            return
        try:
            ringing = {a.id for a in self.service.ringing()}
        except Exception:  # a busy database: next time
            return
        for nid, alarm_id in list(self.native.items()):
            if alarm_id not in ringing and self.desktop is not None:
                self.desktop.close_notification(nid)
                self.native.pop(nid, None)
        for window in list(self.windows):
            if window.fired.id not in ringing and window.isVisible():
                window.outcome = window.outcome or "handled elsewhere"
                window.accept()
        self._stop_sound_if_quiet()

    def _forget(self) -> None:
        self.windows = [w for w in self.windows if w.isVisible()]
        self._stop_sound_if_quiet()

    def _stop_sound_if_quiet(self) -> None:
        if not self.windows and not self.native and self.sound is not None:
            self.sound.stop()

    def missed_text(self, missed: list[MissedAlarm]) -> str:
        now = self.service.now()
        return "\n".join(m.line(now) for m in missed if m.kind is not AlarmKind.RESTORE)

    def close(self) -> None:
        self.sweeper.stop()
        self.service.remove_listener(self._listener)
