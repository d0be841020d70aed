"""The music library: audio files in the configured folders, their tags, an index and search."""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

AUDIO_SUFFIXES = frozenset({".mp3", ".flac", ".ogg", ".opus", ".m4a", ".wav"})
SearchField = Literal["any", "artist", "album", "title", "genre"]

# Words around what people want to hear ("some jazz", "songs by Miles Davis") that no tag holds.
FILLER_WORDS = frozenset(
    {
        *("some", "any", "a", "an", "something", "please", "play", "me", "by", "from"),
        *("music", "songs", "song", "tracks", "track", "tunes", "album", "artist", "genre"),
    }
)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS tracks (
    path TEXT PRIMARY KEY,
    mtime_ns INTEGER NOT NULL,
    size INTEGER NOT NULL,
    title TEXT NOT NULL,
    artist TEXT NOT NULL,
    album TEXT NOT NULL,
    genre TEXT NOT NULL,
    disc INTEGER,
    track INTEGER,
    duration REAL,
    tagged INTEGER NOT NULL
)
"""
_LEADING_NUMBER = re.compile(r"^\s*(\d{1,3})\s*(?:[-._)]\s*|\s+)(?=\S)")


@dataclass(frozen=True)
class Track:
    """One audio file and what its tags (or, lacking them, its name and folders) say."""

    path: Path
    title: str
    artist: str
    album: str
    genre: str
    disc: int | None
    track: int | None
    duration: float | None
    tagged: bool

    def sort_key(self) -> tuple[str, str, int, int, str, str]:
        return (
            self.artist.casefold(),
            self.album.casefold(),
            self.disc or 0,
            self.track or 0,
            self.title.casefold(),
            str(self.path),
        )

    def describe(self, folders: Sequence[Path] = ()) -> dict[str, Any]:
        """The track as the model sees it: short, no empty fields."""
        out: dict[str, Any] = {"title": self.title}
        for key in ("artist", "album", "genre"):
            value = getattr(self, key)
            if value:
                out[key] = value
        if self.duration:
            out["duration"] = clock_time(self.duration)
        out["file"] = _short_path(self.path, folders)
        return out


@dataclass(frozen=True)
class ScanReport:
    """What a scan found: totals, and the changes since the last one."""

    total: int
    added: int
    updated: int
    removed: int
    missing_folders: tuple[Path, ...]

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tracks": self.total,
            "added": self.added,
            "updated": self.updated,
            "removed": self.removed,
        }
        if self.missing_folders:
            out["missing_folders"] = [str(p) for p in self.missing_folders]
        return out


class MusicLibrary:
    """Indexes audio files under ``folders`` into SQLite (``index_file``) and searches them.

    Tags are read again only for files whose size or modification time changed. The folders
    are checked again when the index is older than ``rescan_s`` seconds (or on ``refresh``).
    """

    def __init__(
        self,
        folders: Sequence[Path],
        index_file: Path | None,
        *,
        rescan_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.folders = tuple(Path(os.path.realpath(os.path.expanduser(f))) for f in folders)
        self._rescan_s = rescan_s
        self._clock = clock
        self._lock = threading.RLock()
        if index_file is not None:
            index_file.parent.mkdir(parents=True, exist_ok=True)
        target = str(index_file) if index_file is not None else ":memory:"
        self._db = sqlite3.connect(target, check_same_thread=False)
        self._db.execute(_SCHEMA)
        self._db.commit()
        self._tracks: list[Track] = self._load()
        self._scanned_at: float | None = None
        self._last_report: ScanReport | None = None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- scanning -----------------------------------------------------------------------------

    def tracks(self) -> list[Track]:
        """Every indexed track, sorted by artist, album, disc and track number."""
        self.ensure_fresh()
        with self._lock:
            return list(self._tracks)

    def ensure_fresh(self) -> ScanReport:
        """Scan if never scanned in this session or the last scan is older than ``rescan_s``."""
        with self._lock:
            now = self._clock()
            if (
                self._scanned_at is None
                or self._last_report is None
                or now - self._scanned_at >= self._rescan_s
            ):
                return self.refresh()
            return self._last_report

    def refresh(self) -> ScanReport:
        """Walk the folders, index new and changed files, forget removed ones."""
        with self._lock:
            known = {
                row[0]: (row[1], row[2])
                for row in self._db.execute("SELECT path, mtime_ns, size FROM tracks")
            }
            seen: set[str] = set()
            added = updated = 0
            missing: list[Path] = []
            for folder in self.folders:
                if not folder.is_dir():
                    missing.append(folder)
                    continue
                for path, st in _audio_files(folder):
                    key = str(path)
                    if key in seen:
                        continue
                    seen.add(key)
                    before = known.get(key)
                    if before == (st.st_mtime_ns, st.st_size):
                        continue
                    track = read_track(path, folder)
                    self._db.execute(
                        "INSERT OR REPLACE INTO tracks VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (
                            key,
                            st.st_mtime_ns,
                            st.st_size,
                            track.title,
                            track.artist,
                            track.album,
                            track.genre,
                            track.disc,
                            track.track,
                            track.duration,
                            int(track.tagged),
                        ),
                    )
                    if before is None:
                        added += 1
                    else:
                        updated += 1
            gone = [p for p in known if p not in seen]
            self._db.executemany("DELETE FROM tracks WHERE path = ?", [(p,) for p in gone])
            self._db.commit()
            self._tracks = self._load()
            self._scanned_at = self._clock()
            self._last_report = ScanReport(
                len(self._tracks), added, updated, len(gone), tuple(missing)
            )
            return self._last_report

    def _load(self) -> list[Track]:
        rows = self._db.execute(
            "SELECT path, title, artist, album, genre, disc, track, duration, tagged FROM tracks"
        ).fetchall()
        tracks = [
            Track(Path(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], bool(r[8])) for r in rows
        ]
        tracks.sort(key=Track.sort_key)
        return tracks

    # --- search -------------------------------------------------------------------------------

    def search(self, query: str, field: SearchField = "any") -> list[Track]:
        """Tracks where each word of ``query`` starts a word of ``field`` (any case and accents).

        When nothing matches, words such as "some", "songs" or "by" are dropped and the search
        is tried again, so "some jazz" finds the tracks tagged Jazz.
        """
        words = _words(query)
        if not words:
            return self.tracks()
        tracks = self.tracks()
        found = [t for t in tracks if _matches(t, words, field)]
        if not found:
            meaningful = [w for w in words if w not in FILLER_WORDS]
            if meaningful and meaningful != words:
                found = [t for t in tracks if _matches(t, meaningful, field)]
        return found

    def folders_text(self) -> str:
        return ", ".join(_home_short(f) for f in self.folders)


def read_track(path: Path, folder: Path) -> Track:
    """Read a file's tags with mutagen; missing tags come from the file and folder names."""
    import mutagen  # only when a library is scanned: 1.2 MiB the app's process holds otherwise

    title = artist = album = genre = ""
    disc = number = None
    duration: float | None = None
    try:
        audio: Any = mutagen.File(path, easy=True)
    except (mutagen.MutagenError, OSError, ValueError, EOFError):
        audio = None
    if audio is not None:
        info = getattr(audio, "info", None)
        length = getattr(info, "length", None)
        if isinstance(length, int | float) and length > 0:
            duration = float(length)
        tags = audio.tags
        if tags is not None:
            title = _tag(tags, "title", "TIT2")
            artist = _tag(tags, "artist", "TPE1") or _tag(tags, "albumartist", "TPE2")
            album = _tag(tags, "album", "TALB")
            genre = _tag(tags, "genre", "TCON")
            number = _number(_tag(tags, "tracknumber", "TRCK"))
            disc = _number(_tag(tags, "discnumber", "TPOS"))
    tagged = bool(title or artist or album)
    stem = path.stem
    match = _LEADING_NUMBER.match(stem)
    if match:
        number = number or int(match.group(1))
        stem = stem[match.end() :]
    if not title and not artist and " - " in stem:
        artist, _, stem = (part.strip() for part in stem.partition(" - "))
    title = title or stem.replace("_", " ").strip() or path.name
    relative_parents = path.parent.relative_to(folder).parts if path.is_relative_to(folder) else ()
    if not album and relative_parents:
        album = relative_parents[-1]
    if not artist and len(relative_parents) >= 2:
        artist = relative_parents[-2]
    return Track(path, title, artist, album, genre, disc, number, duration, tagged)


