"""The music Player for the window: QMediaPlayer on its own thread, callable from any thread.

``QMediaPlayer.stop()`` called from Python deadlocked: the call holds Python's interpreter lock
while Qt's FFmpeg backend tears down its threads (waiting on a mutex in ``QObject::disconnect``),
and a backend thread holding that mutex needs the interpreter lock to call into the Python
wrapper of the player. So no Python frame ever calls the backend: each command is queued with
``QMetaObject.invokeMethod`` to the player's own C++ slot and runs from the event loop of a media
thread of its own, without the lock. The command returns at once; state and position come back
through the player's signals, and no caller, the GUI thread included, ever waits on the backend
(``close`` waits a bounded time, then leaves a stuck backend behind).

(``invokeMethod`` rather than a Python signal's ``emit``: in PySide6 6.12.0 every ``emit()``
from Python drops a reference to ``True``, and a player that is told thousands of things would
take the interpreter down with it.)
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import (
    Q_ARG,
    QGenericArgumentHolder,
    QMetaObject,
    QObject,
    Qt,
    QThread,
    QUrl,
    Slot,
)
from PySide6.QtMultimedia import QAudioOutput, QMediaPlayer

from botpsy_desktop.adapters.music.library import AUDIO_SUFFIXES
from botpsy_desktop.adapters.music.player import Player, PlayerState
from botpsy_desktop.core.errors import ToolError

log = logging.getLogger(__name__)

_QT_STATES = {
    QMediaPlayer.PlaybackState.StoppedState: PlayerState.STOPPED,
    QMediaPlayer.PlaybackState.PlayingState: PlayerState.PLAYING,
    QMediaPlayer.PlaybackState.PausedState: PlayerState.PAUSED,
}

CLOSE_WAIT_MS = 3000
"""How long ``close`` waits for the media thread to stop before leaving a stuck backend."""

_ABANDONED: list[QThread] = []
"""Media threads whose backend did not stop in time: kept so that Qt never destroys a running
thread (which aborts the process); they end with the process."""


class _Media(QObject):
    """Lives on the media thread: owns the QMediaPlayer and keeps the facade's state from its
    signals."""

    def __init__(self, owner: QtPlayer) -> None:
        super().__init__()
        self._owner = owner
        self.media: QMediaPlayer | None = None
        self.audio: QAudioOutput | None = None

    @Slot()
    def start(self) -> None:
        """Make the player here, on the media thread."""
        self.media = media = QMediaPlayer(self)
        self.audio = audio = QAudioOutput(self)
        media.setAudioOutput(audio)
        # the slots are this object's, so the signals are handled here on the media thread
        media.playbackStateChanged.connect(self._on_state)
        media.positionChanged.connect(self._on_position)
        media.mediaStatusChanged.connect(self._on_status)
        media.errorOccurred.connect(self._on_error)
        self._owner._started.set()

    @Slot()
    def shut(self) -> None:
        """Free the player here, on its own thread (stopped by the queued stop before this),
        then end the thread."""
        for child in self.children():
            child.deleteLater()
        thread = self.thread()
        self.deleteLater()
        thread.quit()

    @Slot(QMediaPlayer.PlaybackState)
    def _on_state(self, state: QMediaPlayer.PlaybackState) -> None:
        self._owner._on_state(state)

    @Slot(int)
    def _on_position(self, milliseconds: int) -> None:
        self._owner._on_position(milliseconds)

    @Slot(QMediaPlayer.MediaStatus)
    def _on_status(self, status: QMediaPlayer.MediaStatus) -> None:
        if self._owner._on_status(status):  # the end of a track: tell the facade's thread
            QMetaObject.invokeMethod(self._owner, "_finished", Qt.ConnectionType.QueuedConnection)

    @Slot(QMediaPlayer.Error, str)
    def _on_error(self, error: QMediaPlayer.Error, message: str) -> None:
        self._owner._on_error(error, message)


class QtPlayer(QObject):
    """Plays music through Qt Multimedia (its FFmpeg backend plays every library format).

    Tools run on worker threads and the window on the GUI thread; the QMediaPlayer on a media
    thread of its own. Commands are queued to that thread and return at once, and the state and
    position are kept from the player's signals. ``on_finished`` callbacks run on the thread
    that made this object (the GUI thread) when a track reaches its end.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = threading.Lock()
        self._state = PlayerState.STOPPED
        self._position = 0.0
        self._error: str | None = None
        self._source: Path | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._closed = False
        self._started = threading.Event()
        self._thread = QThread()
        self._thread.setObjectName("botpsy-media")
        self._worker = _Media(self)
        self._worker.moveToThread(self._thread)
        self._thread.started.connect(self._worker.start)
        self._thread.start()
        # commands go to the player once it exists: a short wait (a fresh thread makes it)
        if not self._started.wait(10):
            log.warning("the media thread did not make its player within 10 s")

    # --- Player --------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return "qt"

    def can_play(self, path: Path) -> bool:
        return path.suffix.lower() in AUDIO_SUFFIXES

    def load(self, path: Path) -> None:
        if not path.is_file():
            raise ToolError(f"The music file {path} no longer exists.", "Scan the library again.")
        with self._lock:
            self._source = path
            self._state = PlayerState.STOPPED
            self._position = 0.0
            self._error = None
        self._send("stop")
        self._send("setSource", Q_ARG(QUrl, QUrl.fromLocalFile(str(path))))

    def play(self) -> None:
        with self._lock:
            if self._source is None:
                raise ToolError("Nothing is loaded to play.", "Choose some music first.")
            if self._error is not None:
                # Qt already refused this source (on a fast machine before play() is called):
                # it stays stopped, and Qt sends no new state for a play() it ignores
                return
            self._state = PlayerState.PLAYING
        self._send("play")

    def pause(self) -> None:
        with self._lock:
            if self._state != PlayerState.PLAYING:
                return
            self._state = PlayerState.PAUSED
        self._send("pause")

    def resume(self) -> None:
        with self._lock:
            if self._state != PlayerState.PAUSED:
                return
            self._state = PlayerState.PLAYING
        self._send("play")

    def stop(self) -> None:
        with self._lock:
            self._state = PlayerState.STOPPED
            self._position = 0.0
        self._send("stop")

    def set_volume(self, volume: float) -> bool:
        if not 0.0 <= volume <= 1.0:
            raise ValueError("volume must be between 0.0 and 1.0")
        self._send("setVolume", Q_ARG("float", volume), to_audio=True)
        return True

    def position(self) -> float:
        with self._lock:
            return self._position

    def state(self) -> PlayerState:
        with self._lock:
            return self._state

    def on_finished(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)

    def last_error(self) -> str | None:
        with self._lock:
            return self._error

    def close(self) -> None:
        """Stop playback and end the media thread, waiting at most CLOSE_WAIT_MS for it."""
        with self._lock:
            if self._closed:
                return
            self._state = PlayerState.STOPPED
            self._position = 0.0
        self._send("stop")
        with self._lock:
            self._closed = True
        QMetaObject.invokeMethod(self._worker, "shut", Qt.ConnectionType.QueuedConnection)
        if not self._thread.wait(CLOSE_WAIT_MS):
            log.warning("the media backend did not stop within %d ms; left behind", CLOSE_WAIT_MS)
            _ABANDONED.append(self._thread)

    def media_thread(self) -> QThread:
        """The thread the QMediaPlayer lives on (for diagnostics and tests)."""
        return self._thread

    # --- from the media thread -----------------------------------------------------------------

    def _send(self, slot: str, *args: QGenericArgumentHolder, to_audio: bool = False) -> None:
        """Queue a call of the player's (or its audio output's) C++ ``slot`` to the media thread;
        never waits for it."""
        with self._lock:
            if self._closed:
                return
        target = self._worker.audio if to_audio else self._worker.media
        if target is None:
            return
        try:
            QMetaObject.invokeMethod(target, slot, Qt.ConnectionType.QueuedConnection, *args)
        except RuntimeError:  # closed meanwhile, from another thread: the player is gone
            return

    def _on_state(self, state: QMediaPlayer.PlaybackState) -> None:
        with self._lock:
            self._state = _QT_STATES.get(state, PlayerState.STOPPED)

    def _on_position(self, milliseconds: int) -> None:
        with self._lock:
            self._position = milliseconds / 1000

    def _on_status(self, status: QMediaPlayer.MediaStatus) -> bool:
        """Keep the state for ``status``; True when a track reached its end."""
        if status == QMediaPlayer.MediaStatus.InvalidMedia:
            with self._lock:
                self._state = PlayerState.STOPPED
                if self._error is None:
                    self._error = f"Qt cannot play {self._source.name if self._source else 'it'}"
            return False
        if status != QMediaPlayer.MediaStatus.EndOfMedia:
            return False
        with self._lock:
            self._state = PlayerState.STOPPED
        return True

    def _on_error(self, error: QMediaPlayer.Error, message: str) -> None:
        if error == QMediaPlayer.Error.NoError:
            return
        with self._lock:
            self._error = message or str(error)
            self._state = PlayerState.STOPPED

    # --- on this object's thread ---------------------------------------------------------------

    @Slot()
    def _finished(self) -> None:
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()


def as_player(player: QtPlayer) -> Player:
    """``player`` as the adapters' Player (and a static check that QtPlayer is one)."""
    return player
