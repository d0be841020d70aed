"""The music adapter: library and tags on generated WAV files, queue, players and the tools.

Players: the headless player is tested for real with mpv (``--ao=null``: real-time playback
with no sound card; .ci/run installs mpv) and aplay (``-D null``) where they are installed.
The controller tests use mpv when it is there and a hand-written FakePlayer otherwise, and say
which in their ids. The Qt player is tested for real in tests/ui/test_player.py.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.adapters.music import (
    ExternalPlayer,
    MusicController,
    MusicLibrary,
    NoPlayer,
    Player,
    PlayerState,
    PlayQueue,
    headless_player,
    music_tools,
)
from botpsy_desktop.adapters.music.library import Track, read_track
from botpsy_desktop.adapters.music.player import PROGRAMS
from botpsy_desktop.cli import main
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tool
from tests.helpers.audio import (
    make_library,
    tag_wav,
    write_tagged_flac,
    write_tagged_mp3,
    write_wav,
)
from tests.helpers.services import needs

MPV = shutil.which("mpv")
APLAY = shutil.which("aplay")
needs_mpv = needs(MPV is not None, "mpv (a headless music player)", "apt install mpv")
TRACK_S = 0.6  # generated tracks are this long, so playing through them is quick


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


class FakePlayer:
    """Plays nothing; records calls and ends a track when the test says so."""

    name = "fake"

    def __init__(self) -> None:
        self.loaded: list[Path] = []
        self.volume = 1.0
        self._state = PlayerState.STOPPED
        self._callbacks: list[Callable[[], None]] = []
        self._started = 0.0

    def can_play(self, path: Path) -> bool:
        return path.suffix == ".wav"

    def load(self, path: Path) -> None:
        self.loaded.append(path)
        self._state = PlayerState.STOPPED

    def play(self) -> None:
        self._state = PlayerState.PLAYING
        self._started = time.monotonic()

    def pause(self) -> None:
        self._state = PlayerState.PAUSED

    def resume(self) -> None:
        self._state = PlayerState.PLAYING

    def stop(self) -> None:
        self._state = PlayerState.STOPPED

    def set_volume(self, volume: float) -> bool:
        self.volume = volume
        return True

    def position(self) -> float:
        return 0.0 if self._state == PlayerState.STOPPED else time.monotonic() - self._started

    def state(self) -> PlayerState:
        return self._state

    def on_finished(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def last_error(self) -> str | None:
        return None

    def close(self) -> None:
        self.stop()

    def finish(self) -> None:
        self._state = PlayerState.STOPPED
        for callback in self._callbacks:
            callback()


def test_the_fake_and_the_real_players_fit_the_protocol() -> None:
    assert isinstance(FakePlayer(), Player)
    assert isinstance(NoPlayer(), Player)
    assert isinstance(ExternalPlayer(PROGRAMS["mpv"], "/bin/true"), Player)


@pytest.fixture
def music(tmp_path: Path) -> Path:
    return make_library(tmp_path / "Music", seconds=TRACK_S)


@pytest.fixture
def library(music: Path, tmp_path: Path) -> Iterator[MusicLibrary]:
    lib = MusicLibrary([music], tmp_path / "data" / "music.sqlite3")
    yield lib
    lib.close()


def titles(tracks: list[Track]) -> list[str]:
    return [t.title for t in tracks]


# --- library ------------------------------------------------------------------------------------


def test_a_scan_reads_tags_and_falls_back_to_file_and_folder_names(
    library: MusicLibrary, music: Path
) -> None:
    report = library.refresh()
    assert (report.total, report.added, report.updated, report.removed) == (6, 6, 0, 0)
    tracks = {t.title: t for t in library.tracks()}
    so_what = tracks["So What"]
    assert (so_what.artist, so_what.album, so_what.genre, so_what.track) == (
        "Miles Davis",
        "Kind of Blue",
        "Jazz",
        1,
    )
    assert so_what.tagged and so_what.duration == pytest.approx(TRACK_S)
    lullaby = tracks["Lullaby"]  # "01 - Lullaby.wav" in Quiet Band/Night Songs, no tags
    assert (lullaby.artist, lullaby.album, lullaby.track, lullaby.tagged) == (
        "Quiet Band",
        "Night Songs",
        1,
        False,
    )
    riff = tracks["Café Riff"]  # tagged without an album: the folder name stands in
    assert riff.album == "Rock" and riff.artist == "Les Électriques"
    # hidden folders and non-audio files are not indexed
    assert "secret" not in tracks and all(t.path.suffix == ".wav" for t in tracks.values())
    # sorted by artist, album, track number
    assert titles(library.tracks())[:3] == ["Café Riff", "So What", "Freddie Freeloader"]
    assert so_what.describe(library.folders) == {
        "title": "So What",
        "artist": "Miles Davis",
        "album": "Kind of Blue",
        "genre": "Jazz",
        "duration": "0:00",
        "file": "Jazz/Kind of Blue/so-what.wav",
    }


def test_flac_vorbis_comments_and_mp3_id3_tags_are_read(tmp_path: Path) -> None:
    music = tmp_path / "lib"
    write_tagged_flac(
        music / "a.flac",
        {"title": "Take Five", "artist": "Dave Brubeck", "genre": "Jazz", "tracknumber": "3/9"},
    )
    write_tagged_mp3(
        music / "b.mp3",
        {"title": "Blue Train", "artist": "John Coltrane", "album": "Blue Train", "genre": "Jazz"},
    )
    lib = MusicLibrary([music], None)
    try:
        flac, mp3 = lib.tracks()
        assert (flac.title, flac.artist, flac.genre, flac.track, flac.album) == (
            "Take Five",
            "Dave Brubeck",
            "Jazz",
            3,
            "",
        )
        assert flac.duration == pytest.approx(2.0) and flac.tagged
        assert (mp3.title, mp3.artist, mp3.album, mp3.genre) == (
            "Blue Train",
            "John Coltrane",
            "Blue Train",
            "Jazz",
        )
        assert mp3.duration == pytest.approx(1.04, abs=0.05)
        assert titles(lib.search("jazz", "genre")) == ["Take Five", "Blue Train"]
    finally:
        lib.close()


def test_the_index_is_kept_and_only_changes_are_read_again(
    library: MusicLibrary, music: Path, tmp_path: Path
) -> None:
    library.refresh()
    library.close()
    index = tmp_path / "data" / "music.sqlite3"
    again = MusicLibrary([music], index)
    try:
        assert len(again._tracks) == 6  # loaded from the index before any scan
        report = again.refresh()
        assert (report.added, report.updated, report.removed) == (0, 0, 0)
        riff = music / "Rock" / "riff.wav"
        tag_wav(riff, title="Espresso Riff")
        os.utime(riff, ns=(1, 1_000_000_000))  # a new mtime even on coarse clocks
        (music / "Quiet Band" / "Night Songs" / "02 - Moonlight.wav").unlink()
        write_wav(music / "New" / "Album" / "03 - Dawn.wav", TRACK_S)
        report = again.refresh()
        assert (report.total, report.added, report.updated, report.removed) == (6, 1, 1, 1)
        assert "Espresso Riff" in titles(again.tracks())
        assert "Moonlight" not in titles(again.tracks())
    finally:
        again.close()


def test_folders_are_checked_again_after_the_rescan_interval(music: Path) -> None:
    now = [0.0]
    lib = MusicLibrary([music], None, rescan_s=300, clock=lambda: now[0])
    try:
        assert len(lib.tracks()) == 6
        write_wav(music / "Jazz" / "late.wav", TRACK_S)
        now[0] = 299
        assert len(lib.tracks()) == 6
        now[0] = 301
        assert len(lib.tracks()) == 7
    finally:
        lib.close()


def test_search_by_field_any_case_and_accent(library: MusicLibrary) -> None:
    assert titles(library.search("miles", "artist")) == [
        "So What",
        "Freddie Freeloader",
        "Blue in Green",
    ]
    assert titles(library.search("kind of blue", "album")) == titles(library.search("miles"))
    assert titles(library.search("blue", "title")) == ["Blue in Green"]
    assert titles(library.search("cafe")) == ["Café Riff"]
    assert titles(library.search("electriques", "artist")) == ["Café Riff"]
    assert titles(library.search("rock", "genre")) == ["Café Riff"]
    assert library.search("miles", "genre") == []
    # words that no tag holds are dropped when nothing matches as asked
    assert titles(library.search("some jazz")) == titles(library.search("jazz", "genre"))
    assert titles(library.search("songs by Quiet Band")) == ["Lullaby", "Moonlight"]
    assert len(library.search("")) == 6


def test_damaged_files_symlinks_out_and_missing_folders(tmp_path: Path) -> None:
    music = tmp_path / "lib"
    (music / "x").mkdir(parents=True)
    (music / "x" / "broken.mp3").write_bytes(b"\x00not really an mp3" * 10)
    outside = write_wav(tmp_path / "outside" / "private.wav", TRACK_S)
    (music / "link.wav").symlink_to(outside)
    lib = MusicLibrary([music, tmp_path / "nope"], None)
    try:
        report = lib.refresh()
        assert report.missing_folders == ((tmp_path / "nope").resolve(),)
        (broken,) = lib.tracks()
        assert (broken.title, broken.album, broken.tagged, broken.duration) == (
            "broken",
            "x",
            False,
            None,
        )
    finally:
        lib.close()
    assert read_track(outside, tmp_path).title == "private"


# --- queue --------------------------------------------------------------------------------------


def test_the_play_queue_moves_and_stops_at_its_ends(library: MusicLibrary) -> None:
    tracks = library.search("miles")
    queue = PlayQueue()
    assert queue.current is None and queue.advance() is None and queue.back() is None
    queue.replace(tracks)
    assert queue.current == tracks[0] and queue.back() is None
    assert queue.upcoming(5) == tracks[1:]
    assert queue.advance() == tracks[1] and queue.advance() == tracks[2]
    assert queue.advance() is None and queue.current == tracks[2]
    assert queue.back() == tracks[1]
    queue.drop_current()
    assert queue.current == tracks[2] and len(queue) == 2


# --- the controller with a real player where there is one -----------------------------------------


@pytest.fixture(params=["mpv" if MPV else "fake"])
def player(request: pytest.FixtureRequest) -> Iterator[Player]:
    """mpv with its null audio output (timed like a sound card) if installed, else the fake."""
    made: Player
    if request.param == "mpv":
        assert MPV is not None
        made = ExternalPlayer(PROGRAMS["mpv"], MPV, ["--ao=null"])
    else:
        made = FakePlayer()
    yield made
    made.close()


def end_track(player: Player) -> None:
    """Let the current track end: for real (mpv) or by the fake's word."""
    if isinstance(player, FakePlayer):
        player.finish()
    else:
        wait_for(lambda: player.position() >= TRACK_S - 0.05)


