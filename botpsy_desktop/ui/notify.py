"""Alarm notifications: a ringing alarm shows a small window with Snooze/Dismiss and a sound."""

from __future__ import annotations

import math
import struct
import wave
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QUrl, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSystemTrayIcon,
    QVBoxLayout,
    QWidget,
)

from botpsy_desktop.adapters.alarms import AlarmService
from botpsy_desktop.adapters.alarms.service import AlarmFired, MissedAlarm
from botpsy_desktop.ui.assets import asset


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
    """Carries alarms from the scheduler thread to the GUI thread and shows them."""

    fired = Signal(object)  # AlarmFired, emitted on the scheduler thread, queued to the GUI

    def __init__(
        self,
        service: AlarmService,
        sound_file: Path,
        tray: QSystemTrayIcon | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__()
        self.service = service
        self.tray = tray
        self.parent_widget = parent
        self.windows: list[AlarmWindow] = []
        self.sound = None
        try:
            from PySide6.QtMultimedia import QSoundEffect

            self.sound = QSoundEffect(self)
            self.sound.setSource(QUrl.fromLocalFile(str(chime(sound_file))))
            self.sound.setLoopCount(3)
        except (ImportError, OSError):  # no QtMultimedia (libpulse missing): notify silently
            self.sound = None
        self.fired.connect(self.show_alarm)
        service.add_listener(self.fired.emit)

    def show_alarm(self, event: AlarmFired) -> AlarmWindow:
        window = AlarmWindow(event, self.service, self.parent_widget)
        self.windows.append(window)
        window.finished.connect(self._forget)
        window.show()
        window.raise_()
        if self.tray is not None:
            self.tray.showMessage(
                f"BotPsy {event.kind.value}",
                event.line(),
                QSystemTrayIcon.MessageIcon.Information,
                15000,
            )
        if self.sound is not None:
            self.sound.play()
        return window

    def _forget(self) -> None:
        self.windows = [w for w in self.windows if w.isVisible()]
        if not self.windows and self.sound is not None:
            self.sound.stop()

    def missed_text(self, missed: list[MissedAlarm]) -> str:
        now = self.service.now()
        return "\n".join(m.line(now) for m in missed)

    def close(self) -> None:
        self.service.remove_listener(self.fired.emit)
