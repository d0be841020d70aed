"""The microphone button (hold, or click twice, to speak a request), and spoken replies."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QPushButton, QWidget

from botpsy_desktop.app import App
from botpsy_desktop.speech.capture import Microphone
from botpsy_desktop.speech.recognizer import SpeechError

if TYPE_CHECKING:
    from botpsy_desktop.speech.tts import ReplySpeaker

HOLD_S = 0.4
"""A press held this long is push-to-talk (release stops); a shorter one is a click (toggle)."""


class VoiceController(QObject):
    """Records and recognises on a worker thread (the GUI thread never waits on the microphone
    or the model) and reports by signals; the speech model loads at the first recognition."""

    listening = Signal(str)  # the microphone's name
    recognising = Signal()
    partial = Signal(str)  # the words so far
    recognised = Signal(str)
    failed = Signal(str, str)  # kind, message (with what to do)
    finished = Signal()

    def __init__(self, app: App, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.app = app
        self._stop = threading.Event()
        self._cancel = threading.Event()
        self._thread: threading.Thread | None = None
        self._recording = False

    @property
    def active(self) -> bool:
        """Recording: the microphone is open (or opening). Recognising the recording is not:
        the words it gives arrive while the worker thread is still ending, and must run."""
        return self._recording and self._busy()

    def _busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        self.app.stop_speaking()  # pressing push-to-talk ends the reply being read aloud
        if self._busy():
            return False
        self._recording = True
        self._stop, self._cancel = threading.Event(), threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._stop, self._cancel), name="voice-input", daemon=True
        )
        self._thread.start()
        return True

    def stop(self) -> None:
        """End the recording; what was said is recognised."""
        self._stop.set()

    def cancel(self) -> None:
        """End the recording and drop it: nothing is recognised, nothing is sent."""
        self._cancel.set()
        self._stop.set()

    def _run(self, stop: threading.Event, cancel: threading.Event) -> None:
        voice = self.app.voice()
        try:
            voice.prepare()

            def started(mic: Microphone) -> None:
                self.listening.emit(mic.name)

            try:
                rec = voice.record(stop, on_start=started)
            finally:
                self._recording = False
            if cancel.is_set():
                return
            self.recognising.emit()
            result = voice.recognise(rec, on_text=self.partial.emit)
            if not cancel.is_set():
                self.recognised.emit(result.text.strip())
        except SpeechError as exc:
            if not cancel.is_set():
                self.failed.emit(exc.kind, str(exc))
        except Exception as exc:  # never lose the button to an unexpected failure
            self.failed.emit("engine", f"Voice input failed: {exc}")
        finally:
            self._recording = False
            self.finished.emit()

    def shutdown(self) -> None:
        self.cancel()
        if self._thread is not None:
            self._thread.join(timeout=10)


class MicButton(QPushButton):
    """Hold to talk, or click to start and click again to stop."""

    def __init__(self, controller: VoiceController, parent: QWidget | None = None) -> None:
        super().__init__("🎤", parent)
        self.controller = controller
        self.setObjectName("micButton")
        self.setCheckable(False)
        self.setToolTip("Speak a request: hold, or click and click again when you are done")
        self.setAccessibleName("Speak a request")
        self._pressed_at = 0.0
        self.pressed.connect(self._on_pressed)
        self.released.connect(self._on_released)
        controller.finished.connect(self._on_finished)

    def _on_pressed(self) -> None:
        if self.controller.active:
            self.controller.stop()  # the second click of click-to-toggle
            return
        self._pressed_at = time.monotonic()
        if self.controller.start():
            self.setText("⏹")

    def _on_released(self) -> None:
        held = self._pressed_at and time.monotonic() - self._pressed_at >= HOLD_S
        self._pressed_at = 0.0
        if held and self.controller.active:
            self.controller.stop()  # push-to-talk: released

    def _on_finished(self) -> None:
        self.setText("🎤")


class SpokenReplies(QObject):
    """Reads a face's final answers aloud when voice.speak_replies is on. Speaking runs on the
    speaker's own thread (the GUI thread only starts it); a reply that cannot be heard (no
    espeak-ng, no loudspeaker) is reported by ``failed`` and the answer stays on screen."""

    failed = Signal(str)
    spoken = Signal()  # a reply was played to its end, or stopped

    def __init__(self, app: App, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.app = app

    def answer(self, text: str, note: str = "") -> bool:
        """Speak a final answer if spoken replies are on; True when speaking started. The
        answer's note (it describes an action that was not carried out) is spoken after it:
        whoever only listens must hear it too."""
        if not self.app.config.voice.speak_replies:
            return False
        speaker: ReplySpeaker = self.app.speaker()
        return speaker.say(f"{text}\n{note}" if note else text, on_done=self._done)

    def _done(self, error: SpeechError | None) -> None:  # on the speaker's thread
        if error is not None:
            self.failed.emit(str(error))
        self.spoken.emit()
