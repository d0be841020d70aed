"""The player interface, and the headless player that drives mpv, ffplay, paplay or aplay."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

from botpsy_desktop.core.errors import ToolError

STARTUP_CHECK_S = 0.3
"""How long play() watches a freshly started player for an immediate failure (players that
cannot say when playback has begun)."""

PLAYING_WAIT_S = 10.0
"""The most play() waits for a player that says when playback has begun (mpv) to say so or to
fail: a loaded machine takes longer than STARTUP_CHECK_S to reject a damaged file."""

PLAYING_MARKER = "botpsy: playing"

NO_PLAYER_HINT = (
    "Install mpv (recommended) or ffmpeg (for ffplay), or use the BotPsy window, which plays "
    "music itself."
)


class PlayerState(StrEnum):
    STOPPED = "stopped"
    PLAYING = "playing"
    PAUSED = "paused"


@runtime_checkable
class Player(Protocol):
    """Plays one file at a time. Errors meant for the model are ToolErrors.

    ``on_finished`` callbacks run (on any thread) when a track plays to its end; by then
    ``state()`` is STOPPED. Stopping, loading another file or a failure never calls them.
    """

    @property
    def name(self) -> str: ...

    def can_play(self, path: Path) -> bool: ...

    def load(self, path: Path) -> None: ...

    def play(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def stop(self) -> None: ...

    def set_volume(self, volume: float) -> bool:
        """Set the volume (0.0 to 1.0); True if it is heard now, False if from the next track."""
        ...

    def position(self) -> float: ...

    def state(self) -> PlayerState: ...

    def on_finished(self, callback: Callable[[], None]) -> None: ...

    def last_error(self) -> str | None: ...

    def close(self) -> None: ...


class NoPlayer:
    """Stands in when no player program exists: the library still works, playback says why not."""

    name = "none"

    def __init__(self, reason: str = "No audio player program was found on this computer.") -> None:
        self._reason = reason

    def _refuse(self) -> ToolError:
        return ToolError(self._reason, NO_PLAYER_HINT)

    def can_play(self, path: Path) -> bool:
        return False

    def load(self, path: Path) -> None:
        raise self._refuse()

    def play(self) -> None:
        raise self._refuse()

    def pause(self) -> None:
        raise self._refuse()

    def resume(self) -> None:
        raise self._refuse()

    def stop(self) -> None:
        pass

    def set_volume(self, volume: float) -> bool:
        return False

    def position(self) -> float:
        return 0.0

    def state(self) -> PlayerState:
        return PlayerState.STOPPED

    def on_finished(self, callback: Callable[[], None]) -> None:
        pass

    def last_error(self) -> str | None:
        return self._reason

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Program:
    """How to run one player program: which files it plays and its command line."""

    name: str
    suffixes: frozenset[str] | None  # None: every format the library indexes
    seeks: bool  # can start part-way into a file (so a volume change is heard at once)
    has_volume: bool
    says_playing: bool = False  # prints PLAYING_MARKER on stdout once playback has begun

    def command(
        self, exe: str, path: Path, volume: float, start: float, extra: Sequence[str]
    ) -> list[str]:
        percent = round(volume * 100)
        file = str(path.absolute())  # never starts with "-"
        if self.name == "mpv":
            return [
                exe,
                "--no-video",
                "--no-config",
                "--input-terminal=no",
                "--msg-level=all=error,term-msg=info",
                f"--term-playing-msg={PLAYING_MARKER}",
                f"--volume={percent}",
                f"--start={start:.2f}",
                *extra,
                "--",
                file,
            ]
        if self.name == "ffplay":
            return [
                exe,
                "-nodisp",
                "-autoexit",
                "-loglevel",
                "error",
                "-volume",
                str(percent),
                "-ss",
                f"{start:.2f}",
                *extra,
                file,
            ]
        if self.name == "paplay":
            return [exe, f"--volume={round(volume * 65536)}", *extra, file]
        return [exe, "-q", *extra, file]  # aplay


PROGRAMS: dict[str, Program] = {
    "mpv": Program("mpv", None, seeks=True, has_volume=True, says_playing=True),
    "ffplay": Program("ffplay", None, seeks=True, has_volume=True),
    "paplay": Program("paplay", frozenset({".wav", ".flac", ".ogg"}), seeks=False, has_volume=True),
    "aplay": Program("aplay", frozenset({".wav"}), seeks=False, has_volume=False),
}
DETECT_ORDER = ("mpv", "ffplay", "paplay", "aplay")


def headless_player(choice: str = "auto", extra_args: Sequence[str] = ()) -> Player:
    """The player for the CLI: ``choice`` names a program, "auto" takes the first found."""
    if choice == "none":
        return NoPlayer("Music playback is turned off in the settings (music.player is none).")
    names = DETECT_ORDER if choice == "auto" else (choice,)
    for name in names:
        if name not in PROGRAMS:
            raise ValueError(f"unknown player {name!r}; choose one of {', '.join(PROGRAMS)}")
        exe = shutil.which(name)
        if exe:
            return ExternalPlayer(PROGRAMS[name], exe, extra_args)
    if choice == "auto":
        return NoPlayer(
            "No audio player program was found on this computer (looked for mpv, ffplay, "
            "paplay and aplay)."
        )
    return NoPlayer(f"The player set in the settings ({choice}) is not installed.")


class _Run:
    """One started player process and how it ended."""

    def __init__(self, process: subprocess.Popen[bytes], start: float) -> None:
        self.process = process
        self.start_offset = start
        self.started_at = time.monotonic()
        self.paused_at: float | None = None
        self.paused_total = 0.0
        self.cancelled = False
        self.exit_code: int | None = None
        self.stderr = ""
        self.stdout = ""  # what the player printed besides PLAYING_MARKER (mpv's errors)
        self.exited = threading.Event()
        self.playing = threading.Event()  # it said playback has begun (says_playing)

    def elapsed(self) -> float:
        end = self.paused_at if self.paused_at is not None else time.monotonic()
        return self.start_offset + max(0.0, end - self.started_at - self.paused_total)


def _read_marker(run: _Run) -> None:
    """Read a player's stdout to its end: PLAYING_MARKER sets ``run.playing``; the rest is kept
    (mpv prints its errors there) for the error message."""
    stream: IO[bytes] | None = run.process.stdout
    if stream is None:
        return
    tail = ""
    with stream:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace")
            if PLAYING_MARKER in line:
                run.playing.set()
            elif line.strip():
                tail = (tail + line)[-2000:]
                run.stdout = tail


class ExternalPlayer:
    """Plays files with an external program, one process per track.

    Pause and resume stop and continue the process (SIGSTOP/SIGCONT, so POSIX only); the
    position is measured by the clock while it plays. A volume change restarts the track where
    it was for programs that can seek (mpv, ffplay); paplay uses it from the next track and
    aplay has no volume.
    """

    def __init__(self, program: Program, exe: str, extra_args: Sequence[str] = ()) -> None:
        self._program = program
        self._exe = exe
        self._extra = tuple(extra_args)
        self._lock = threading.RLock()
        self._path: Path | None = None
        self._run: _Run | None = None
        self._state = PlayerState.STOPPED
        self._volume = 1.0
        self._callbacks: list[Callable[[], None]] = []
        self._error: str | None = None
        self._resume_at: float | None = None  # paused with no process (after a volume change)

    @property
    def name(self) -> str:
        return self._program.name

    def can_play(self, path: Path) -> bool:
        suffixes = self._program.suffixes
        return suffixes is None or path.suffix.lower() in suffixes

    def load(self, path: Path) -> None:
        if not self.can_play(path):
            kinds = ", ".join(sorted(self._program.suffixes or ()))
            raise ToolError(
                f"{self.name} cannot play {path.suffix or 'this kind of'} files (only {kinds}).",
                NO_PLAYER_HINT,
            )
        with self._lock:
            self._end_run()
            self._path = path
            self._state = PlayerState.STOPPED
            self._error = None

    def play(self) -> None:
        with self._lock:
            if self._path is None:
                raise ToolError("Nothing is loaded to play.", "Choose some music first.")
            self._end_run()
            self._start(0.0)

    def pause(self) -> None:
        with self._lock:
            run = self._run
            if self._state != PlayerState.PLAYING or run is None:
                return
            self._signal(run, "SIGSTOP")
            run.paused_at = time.monotonic()
            self._state = PlayerState.PAUSED

    def resume(self) -> None:
        with self._lock:
            if self._state != PlayerState.PAUSED:
                return
            if self._resume_at is not None:
                at, self._resume_at = self._resume_at, None
                self._start(at)
                return
            run = self._run
            if run is None:
                return
            self._signal(run, "SIGCONT")
            if run.paused_at is not None:
                run.paused_total += time.monotonic() - run.paused_at
                run.paused_at = None
            self._state = PlayerState.PLAYING

    def stop(self) -> None:
        with self._lock:
            self._end_run()
            self._state = PlayerState.STOPPED

    def set_volume(self, volume: float) -> bool:
        if not 0.0 <= volume <= 1.0:
            raise ValueError("volume must be between 0.0 and 1.0")
        if not self._program.has_volume:
            raise ToolError(
                "aplay cannot change the volume.",
                "Use the computer's volume control, or install mpv or ffmpeg.",
            )
        with self._lock:
            self._volume = volume
            run = self._run
            if self._state == PlayerState.STOPPED or run is None:
                return True
            if not self._program.seeks:
                return False
            at = run.elapsed()
            self._end_run()
            if self._state == PlayerState.PAUSED:
                self._resume_at = at  # heard when resumed
            else:
                self._start(at)
            return True

    def position(self) -> float:
        with self._lock:
            run = self._run
            if run is None:
                return self._resume_at or 0.0
            return run.elapsed()

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

    def pid(self) -> int | None:
        """The running player process, if any (for diagnostics and tests)."""
        with self._lock:
            run = self._run
            return run.process.pid if run is not None and not run.exited.is_set() else None

    # --- processes -------------------------------------------------------------------------------

    def _start(self, at: float) -> None:
        assert self._path is not None
        argv = self._program.command(self._exe, self._path, self._volume, at, self._extra)
        try:
            says = self._program.says_playing
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if says else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,  # Ctrl-C on the terminal stops an answer, not the music
            )
        except OSError as exc:
            self._state = PlayerState.STOPPED
            self._error = f"{self.name} could not be started: {exc}"
            raise ToolError(self._error + ".", NO_PLAYER_HINT) from exc
        run = _Run(process, at)
        self._run = run
        self._state = PlayerState.PLAYING
        self._error = None
        threading.Thread(
            target=self._watch, args=(run,), name=f"player-{self.name}", daemon=True
        ).start()
        if says:
            threading.Thread(
                target=_read_marker, args=(run,), name=f"player-{self.name}-out", daemon=True
            ).start()
            deadline = time.monotonic() + PLAYING_WAIT_S
            while not (run.playing.is_set() or run.exited.is_set()):
                if time.monotonic() >= deadline:
                    break
                run.playing.wait(0.05)
        else:
            run.exited.wait(STARTUP_CHECK_S)
        if run.exited.is_set() and run.exit_code != 0 and not run.playing.is_set():
            self._run = None
            self._state = PlayerState.STOPPED
            file = self._path.name
            said = (run.stderr.strip() or run.stdout.strip()).splitlines()[-1:]
            detail = said or [f"exit code {run.exit_code}"]
            self._error = f"{self.name} could not play {file}: {detail[0]}"
            raise ToolError(
                self._error + ".",
                "The file may be damaged, or no sound device works; see music.player_args "
                "in the settings.",
            )

    def _watch(self, run: _Run) -> None:
        """Wait for a player process to end; a natural end moves the state and tells listeners."""
        stream: IO[bytes] | None = run.process.stderr
        tail = b""
        if stream is not None:
            with stream:
                for chunk in iter(lambda: stream.read(4096), b""):
                    tail = (tail + chunk)[-2000:]
        run.exit_code = run.process.wait()
        run.stderr = tail.decode("utf-8", "replace")
        run.exited.set()
        callbacks: list[Callable[[], None]] = []
        with self._lock:
            if self._run is run and not run.cancelled:
                self._run = None
                self._state = PlayerState.STOPPED
                if run.exit_code == 0:
                    callbacks = list(self._callbacks)
                else:
                    last = run.stderr.strip().splitlines()[-1:] or [f"exit code {run.exit_code}"]
                    self._error = f"{self.name} stopped with an error: {last[0]}"
        for callback in callbacks:
            callback()

    def _end_run(self) -> None:
        """Stop the current process without telling listeners (called with the lock held)."""
        self._resume_at = None
        run, self._run = self._run, None
        if run is None:
            return
        run.cancelled = True
        process = run.process
        if process.poll() is None:
            process.terminate()
            self._signal(run, "SIGCONT", quiet=True)  # a paused process gets the SIGTERM now
            try:
                process.wait(2.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(2.0)

    def _signal(self, run: _Run, name: str, *, quiet: bool = False) -> None:
        number = getattr(signal, name, None)
        if number is None:
            if quiet:
                return
            raise ToolError(
                f"Pausing is not supported by the headless player on this system ({os.name}).",
                "Use stop_music instead, or the BotPsy window.",
            )
        with contextlib.suppress(ProcessLookupError):
            os.kill(run.process.pid, number)
