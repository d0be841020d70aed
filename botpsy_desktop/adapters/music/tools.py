"""Music tools: search the library, play from it, control playback and say what is playing."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.music.library import SearchField
from botpsy_desktop.adapters.music.queue import MusicController
from botpsy_desktop.core.tools import Effect, Tool, make_tool

_FIELD_HELP = 'Where to look: "any" (default), "artist", "album", "title" or "genre", e.g. "genre".'


class SearchMusicArgs(BaseModel):
    """Search the user's music library by artist, album, title or genre.

    Example: {"query": "Miles Davis", "field": "artist"}. Only looks; nothing is played.
    """

    query: str = Field(description='Words to look for, e.g. "kind of blue".', max_length=200)
    field: SearchField = Field("any", description=_FIELD_HELP)
    limit: int = Field(20, ge=1, le=200, description="Most tracks to return, e.g. 20.")


class PlayMusicArgs(BaseModel):
    """Play music from the user's library: a song, an album, an artist or a genre.

    Example: {"query": "jazz", "field": "genre"} or {"query": "Abbey Road"}. Replaces the
    play queue with every matching track.
    """

    query: str | None = Field(
        None,
        description='What to play, e.g. "jazz", "Miles Davis" or "So What". Leave out to play '
        "the whole library.",
        max_length=200,
    )
    field: SearchField = Field("any", description=_FIELD_HELP)
    shuffle: bool = Field(False, description="Play in random order, e.g. false.")


class PauseMusicArgs(BaseModel):
    """Pause the music that is playing. Example: {}."""


class ResumeMusicArgs(BaseModel):
    """Resume the paused music (or replay the queue's track after a stop). Example: {}."""


class NextTrackArgs(BaseModel):
    """Skip to the next track in the play queue. Example: {}."""


class PreviousTrackArgs(BaseModel):
    """Go back to the previous track (or restart the current one if it has played a while).

    Example: {}.
    """


class StopMusicArgs(BaseModel):
    """Stop the music. Example: {}."""


class SetMusicVolumeArgs(BaseModel):
    """Set the music volume in percent. Example: {"percent": 40}."""

    percent: int = Field(ge=0, le=100, description="Volume from 0 (silent) to 100, e.g. 40.")


class NowPlayingArgs(BaseModel):
    """Say what music is playing: track, artist, position, queue and volume. Example: {}."""


class ScanMusicLibraryArgs(BaseModel):
    """Look through the music folders again for new, changed or removed files. Example: {}.

    Only needed when the user just added music; searching rescans every few minutes anyway.
    """


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
        return controller.set_volume(args.percent)

    def now_playing(args: NowPlayingArgs) -> dict[str, Any]:
        return controller.now_playing()

    def scan_music_library(args: ScanMusicLibraryArgs) -> dict[str, Any]:
        return controller.rescan()

    read = {Effect.READ}
    act = {Effect.LOCAL_WRITE}
    return [
        make_tool(search_music, effects=read),
        make_tool(play_music, effects=act),
        make_tool(pause_music, effects=act),
        make_tool(resume_music, effects=act),
        make_tool(next_track, effects=act),
        make_tool(previous_track, effects=act),
        make_tool(stop_music, effects=act),
        make_tool(set_music_volume, effects=act),
        make_tool(now_playing, effects=read),
        make_tool(scan_music_library, effects=read),
    ]
