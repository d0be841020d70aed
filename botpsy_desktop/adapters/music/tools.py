"""Music tools: search the library, play from it, control playback and say what is playing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.music.library import SearchField
from botpsy_desktop.adapters.music.queue import MusicController
from botpsy_desktop.core.tools import (
    Effect,
    Handler,
    Inverse,
    InverseRule,
    SummaryRule,
    Tier,
    Tool,
    make_tool,
)

_FIELD_HELP = 'Where to look (default "any").'


class SearchMusicArgs(BaseModel):
    """Search the user's music library (nothing is played)."""

    query: str = Field(description='e.g. "kind of blue".', max_length=200)
    field: SearchField = Field("any", description=_FIELD_HELP)
    limit: int = Field(20, ge=1, le=200, description="Most tracks to return.")


class PlayMusicArgs(BaseModel):
    """Play a song, album, artist or genre from the user's library (replaces the queue)."""

    query: str | None = Field(
        None,
        description='e.g. "jazz", "Miles Davis", "So What"; leave out for everything.',
        max_length=200,
    )
    field: SearchField = Field("any", description=_FIELD_HELP)
    shuffle: bool = Field(False, description="Random order.")


class PauseMusicArgs(BaseModel):
    """Pause the music."""


class ResumeMusicArgs(BaseModel):
    """Resume the paused or stopped music."""


class NextTrackArgs(BaseModel):
    """Skip to the next track."""


class PreviousTrackArgs(BaseModel):
    """Go back to the previous track (or the start of this one)."""


class StopMusicArgs(BaseModel):
    """Stop the music."""


class SetMusicVolumeArgs(BaseModel):
    """Set the music volume."""

    percent: int = Field(ge=0, le=100, description="0 (silent) to 100.")


class NowPlayingArgs(BaseModel):
    """What is playing: track, artist, position, queue, volume."""


class ScanMusicLibraryArgs(BaseModel):
    """Rescan the music folders now, after the user added or removed music."""


def music_tools(controller: MusicController) -> list[Tool]:
    """The music tools over one controller (a library, a queue and a player).

    Searching and asking what plays are read-only. Playback controls are declared local
    writes: they change nothing saved and send nothing, but they act on the computer (sound
    out of its speakers), so they wait for the user's approval like other local actions.
    """

    def search_music(args: SearchMusicArgs) -> dict[str, Any]:
        return controller.search(args.query, args.field, args.limit)

    def play_music(args: PlayMusicArgs) -> dict[str, Any]:
        return controller.play(args.query, args.field, args.shuffle)

    def pause_music(args: PauseMusicArgs) -> dict[str, Any]:
        return controller.pause()

    def resume_music(args: ResumeMusicArgs) -> dict[str, Any]:
        return controller.resume()

    def next_track(args: NextTrackArgs) -> dict[str, Any]:
        return controller.next()

    def previous_track(args: PreviousTrackArgs) -> dict[str, Any]:
        return controller.previous()

    def stop_music(args: StopMusicArgs) -> dict[str, Any]:
        return controller.stop()

    def set_music_volume(args: SetMusicVolumeArgs) -> dict[str, Any]:
        before = controller.volume
        result = controller.set_volume(args.percent)
        if before != args.percent:  # what Undo sets it back to
            result["inverse"] = {"tool": "set_music_volume", "arguments": {"percent": before}}
        return result

    def now_playing(args: NowPlayingArgs) -> dict[str, Any]:
        return controller.now_playing()

    def scan_music_library(args: ScanMusicLibraryArgs) -> dict[str, Any]:
        return controller.rescan()

    read = {Effect.READ}

    def control(handler: Handler, inverse: InverseRule, summary: SummaryRule) -> Tool:
        """A playback control: a local action that one other control (or a volume) undoes."""
        return make_tool(
            handler,
            effects={Effect.LOCAL_WRITE},
            tier=Tier.REVERSIBLE,
            inverse=inverse,
            summary=summary,
        )

    return [
        make_tool(search_music, effects=read, tier=Tier.READ),
        control(play_music, _then("stop_music"), _s_play),
        control(pause_music, _then("resume_music"), _s("Pause")),
        control(resume_music, _then("pause_music"), _s("Resume")),
        control(next_track, _then("previous_track"), lambda a: "Skip to the next track"),
        control(previous_track, _then("next_track"), lambda a: "Go back to the previous track"),
        control(stop_music, _then("resume_music"), _s("Stop")),
        control(
            set_music_volume,
            _volume_back,
            lambda a: f"Set the music volume to {a.get('percent')}%",
        ),
        make_tool(now_playing, effects=read, tier=Tier.READ),
        make_tool(scan_music_library, effects=read, tier=Tier.READ),
    ]


# --- the gate's declarations: inverses and receipts in plain words ---------------------------


def _then(tool: str) -> InverseRule:
    def rule(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
        return Inverse(tool, {})

    return rule


def _volume_back(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    if isinstance(result, Mapping) and isinstance(result.get("inverse"), Mapping):
        return Inverse("set_music_volume", dict(result["inverse"].get("arguments") or {}))
    return "the volume was already at that level"


def _s(verb: str) -> SummaryRule:
    return lambda arguments: f"{verb} the music"


def _s_play(a: Mapping[str, Any]) -> str:
    query = str(a.get("query") or "").strip()
    shuffled = ", shuffled" if a.get("shuffle") else ""
    return f"Play {('“' + query + '”') if query else 'music'}{shuffled}"