def test_play_some_jazz_then_pause_resume_skip_and_stop(
    library: MusicLibrary, player: Player
) -> None:
    control = MusicController(library, player, volume_percent=70)
    result = control.play("some jazz", "any", shuffle=False)
    assert result["state"] == "playing"
    assert result["track"]["title"] == "So What"
    assert result["queue"] == "track 1 of 3" and result["matched"] == 3
    assert result["up_next"] == [
        "Freddie Freeloader by Miles Davis",
        "Blue in Green by Miles Davis",
    ]
    assert result["volume"] == "70%" and result["player"] == player.name
    paused = control.pause()
    assert paused["state"] == "paused"
    assert control.pause()["state"] == "paused"  # pausing twice is harmless
    assert control.resume()["state"] == "playing"
    nxt = control.next()
    assert nxt["track"]["title"] == "Freddie Freeloader" and nxt["queue"] == "track 2 of 3"
    prev = control.previous()
    assert prev["track"]["title"] == "So What"
    assert control.previous()["track"]["title"] == "So What"  # the first track restarts
    assert control.set_volume(35)["volume"] == "35%"
    stopped = control.stop()
    assert stopped["state"] == "stopped" and "track" not in stopped
    assert control.resume()["track"]["title"] == "So What"  # resume after stop replays it
    control.stop()


