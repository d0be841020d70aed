"""Audio files for the music tests: WAV from the stdlib, FLAC and MP3 stubs, tags by mutagen."""

from __future__ import annotations

import math
import struct
import wave
from collections.abc import Mapping
from pathlib import Path

from mutagen.flac import FLAC
from mutagen.id3 import TALB, TCON, TIT2, TPE1, TRCK
from mutagen.mp3 import EasyMP3
from mutagen.wave import WAVE

RATE = 8000


def write_wav(path: Path, seconds: float = 1.0, frequency: float = 440.0) -> Path:
    """A mono 16-bit sine tone of ``seconds``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frames = int(RATE * seconds)
    step = 2 * math.pi * frequency / RATE
    data = b"".join(struct.pack("<h", int(8000 * math.sin(i * step))) for i in range(frames))
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes(data)
    return path


def tag_wav(
    path: Path,
    *,
    title: str = "",
    artist: str = "",
    album: str = "",
    genre: str = "",
    track: str = "",
) -> Path:
    """Write ID3 tags into a WAV file's ``id3`` chunk (what mutagen reads for WAV)."""
    audio = WAVE(path)
    if audio.tags is None:
        audio.add_tags()
    tags = audio.tags
    assert tags is not None
    for frame, value in ((TIT2, title), (TPE1, artist), (TALB, album), (TCON, genre)):
        if value:
            tags.add(frame(encoding=3, text=value))
    if track:
        tags.add(TRCK(encoding=3, text=track))
    audio.save()
    return path


def make_library(root: Path, seconds: float = 1.0) -> Path:
    """root/
    Jazz/Kind of Blue/1 tagged tracks (Miles Davis, genre Jazz)
    Quiet Band/Night Songs/01 - Lullaby.wav, 02 - Moonlight.wav (no tags: names and folders)
    Rock/riff.wav (tagged Rock), notes.txt, .hidden/secret.wav
    """
    kob = root / "Jazz" / "Kind of Blue"
    tag_wav(
        write_wav(kob / "so-what.wav", seconds, 440),
        title="So What",
        artist="Miles Davis",
        album="Kind of Blue",
        genre="Jazz",
        track="1/5",
    )
    tag_wav(
        write_wav(kob / "blue-in-green.wav", seconds, 330),
        title="Blue in Green",
        artist="Miles Davis",
        album="Kind of Blue",
        genre="Jazz",
        track="3/5",
    )
    tag_wav(
        write_wav(kob / "freddie.wav", seconds, 550),
        title="Freddie Freeloader",
        artist="Miles Davis",
        album="Kind of Blue",
        genre="Jazz",
        track="2/5",
    )
    night = root / "Quiet Band" / "Night Songs"
    write_wav(night / "02 - Moonlight.wav", seconds, 260)
    write_wav(night / "01 - Lullaby.wav", seconds, 220)
    tag_wav(
        write_wav(root / "Rock" / "riff.wav", seconds, 660),
        title="Café Riff",
        artist="Les Électriques",
        genre="Rock",
    )
    (root / "Rock" / "notes.txt").write_text("not music", encoding="utf-8")
    write_wav(root / ".hidden" / "secret.wav", seconds)
    return root


def write_tagged_flac(path: Path, tags: Mapping[str, str], seconds: float = 2.0) -> Path:
    """A FLAC file that is only its header (STREAMINFO, no audio frames) plus Vorbis comments.

    No encoder is needed: enough for reading tags and length, not for playing.
    """
    rate, channels, bits, samples = 44100, 1, 16, int(44100 * seconds)
    packed = (rate << 44) | ((channels - 1) << 41) | ((bits - 1) << 36) | samples
    info = struct.pack(">HH", 4096, 4096) + bytes(6) + packed.to_bytes(8, "big") + bytes(16)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info)
    audio = FLAC(path)
    audio.add_tags()
    for key, value in tags.items():
        audio[key] = value
    audio.save()
    return path


def write_tagged_mp3(path: Path, tags: Mapping[str, str], frames: int = 40) -> Path:
    """MPEG-1 Layer III frame headers (128 kb/s, 44.1 kHz; silent bodies) with ID3 tags."""
    frame = b"\xff\xfb\x90\x64" + bytes(413)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(frame * frames)
    audio = EasyMP3(path)
    audio.add_tags()
    for key, value in tags.items():
        audio[key] = value
    audio.save()
    return path
