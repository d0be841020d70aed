"""The Qt music player for real: QMediaPlayer plays generated WAV files offscreen, no sound card.

Needs Debian's libpulse0 for QtMultimedia to import (tools/install-test-deps.sh installs it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.services import missing

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

try:
    from PySide6 import QtMultimedia  # noqa: F401
except ImportError as exc:  # libpulse.so.0 missing
    missing(f"QtMultimedia's system library ({exc})", "apt install libpulse0", module=True)

from PySide6.QtCore import QObject, QThread, QTimer
from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.music import MusicController, MusicLibrary, Player
from botpsy_desktop.adapters.music.player import PlayerState
from botpsy_desktop.ui.player import QtPlayer
from tests.helpers.audio import make_library, write_wav


@pytest.fixture
def player(qtbot: QtBot) -> Iterator[QtPlayer]:
    made = QtPlayer()
    yield made
    made.close()
    assert made.media_thread().isFinished()
    made.deleteLater()


class Heartbeat:
    """Counts ticks of a 10 ms timer on the GUI thread; the longest gap shows a freeze."""

    def __init__(self) -> None:
        self.ticks = 0
        self.longest_gap = 0.0
        self._last = time.monotonic()
        self._timer = QTimer()
        self._timer.setInterval(10)
        self._timer.timeout.connect(self._tick)
        self._timer.start()

    def _tick(self) -> None:
        now = time.monotonic()
        self.longest_gap = max(self.longest_gap, now - self._last)
        self._last = now
        self.ticks += 1

    def stop(self) -> None:
        self._timer.stop()


def test_it_is_a_player(player: QtPlayer) -> None:
    assert isinstance(player, Player)
    assert player.name == "qt" and player.can_play(Path("a.FLAC"))
    assert player.state() == PlayerState.STOPPED and player.position() == 0.0


def test_a_wav_plays_through_to_its_end(qtbot: QtBot, player: QtPlayer, tmp_path: Path) -> None:
    finished: list[bool] = []
    player.on_finished(lambda: finished.append(True))
    player.load(write_wav(tmp_path / "tone.wav", 1.0))
    player.play()
    assert player.state() == PlayerState.PLAYING
    qtbot.waitUntil(lambda: player.position() > 0.1, timeout=5000)
    qtbot.waitUntil(lambda: finished == [True], timeout=10000)
    assert player.state() == PlayerState.STOPPED
    assert player.position() == pytest.approx(1.0, abs=0.15)
    assert player.last_error() is None


def test_pause_holds_the_position_and_resume_goes_on(
    qtbot: QtBot, player: QtPlayer, tmp_path: Path
) -> None:
    player.load(write_wav(tmp_path / "long.wav", 4.0))
    player.set_volume(0.25)
    player.play()
    qtbot.waitUntil(lambda: player.position() > 0.2, timeout=5000)
    player.pause()
    qtbot.wait(200)  # let the pause reach the player
    assert player.state() == PlayerState.PAUSED
    held = player.position()
    qtbot.wait(400)
    assert player.position() == held
    player.resume()
    qtbot.waitUntil(lambda: player.position() > held + 0.2, timeout=5000)
    assert player.state() == PlayerState.PLAYING
    player.stop()
    qtbot.wait(100)
    assert player.state() == PlayerState.STOPPED and player.position() == 0.0


def test_commands_from_a_worker_thread_run_on_the_qt_thread(
    qtbot: QtBot, player: QtPlayer, tmp_path: Path
) -> None:
    track = write_wav(tmp_path / "tone.wav", 2.0)

    def tool_call() -> None:  # what a tool does on the agent's worker thread
        player.load(track)
        player.play()

    worker = threading.Thread(target=tool_call)
    worker.start()
    worker.join(5)
    qtbot.waitUntil(lambda: player.position() > 0.2, timeout=5000)
    assert player.state() == PlayerState.PLAYING


def test_a_file_qt_cannot_play_is_reported(qtbot: QtBot, player: QtPlayer, tmp_path: Path) -> None:
    bad = tmp_path / "bad.mp3"
    bad.write_bytes(b"not audio at all " * 100)
    player.load(bad)
    player.play()
    qtbot.waitUntil(lambda: player.last_error() is not None, timeout=5000)
    qtbot.waitUntil(lambda: player.state() == PlayerState.STOPPED, timeout=5000)


def test_the_queue_plays_through_an_album_with_the_qt_player(
    qtbot: QtBot, player: QtPlayer, tmp_path: Path
) -> None:
    music = make_library(tmp_path / "Music", seconds=0.5)
    library = MusicLibrary([music], None)
    try:
        control = MusicController(library, player)
        started = control.play("Quiet Band", "artist", shuffle=False)
        assert started["player"] == "qt" and started["track"]["title"] == "Lullaby"
        qtbot.waitUntil(
            lambda: control.now_playing().get("track", {}).get("title") == "Moonlight",
            timeout=10000,
        )
        qtbot.waitUntil(lambda: control.now_playing()["state"] == "stopped", timeout=10000)
        assert control.now_playing()["queue"] == "track 2 of 2"
    finally:
        library.close()


def test_the_player_lives_off_the_gui_thread(player: QtPlayer) -> None:
    media = player.media_thread()
    assert media.isRunning() and media is not QThread.currentThread()
    assert player.thread() is QThread.currentThread()  # the facade stays with the window


def test_stopping_and_restarting_many_times_never_blocks_the_gui_thread(
    qtbot: QtBot, player: QtPlayer, tmp_path: Path
) -> None:
    track = write_wav(tmp_path / "tone.wav", 3.0)
    other = write_wav(tmp_path / "other.wav", 3.0, frequency=660.0)
    finished: list[bool] = []
    player.on_finished(lambda: finished.append(True))
    beat = Heartbeat()
    longest_call = 0.0
    try:
        for round_ in range(40):
            started = time.monotonic()
            player.load(track if round_ % 2 else other)
            player.play()
            longest_call = max(longest_call, time.monotonic() - started)
            if round_ % 4 == 0:  # now and then it really plays before the stop
                qtbot.waitUntil(lambda: player.position() > 0.05, timeout=5000)
            else:
                qtbot.wait(5)
            started = time.monotonic()
            player.stop()
            if round_ % 3 == 0:
                player.play()  # a restart straight after the stop, with no wait
                player.stop()
            longest_call = max(longest_call, time.monotonic() - started)
        player.load(track)
        player.play()
        qtbot.waitUntil(lambda: player.position() > 0.2, timeout=5000)
        assert player.state() == PlayerState.PLAYING and player.last_error() is None
    finally:
        beat.stop()
    # commands are queued, never waited on; the GUI thread's timer kept ticking throughout
    assert longest_call < 1.0, f"a player command held the GUI thread {longest_call:.2f} s"
    assert beat.ticks > 40 and beat.longest_gap < 2.5, (beat.ticks, beat.longest_gap)
    assert finished == []  # no track was left to play to its end


def test_a_stuck_media_backend_does_not_freeze_the_window(qtbot: QtBot, tmp_path: Path) -> None:
    made = QtPlayer()
    made.load(write_wav(tmp_path / "tone.wav", 1.0))
    stuck, release = threading.Event(), threading.Event()

    def hang(*_: object) -> None:  # what the FFmpeg backend did inside QMediaPlayer.stop()
        stuck.set()
        release.wait(30)

    on_media_thread = QObject()
    on_media_thread.moveToThread(made.media_thread())
    QTimer.singleShot(0, on_media_thread, hang)  # the media thread's event loop is now stuck
    assert stuck.wait(5)
    beat = Heartbeat()
    try:
        made.play()
        made.stop()
        qtbot.wait(300)  # the GUI thread goes on while the media thread is stuck
        started = time.monotonic()
        made.close()  # gives up on the stuck thread after a bounded wait
        waited = time.monotonic() - started
        assert not made.media_thread().isFinished()
        qtbot.wait(50)
    finally:
        beat.stop()
        release.set()
    assert made.media_thread().wait(5000)  # once unstuck it ends
    assert waited < 10 and beat.ticks > 10, (waited, beat.ticks)
    assert made.state() == PlayerState.STOPPED
