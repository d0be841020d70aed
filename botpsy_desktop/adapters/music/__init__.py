"""A local music library (tags read with mutagen), a play queue and a player interface."""

from botpsy_desktop.adapters.music.library import MusicLibrary, Track
from botpsy_desktop.adapters.music.player import (
    ExternalPlayer,
    NoPlayer,
    Player,
    PlayerState,
    headless_player,
)
from botpsy_desktop.adapters.music.queue import MusicController, PlayQueue
from botpsy_desktop.adapters.music.tools import music_tools

__all__ = [
    "ExternalPlayer",
    "MusicController",
    "MusicLibrary",
    "NoPlayer",
    "PlayQueue",
    "Player",
    "PlayerState",
    "Track",
    "headless_player",
    "music_tools",
]