def clock_time(seconds: float) -> str:
    """``3:05`` or ``1:02:03``."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _audio_files(folder: Path) -> Iterable[tuple[Path, os.stat_result]]:
    """Audio files below ``folder``; hidden entries and symlinked folders are skipped."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or Path(name).suffix.lower() not in AUDIO_SUFFIXES:
                continue
            path = Path(root) / name
            try:
                st = path.stat()
            except OSError:
                continue
            if not path.is_file():
                continue
            real = Path(os.path.realpath(path))
            if not real.is_relative_to(folder):
                continue  # a symlink leading out of the library
            yield path, st


def _tag(tags: Any, easy_key: str, id3_key: str) -> str:
    """The first value of a tag, from easy (Vorbis, EasyID3, EasyMP4) or raw ID3 tags."""
    from mutagen.id3 import ID3

    try:
        if isinstance(tags, ID3):
            values: Any = getattr(tags[id3_key], "text", None)  # KeyError: no such frame
        else:
            values = tags.get(easy_key)
    except (KeyError, ValueError, TypeError):
        return ""
    if isinstance(values, list | tuple):
        values = values[0] if values else None
    return str(values).strip() if values is not None else ""


def _number(text: str) -> int | None:
    """``"3"`` or ``"3/12"`` as 3."""
    match = re.match(r"\s*(\d+)", text)
    return int(match.group(1)) if match else None


def _fold(text: str) -> str:
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def _words(query: str) -> list[str]:
    return [w for w in re.split(r"[\W_]+", _fold(query)) if w]


def _matches(track: Track, words: list[str], field: SearchField) -> bool:
    if field == "any":
        haystack = " ".join((track.title, track.artist, track.album, track.genre, track.path.stem))
    else:
        haystack = getattr(track, field)
    # every word of the query starts a word of the tags: "blue" finds "Blue in Green" but
    # "by" does not find "Lullaby"
    tag_words = [w for w in re.split(r"[\W_]+", _fold(haystack)) if w]
    return all(any(t.startswith(w) for t in tag_words) for w in words)


def _short_path(path: Path, folders: Sequence[Path]) -> str:
    for folder in folders:
        if path.is_relative_to(folder):
            return str(path.relative_to(folder))
    return _home_short(path)


def _home_short(path: Path) -> str:
    home = Path(os.path.expanduser("~"))
    return str(Path("~") / path.relative_to(home)) if path.is_relative_to(home) else str(path)
