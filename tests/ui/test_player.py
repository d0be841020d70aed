"""The Qt music player for real: QMediaPlayer plays generated WAV files offscreen, no sound card.

Needs Debian's libpulse0 for QtMultimedia to import (.ci/run installs it).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.music import MusicController, MusicLibrary, Player
from botpsy_desktop.adapters.music.player import PlayerState
from botpsy_desktop.ui.player import QtPlayer
from tests.helpers.audio import make_library, write_wav


@pytest.fixture
def player(qtbot: QtBot) -> Iterator[QtPlayer]:
    made = QtPlayer()
    yield made
    made.stop()
    qtbot.wait(50)
    made.deleteLater()


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