def test_the_queue_moves_on_when_a_track_ends_and_stops_after_the_last(
    library: MusicLibrary, player: Player
) -> None:
    control = MusicController(library, player)
    control.play("Quiet Band", "artist", shuffle=False)
    assert control.now_playing()["track"]["title"] == "Lullaby"
    end_track(player)
    wait_for(lambda: control.now_playing().get("track", {}).get("title") == "Moonlight")
    assert control.now_playing()["queue"] == "track 2 of 2"
    end_track(player)
    wait_for(lambda: control.now_playing()["state"] == "stopped")
    assert "error" not in control.now_playing()
    last = control.next()
    assert last["state"] == "stopped" and "last track" in last["note"]


def test_playback_errors_say_what_to_do(library: MusicLibrary, player: Player) -> None:
    control = MusicController(library, player)
    with pytest.raises(ToolError, match="Nothing is playing") as err:
        control.pause()
    assert "play_music" in str(err.value)
    with pytest.raises(ToolError, match="The play queue is empty"):
        control.next()
    with pytest.raises(ToolError, match=r"No music in the library \(6 tracks"):
        control.play("polka", "any", shuffle=False)
    with pytest.raises(ToolError, match="Nothing was playing"):
        control.resume()


def test_an_empty_library_and_no_player_are_explained(tmp_path: Path, music: Path) -> None:
    empty = MusicLibrary([tmp_path / "empty"], None)
    try:
        control = MusicController(empty, FakePlayer())
        with pytest.raises(ToolError, match="library is empty") as err:
            control.play("jazz", "any", shuffle=False)
        assert "music.folders" in str(err.value)
        assert "library is empty" in control.search("jazz", "any", 10)["note"]
    finally:
        empty.close()
    lib = MusicLibrary([music], None)
    try:
        control = MusicController(lib, NoPlayer())
        assert control.search("jazz", "genre", 10)["count"] == 3  # the library still works
        with pytest.raises(ToolError, match="No audio player program was found") as err:
            control.play("jazz", "genre", shuffle=False)
        assert "mpv" in str(err.value)
        assert control.now_playing() == {"state": "stopped", "volume": "80%", "player": "none"}
    finally:
        lib.close()


