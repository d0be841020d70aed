"""The play queue and the controller that drives a Player through it."""

from __future__ import annotations

import contextlib
import random
import threading
from collections.abc import Sequence
from typing import Any

from botpsy_desktop.adapters.music.library import MusicLibrary, SearchField, Track, clock_time
from botpsy_desktop.adapters.music.player import Player, PlayerState
from botpsy_desktop.core.errors import ToolError

RESTART_AFTER_S = 3.0
"""previous_track restarts the current track once this much of it has played."""

_START_HINT = "Use play_music to start some music."


class PlayQueue:
    """An ordered list of tracks and the index of the current one."""

    def __init__(self) -> None:
        self._tracks: list[Track] = []
        self._index = -1

    def replace(self, tracks: Sequence[Track]) -> None:
        self._tracks = list(tracks)
        self._index = 0 if self._tracks else -1

    @property
    def current(self) -> Track | None:
        return self._tracks[self._index] if 0 <= self._index < len(self._tracks) else None

    @property
    def index(self) -> int:
        return self._index

    def __len__(self) -> int:
        return len(self._tracks)

    def advance(self) -> Track | None:
        """Move to the next track; at the end the queue stays on the last one and returns None."""
        if self._index + 1 >= len(self._tracks):
            return None
        self._index += 1
        return self._tracks[self._index]

    def back(self) -> Track | None:
        """Move to the previous track; at the first one returns None."""
        if self._index <= 0:
            return None
        self._index -= 1
        return self._tracks[self._index]

    def upcoming(self, count: int) -> list[Track]:
        return self._tracks[self._index + 1 : self._index + 1 + count]

    def drop_current(self) -> None:
        """Forget the current track (its file is gone); the next one becomes current."""
        if self.current is not None:
            del self._tracks[self._index]
            if self._index >= len(self._tracks):
                self._index = len(self._tracks) - 1


