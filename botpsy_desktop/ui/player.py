"""The music Player for the window: QMediaPlayer with a QAudioOutput, callable from any thread."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QUrl, Signal, Slot
from PySide6.QtMultimedia import QAudioOutput, QMediaPlayer

from botpsy_desktop.adapters.music.library import AUDIO_SUFFIXES
from botpsy_desktop.adapters.music.player import Player, PlayerState
from botpsy_desktop.core.errors import ToolError

_QT_STATES = {
    QMediaPlayer.PlaybackState.StoppedState: PlayerState.STOPPED,
    QMediaPlayer.PlaybackState.PlayingState: PlayerState.PLAYING,
    QMediaPlayer.PlaybackState.PausedState: PlayerState.PAUSED,
}


class QtPlayer(QObject):
    """Plays music through Qt Multimedia (its FFmpeg backend plays every library format).

    Tools run on worker threads while the QMediaPlayer belongs to the thread that made this
    object (the GUI thread): commands are queued to that thread and return at once, and the
    state and position are kept from the player's signals. ``on_finished`` callbacks run on
    that thread when a track reaches its end.
    """

    _call = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._media = QMediaPlayer(self)
        self._audio = QAudioOutput(self)
        self._media.setAudioOutput(self._audio)
        self._lock = threading.Lock()
        self._state = PlayerState.STOPPED
        self._position = 0.0
        self._error: str | None = None
        self._source: Path | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._call.connect(self._run)
        self._media.playbackStateChanged.connect(self._on_state)
        self._media.positionChanged.connect(self._on_position)
        self._media.mediaStatusChanged.connect(self._on_status)
        self._media.errorOccurred.connect(self._on_error)

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
        url = QUrl.fromLocalFile(str(path))

        def load() -> None:
            self._media.stop()
            self._media.setSource(url)

        self._post(load)

    def play(self) -> None:
        with self._lock:
            if self._source is None:
                raise ToolError("Nothing is loaded to play.", "Choose some music first.")
            self._state = PlayerState.PLAYING
        self._post(self._media.play)

    def pause(self) -> None:
        with self._lock:
            if self._state != PlayerState.PLAYING:
                return
            self._state = PlayerState.PAUSED
        self._post(self._media.pause)

    def resume(self) -> None:
        with self._lock:
            if self._state != PlayerState.PAUSED:
                return
            self._state = PlayerState.PLAYING
        self._post(self._media.play)

    def stop(self) -> None:
        with self._lock:
            self._state = PlayerState.STOPPED
            self._position = 0.0
        self._post(self._media.stop)

    def set_volume(self, volume: float) -> bool:
        if not 0.0 <= volume <= 1.0:
            raise ValueError("volume must be between 0.0 and 1.0")
        self._post(lambda: self._audio.setVolume(volume))
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
        self.stop()

    # --- the Qt thread ---------------------------------------------------------------------------

    def _post(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on this object's thread: now if already there, else queued."""
        self._call.emit(fn)

    @Slot(object)
    def _run(self, fn: Callable[[], object]) -> None:
        fn()

    def _on_state(self, state: QMediaPlayer.PlaybackState) -> None:
        with self._lock:
            self._state = _QT_STATES.get(state, PlayerState.STOPPED)

    def _on_position(self, milliseconds: int) -> None:
        with self._lock:
            self._position = milliseconds / 1000

    def _on_status(self, status: QMediaPlayer.MediaStatus) -> None:
        if status == QMediaPlayer.MediaStatus.InvalidMedia:
            with self._lock:
                self._state = PlayerState.STOPPED
                if self._error is None:
                    self._error = f"Qt cannot play {self._source.name if self._source else 'it'}"
            return
        if status != QMediaPlayer.MediaStatus.EndOfMedia:
            return
        with self._lock:
            self._state = PlayerState.STOPPED
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    def _on_error(self, error: QMediaPlayer.Error, message: str) -> None:
        if error == QMediaPlayer.Error.NoError:
            return
        with self._lock:
            self._error = message or str(error)
            self._state = PlayerState.STOPPED


def as_player(player: QtPlayer) -> Player:
    """``player`` as the adapters' Player (and a static check that QtPlayer is one)."""
    return player