def test_a_shuffled_queue_has_every_track_once(library: MusicLibrary) -> None:
    import random

    control = MusicController(library, FakePlayer(), rng=random.Random(7))
    result = control.play(None, "any", shuffle=True)
    assert result["queue"] == "track 1 of 6"
    seen = [result["track"]["title"]]
    for _ in range(5):
        seen.append(control.next()["track"]["title"])
    assert sorted(seen) == sorted(titles(library.tracks()))
    assert seen != titles(library.tracks())


# --- the headless player, for real ---------------------------------------------------------------


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process (T: stopped by a signal)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_text().rstrip("\0").split("\0")


@needs_mpv
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_mpv_is_started_paused_resumed_restarted_for_volume_and_stopped(music: Path) -> None:
    assert MPV is not None
    player = ExternalPlayer(PROGRAMS["mpv"], MPV, ["--ao=null"])
    finished: list[bool] = []
    player.on_finished(lambda: finished.append(True))
    long_track = write_wav(music / "long.wav", 5.0)
    try:
        player.load(long_track)
        player.play()
        pid = player.pid()
        assert pid is not None and player.state() == PlayerState.PLAYING
        args = cmdline(pid)
        assert "--volume=100" in args and args[-1] == str(long_track) and "--ao=null" in args
        player.pause()
        assert player.state() == PlayerState.PAUSED
        wait_for(lambda: process_state(pid) == "T")  # the signal arrives asynchronously
        at = player.position()
        time.sleep(0.3)
        assert player.position() == at
        player.resume()
        wait_for(lambda: process_state(pid) != "T")
        wait_for(lambda: player.position() > at + 0.2)
        assert player.set_volume(0.3) is True  # heard now: restarted where it was
        restarted = player.pid()
        assert restarted is not None and restarted != pid
        assert "--volume=30" in cmdline(restarted)
        start = next(a for a in cmdline(restarted) if a.startswith("--start="))
        assert float(start.split("=")[1]) >= at
        wait_for(lambda: not Path(f"/proc/{pid}").exists())  # the old process is gone
        player.stop()
        assert player.state() == PlayerState.STOPPED and player.pid() is None
        wait_for(lambda: not Path(f"/proc/{restarted}").exists())
        assert finished == []  # stopping is not finishing
        player.load(music / "Jazz" / "Kind of Blue" / "so-what.wav")
        player.play()
        wait_for(lambda: finished == [True])
        assert player.state() == PlayerState.STOPPED and player.last_error() is None
    finally:
        player.close()


@needs_mpv
def test_mpv_reports_a_file_it_cannot_play(tmp_path: Path) -> None:
    assert MPV is not None
    bad = tmp_path / "bad.mp3"
    bad.write_bytes(b"this is not audio at all" * 50)
    player = ExternalPlayer(PROGRAMS["mpv"], MPV, ["--ao=null"])
    player.load(bad)
    with pytest.raises(ToolError, match=r"mpv could not play bad\.mp3"):
        player.play()
    assert player.state() == PlayerState.STOPPED
    assert "could not play" in (player.last_error() or "")


@needs(APLAY is not None, "aplay (ALSA's player)", "apt install alsa-utils")
def test_aplay_plays_only_wav_and_has_no_volume(music: Path) -> None:
    assert APLAY is not None
    player = ExternalPlayer(PROGRAMS["aplay"], APLAY, ["-D", "null"])
    finished: list[bool] = []
    player.on_finished(lambda: finished.append(True))
    assert not player.can_play(Path("x.mp3")) and player.can_play(Path("x.WAV"))
    with pytest.raises(ToolError, match=r"aplay cannot play \.mp3 files"):
        player.load(Path("x.mp3"))
    with pytest.raises(ToolError, match="cannot change the volume"):
        player.set_volume(0.5)
    player.load(music / "Rock" / "riff.wav")
    player.play()
    wait_for(lambda: finished == [True])  # the null device takes it all at once