class MusicController:
    """What the music tools do: build a queue from the library and drive the player through it.

    Thread-safe: tools run on worker threads and the player reports the end of a track on its
    own thread, which moves on to the next track.
    """

    def __init__(
        self,
        library: MusicLibrary,
        player: Player,
        *,
        volume_percent: int = 80,
        rng: random.Random | None = None,
    ) -> None:
        self.library = library
        self.player = player
        self.queue = PlayQueue()
        self._lock = threading.RLock()
        self._rng = rng or random.Random()
        self._volume = volume_percent
        self._error: str | None = None
        with contextlib.suppress(ToolError):  # a player without volume control still plays
            player.set_volume(volume_percent / 100)
        player.on_finished(self._finished)

    # --- tools ---------------------------------------------------------------------------------

    def search(self, query: str, field: SearchField, limit: int) -> dict[str, Any]:
        report = self.library.ensure_fresh()
        found = self.library.search(query, field)
        result: dict[str, Any] = {
            "query": query,
            "field": field,
            "matches": [t.describe(self.library.folders) for t in found[:limit]],
            "count": len(found),
        }
        if len(found) > limit:
            result["note"] = f"Only the first {limit} of {len(found)} matches are shown."
        if not found:
            result["note"] = self._nothing_found(query, report.total)
        return result

    def play(self, query: str | None, field: SearchField, shuffle: bool) -> dict[str, Any]:
        report = self.library.ensure_fresh()
        text = (query or "").strip()
        found = self.library.search(text, field) if text else self.library.tracks()
        if not found:
            raise ToolError(self._nothing_found(text, report.total))
        playable = [t for t in found if self.player.can_play(t.path)]
        if not playable:
            self.player.load(found[0].path)  # the player's own reason, e.g. none installed
            kinds = sorted({t.path.suffix.lower() for t in found})
            raise ToolError(
                f"Found {len(found)} track(s), but the {self.player.name} player cannot play "
                f"their format ({', '.join(kinds)}).",
                "Install mpv or ffmpeg, or use the BotPsy window.",
            )
        if shuffle:
            self._rng.shuffle(playable)
        with self._lock:
            self.player.stop()
            self.queue.replace(playable)
            self._start_current()
            result = self._status()
        result["matched"] = len(found)
        if len(playable) < len(found):
            result["note"] = (
                f"{len(found) - len(playable)} matching track(s) were left out: the "
                f"{self.player.name} player cannot play their format."
            )
        return result

    def pause(self) -> dict[str, Any]:
        with self._lock:
            state = self.player.state()
            if state == PlayerState.STOPPED:
                raise ToolError("Nothing is playing, so there is nothing to pause.", _START_HINT)
            if state == PlayerState.PLAYING:
                self.player.pause()
            return self._status()

    def resume(self) -> dict[str, Any]:
        with self._lock:
            state = self.player.state()
            if state == PlayerState.PAUSED:
                self.player.resume()
            elif state == PlayerState.STOPPED:
                if self.queue.current is None:
                    raise ToolError("Nothing was playing before.", _START_HINT)
                self._start_current()
            return self._status()

    def next(self) -> dict[str, Any]:
        with self._lock:
            if self.queue.current is None:
                raise ToolError("The play queue is empty.", _START_HINT)
            if self.queue.advance() is None:
                self.player.stop()
                result = self._status()
                result["note"] = "That was the last track in the queue; playback stopped."
                return result
            self._start_current()
            return self._status()

    def previous(self) -> dict[str, Any]:
        with self._lock:
            if self.queue.current is None:
                raise ToolError("The play queue is empty.", _START_HINT)
            playing = self.player.state() != PlayerState.STOPPED
            if not (playing and self.player.position() >= RESTART_AFTER_S):
                self.queue.back()  # at the first track this restarts it
            self._start_current()
            return self._status()

    def stop(self) -> dict[str, Any]:
        with self._lock:
            self.player.stop()
            return self._status()

    @property
    def volume(self) -> int:
        """The music volume in percent."""
        return self._volume

    def set_volume(self, percent: int) -> dict[str, Any]:
        if not 0 <= percent <= 100:
            raise ToolError(f"{percent} is not a volume.", "Give a percentage from 0 to 100.")
        with self._lock:
            heard_now = self.player.set_volume(percent / 100)
            self._volume = percent
            result = self._status()
            if not heard_now:
                result["note"] = "The new volume is used from the next track."
            return result

    def now_playing(self) -> dict[str, Any]:
        with self._lock:
            return self._status()

    def rescan(self) -> dict[str, Any]:
        report = self.library.refresh()
        result = report.as_dict()
        result["folders"] = self.library.folders_text()
        return result

    # --- internals -------------------------------------------------------------------------------

    def _start_current(self) -> None:
        """Load and play the queue's current track; files deleted since the scan are skipped."""
        while (track := self.queue.current) is not None and not track.path.is_file():
            self.queue.drop_current()
        if track is None:
            raise ToolError(
                "The music files in the queue no longer exist.",
                "Use scan_music_library, then play_music again.",
            )
        self._error = None
        self.player.load(track.path)
        self.player.play()

    def _finished(self) -> None:
        """The player reached the end of a track: play the next one, or stop at the end."""
        with self._lock:
            if self.player.state() != PlayerState.STOPPED:
                return  # a stale report: something else was started meanwhile
            if self.queue.advance() is None:
                return
            try:
                self._start_current()
            except ToolError as exc:
                self._error = str(exc)

    def _status(self) -> dict[str, Any]:
        state = self.player.state()
        track = self.queue.current
        result: dict[str, Any] = {"state": state.value}
        if track is not None and state != PlayerState.STOPPED:
            result["track"] = track.describe(self.library.folders)
            result["position"] = clock_time(self.player.position())
        if len(self.queue):
            result["queue"] = f"track {self.queue.index + 1} of {len(self.queue)}"
            upcoming = self.queue.upcoming(3)
            if upcoming:
                result["up_next"] = [_title_line(t) for t in upcoming]
        result["volume"] = f"{self._volume}%"
        result["player"] = self.player.name
        error = self._error or (self.player.last_error() if state == PlayerState.STOPPED else None)
        if error and self.player.name != "none":
            result["error"] = error
        return result

    def _nothing_found(self, query: str, total: int) -> str:
        folders = self.library.folders_text()
        if total == 0:
            return (
                f"The music library is empty: no audio files were found in {folders}. "
                "Ask the user to add their music folder to music.folders in the settings."
            )
        return (
            f"No music in the library ({total} tracks in {folders}) matches {query!r}. "
            "Try fewer words, or an artist, album, title or genre."
        )


def _title_line(track: Track) -> str:
    return f"{track.title} by {track.artist}" if track.artist else track.title