def test_the_headless_player_is_chosen_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert headless_player("none").name == "none"
    found = headless_player("auto")
    expected = next((n for n in ("mpv", "ffplay", "paplay", "aplay") if shutil.which(n)), "none")
    assert found.name == expected
    monkeypatch.setenv("PATH", "")
    missing = headless_player("mpv")
    assert isinstance(missing, NoPlayer)
    with pytest.raises(ToolError, match=r"The player set in the settings \(mpv\) is not installed"):
        missing.play()


# --- tools --------------------------------------------------------------------------------------


def test_tools_declare_their_effects_and_schemas(library: MusicLibrary) -> None:
    tools = {t.name: t for t in music_tools(MusicController(library, FakePlayer()))}
    read = {"search_music", "now_playing", "scan_music_library"}
    for name, tool in tools.items():
        expected = {Effect.READ} if name in read else {Effect.LOCAL_WRITE}
        assert tool.effects == frozenset(expected), name
    assert set(tools) == read | {
        "play_music",
        "pause_music",
        "resume_music",
        "next_track",
        "previous_track",
        "stop_music",
        "set_music_volume",
    }
    play = tools["play_music"].parameters_schema()["properties"]
    assert set(play) == {"query", "field", "shuffle"}
    assert play["field"]["enum"] == ["any", "artist", "album", "title", "genre"]
    volume = tools["set_music_volume"]
    with pytest.raises(Exception, match="less than or equal to 100"):
        volume.validate({"percent": 150})
    found = call(tools["search_music"], query="blue", field="title")
    assert found["count"] == 1 and found["matches"][0]["title"] == "Blue in Green"
    assert call(tools["scan_music_library"])["tracks"] == 6


def call(tool: Tool, **arguments: Any) -> Any:
    return tool.call(tool.validate(arguments))


# --- end to end -----------------------------------------------------------------------------------


def profile(tmp_path: Path, music: Path, player: str) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {
        "files": {"roots": [str(tmp_path)]},
        "music": {"folders": [str(music)], "player": player, "player_args": ["--ao=null"]},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


PLAY_JAZZ = [
    "<tool_call>\n<function=play_music>\n<parameter=query>\nsome jazz\n</parameter>\n"
    "</function>\n</tool_call>",
    "<tool_call>\n<function=now_playing>\n</function>\n</tool_call>",
    "Playing So What by Miles Davis.",
]


def run_ask(tmp_path: Path, home: Path, approve: str, capsys: pytest.CaptureFixture[str]) -> Any:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(PLAY_JAZZ), encoding="utf-8")
    argv = ["--home", str(home), "ask", "--replay", str(replay), "--json", "--approve", approve]
    code = main([*argv, "play some jazz"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data
    return data


def players_of(folder: Path) -> list[int]:
    """Running processes whose command line names a file under ``folder``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(folder) in (proc / "cmdline").read_text():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


@needs_mpv
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ask_play_some_jazz_end_to_end_with_mpv(
    tmp_path: Path, music: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = profile(tmp_path, music, "mpv")
    data = run_ask(tmp_path, home, "all", capsys)
    play, now = data["tool_calls"]
    # asked for directly, in a clean context: a reversible change that runs at once
    assert play["name"] == "play_music" and play["decision"] == "allowed" and play["ok"], play
    played = json.loads(play["result"])
    assert played["state"] == "playing" and played["player"] == "mpv"
    assert played["track"]["genre"] == "Jazz" and played["queue"] == "track 1 of 3"
    assert now["name"] == "now_playing" and now["decision"] == "allowed"
    status = json.loads(now["result"])
    assert status["state"] == "playing" and status["track"]["title"] == "So What"
    assert data["answer"] == "Playing So What by Miles Davis."
    assert (home / "data" / "music.sqlite3").exists()
    assert players_of(music) == []  # the command's exit stopped the player


def test_ask_play_needs_no_approval_and_says_when_there_is_no_player(
    tmp_path: Path, music: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = profile(tmp_path, music, "none")
    no_player = run_ask(tmp_path, home, "deny", capsys)  # nothing to approve: it just runs
    play = no_player["tool_calls"][0]
    assert play["decision"] == "allowed" and not play["ok"]
    assert no_player["approvals"] == []
    assert "Music playback is turned off in the settings" in play["result"]
    assert json.loads(no_player["tool_calls"][1]["result"])["state"] == "stopped"
