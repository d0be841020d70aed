"""The documents index: the text of the files in the allowed folders, searchable with SQLite FTS5.

Why SQLite FTS5 and not Tantivy or Xapian, the engines of the field: FTS5 is compiled into the
SQLite of every Python the app runs on, so it adds no native dependency to build, ship or crash
(Tantivy needs its Rust binding's wheels, Xapian a C++ library with no wheels on PyPI); it
ranks with BM25, answers phrase ("notice period") and prefix (``insur*``) queries, and keeps
the whole index in one file in the data folder, in transactions (a crash loses at most the
batch being written). ``tools/bench_documents.py`` measures it (docs/PERFORMANCE.md).

How text becomes searchable:

- the ``unicode61`` tokenizer with ``remove_diacritics 2`` folds case and accents on both sides
  ("résumé" finds "resume", "Strasse" does not find "Straße": that is a spelling, not an accent);
- CJK text (Chinese, Japanese, Korean) has no spaces, and unicode61 would make a whole run of
  it one token. Each run is also written to a second column as overlapping character bigrams
  ("水管工" -> "水管 管工"), and a CJK query becomes the phrase of its bigrams, which matches
  exactly where the query's characters stand in a row (the CJK indexers' classic approach;
  FTS5's ``trigram`` tokenizer would find every substring too, but needs three characters, and
  most Chinese and Japanese words have two);
- the file's name is a third column, ranked above the body (bm25 weights 1, 1 and 3).

Incremental and resumable: a scan walks the folders and compares each file's (size, mtime)
with what is stored; only new and changed files are read again, in batches that are committed
as they go. A crash or a quit mid-scan leaves a usable index, and the next scan skips what was
committed. Files no longer there (deleted, moved, now excluded) are forgotten at the end of a
complete scan. A file that cannot be read is stored as not indexed, with the reason, and read
again only when it changes. Bounded: only the kinds in the settings, at most ``max_bytes`` a
file, hidden, cache and trash folders skipped, symlinks not followed, the app's own folders
never indexed, only inside the allowed folders (the files tools' jail).
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import stat
import threading
import time
import unicodedata
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.documents.extract import Extracted, Unreadable, extract, kind_of
from botpsy_desktop.adapters.documents.worker import Reader, reader
from botpsy_desktop.adapters.files.jail import FolderJail

log = logging.getLogger(__name__)

INDEX_NAME = "documents.sqlite3"
"""The index's file name in the data folder."""

BATCH_FILES = 100
BATCH_S = 2.0
"""A scan commits after this many files read or this many seconds, whichever comes first."""

SKIPPED_FOLDERS = frozenset(
    {
        *("__pycache__", "node_modules", "cache", "caches", "tmp", "temp", "trash"),
        *("$recycle.bin", "recycler", "lost+found", "site-packages", "venv", "dist-packages"),
    }
)
"""Folder names (any case) never entered, besides hidden ones (a leading dot)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    passages INTEGER NOT NULL DEFAULT 0,
    chars INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS passages (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL,
    place TEXT NOT NULL,
    body TEXT NOT NULL,
    cjk TEXT NOT NULL,
    name TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS passages_file ON passages(file_id);
CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(
    body, cjk, name, content='passages', content_rowid='id',
    tokenize='unicode61 remove_diacritics 2'
);
CREATE TRIGGER IF NOT EXISTS passages_added AFTER INSERT ON passages BEGIN
    INSERT INTO passages_fts(rowid, body, cjk, name)
    VALUES (new.id, new.body, new.cjk, new.name);
END;
CREATE TRIGGER IF NOT EXISTS passages_removed AFTER DELETE ON passages BEGIN
    INSERT INTO passages_fts(passages_fts, rowid, body, cjk, name)
    VALUES ('delete', old.id, old.body, old.cjk, old.name);
END;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_CJK = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f"  # kana, Han
    "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"  # Hangul
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_QUERY_PART = re.compile(r'"([^"]*)"|([^\s"]+)')
_WORD = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+(?:\*)?", re.UNICODE)
_MIXED = re.compile(rf"[^\W_]*[{_CJK}][^\W_]*")
"""A run of word characters with CJK in it: one token for unicode61, words glued to CJK."""

RANK_AT_MOST = 2_000
"""A search ranks at most this many passages (BM25 scores each one it ranks): of those that
hold every word, the newest (the files indexed or changed last); the any-word search keeps its
rarest words, as many as are found in this many passages together. This bounds a search's time
whatever the corpus (docs/PERFORMANCE.md)."""

STEM_MIN = 5
"""In a loose search, a word this long or longer also matches other endings ("сантехника"
for "сантехник", "leases" for "lease"): its last letter (two from six letters on) is left
open, besides the word itself."""


def cjk_column(text: str) -> str:
    """What the ``cjk`` column indexes: the bigrams of the CJK runs, and the words glued to
    them ("水管工Moreau的发票" gives "Moreau", which unicode61 would bury in one token)."""
    glued = [piece for token in _MIXED.findall(text) for piece in _CJK_RUN.split(token) if piece]
    return " ".join([cjk_bigrams(text), *glued]).strip()


def cjk_bigrams(text: str) -> str:
    """The CJK runs of ``text`` as overlapping bigrams (a lone character as itself)."""
    grams: list[str] = []
    for run in _CJK_RUN.findall(text):
        if len(run) == 1:
            grams.append(run)
        else:
            grams.extend(run[i : i + 2] for i in range(len(run) - 1))
    return " ".join(grams)


def fold(text: str) -> str:
    """Lower case without accents, as the index compares words."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


@dataclass(frozen=True)
class Query:
    """A person's (or the model's) search words as FTS5 queries and as words to mark."""

    all_words: str
    """Every term must match (FTS5 syntax)."""
    any_word: str
    """Any term may match, the more the better (BM25 ranks)."""
    marks: tuple[tuple[str, bool], ...]
    """(folded term, is a prefix) to mark in snippets; CJK terms are matched as substrings."""
    any_terms: tuple[str, ...] = ()
    """The terms ``any_word`` joins with OR."""


def parse_query(text: str) -> Query | None:
    """``text`` as FTS5 queries: words, "exact phrases", ``prefix*``, CJK runs as bigrams.

    The strict query wants every word (a CJK run as the phrase of its bigrams); the loose one,
    the fallback, any of them, the more the better, each CJK bigram on its own and longer
    words with any ending (``STEM_MIN``): a question in a person's words ("what did the
    plumber charge?") still finds the passage that holds some of them. Nothing the user types
    can be FTS5 syntax (every term is quoted). None when it holds no word."""
    strict: list[str] = []
    loose: list[str] = []
    marks: list[tuple[str, bool]] = []
    for phrase, word in _QUERY_PART.findall(text):
        words = _WORD.findall(phrase or word)
        if not words:
            continue
        if phrase:
            parts = [cjk_bigrams(w) if _CJK_RUN.fullmatch(w) else w for w in words]
            term = '"' + " ".join(parts).replace('"', "") + '"'
            strict.append(term)
            loose.append(term)
            marks += [(fold(w), False) for w in words]
            continue
        for w in words:
            prefix = w.endswith("*")
            w = w.rstrip("*")
            if not w:
                continue
            if _CJK_RUN.fullmatch(w):
                grams = cjk_bigrams(w)
                strict.append(f'"{grams}"' + ("*" if len(w) == 1 else ""))
                loose += [f'"{g}"' + ("*" if len(g) == 1 else "") for g in grams.split()]
                marks += [(fold(w), False)] + [(fold(g), False) for g in grams.split()]
            else:
                strict.append(f'"{w}"' + ("*" if prefix else ""))
                loose.append(f'"{w}"' + ("*" if prefix else ""))
                marks.append((fold(w), prefix))
                if not prefix and len(w) >= STEM_MIN:  # the word itself still ranks higher
                    stem = w[: -1 if len(w) == STEM_MIN else -2]
                    loose.append(f'"{stem}"*')
                    marks.append((fold(stem), True))
    if not strict:
        return None
    strict = list(dict.fromkeys(strict))
    loose = list(dict.fromkeys(loose))
    return Query(" ".join(strict), " OR ".join(loose), tuple(dict.fromkeys(marks)), tuple(loose))


@dataclass(frozen=True)
class Hit:
    """One passage found: the file, where in it, its text, when the file changed, its rank."""

    path: str
    place: str
    text: str
    mtime_ns: int
    score: float


@dataclass
class Progress:
    """How far a scan has come (also stored in the index, for `botpsy index status`)."""

    seen: int = 0
    read: int = 0
    failed: int = 0
    removed: int = 0
    complete: bool = False
    started: float = field(default_factory=time.time)
    current: str = ""
    paused: str = ""
    """Why the scan paused (e.g. "on battery power"), '' when it did not."""
    known: int = 0
    """The files the index held when the scan began (what a rescan goes through again)."""
    not_indexed: int = 0
    """Files the index holds as not indexed (unreadable, no text), this scan's included."""

    def summary(self) -> str:
        """One short line for the window's status bar: files done of total (the files the
        index knew; none the first time), paused and why, files not indexed."""
        if self.complete:
            text = f"Documents indexed: {self.seen:,} files"
        else:
            done = (
                f"{self.seen:,} of {self.known:,} files"
                if self.known and self.known >= self.seen
                else f"{self.seen:,} files so far"
            )
            doing = f"Indexing paused {self.paused}" if self.paused else "Indexing documents"
            text = f"{doing}: {done}"
        if self.not_indexed:
            text += f", {self.not_indexed:,} not readable"
        return text

    def line(self) -> str:
        state = "done" if self.complete else f"paused {self.paused}" if self.paused else "scanning"
        return (
            f"{state}: {self.seen:,} files looked at, {self.read:,} read, "
            f"{self.failed:,} not indexed, {self.removed:,} forgotten"
        )


class DocumentIndex:
    """The index of the documents under ``roots`` (see the module's notes), kept in ``file``.

    ``exclude``: folders never indexed; ``kinds``: the file name endings indexed (``.pdf``...);
    ``skip``: folders of the app itself never indexed; ``max_bytes``: the largest file read;
    ``isolate``: read documents in a worker process with ``read_timeout_s`` per file;
    ``readers``: how many files a scan reads side by side (each in its own process).
    """

    def __init__(
        self,
        file: Path,
        roots: Sequence[Path],
        *,
        exclude: Sequence[Path] = (),
        kinds: Sequence[str] | None = None,
        skip: Sequence[Path] = (),
        max_bytes: int = 50 * 1024 * 1024,
        isolate: bool = True,
        read_timeout_s: float = 30.0,
        readers: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.file = file
        self.jail = FolderJail(roots) if roots else None
        self.exclude = tuple(_real(p) for p in exclude)
        self.skip = tuple(_real(p) for p in skip)
        self.kinds = frozenset(k.casefold() for k in kinds) if kinds is not None else None
        self.max_bytes = max_bytes
        self._isolate = isolate
        self._read_timeout_s = read_timeout_s
        self.readers = max(1, readers)
        self._local = threading.local()
        self._readers: list[Reader] = []
        self._readers_lock = threading.Lock()
        self._clock = clock
        self._write = threading.Lock()
        self._checked_at: float | None = None
        self.progress = Progress()
        self._ready = False
        self.watched = False
        """Set while a watcher (watch.py) applies the file system's change events."""

    # --- storage --------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.file, timeout=30, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        if not self._ready:
            db.executescript(_SCHEMA)
            self._ready = True
        return db

    def exists(self) -> bool:
        return self.file.exists()

    def close(self) -> None:
        """End the reader processes (the index itself holds no open connection)."""
        self._close_readers()

    # --- scanning -------------------------------------------------------------------------

    def wanted(self, path: str) -> bool:
        """Whether a file of this name is indexed (by its kind)."""
        if kind_of(path) is None:
            return False
        return self.kinds is None or os.path.splitext(path)[1].casefold() in self.kinds

    def skipped_folder(self, path: str, name: str) -> bool:
        """Whether the folder ``path`` (named ``name``) is never entered."""
        if name.startswith(".") or name.casefold() in SKIPPED_FOLDERS:
            return True
        if name.casefold().startswith(".trash"):
            return True
        real = Path(path)
        return any(real == p or real.is_relative_to(p) for p in (*self.exclude, *self.skip))

    def candidates(self) -> Iterator[tuple[str, os.stat_result]]:
        """The files to index under the roots, each once: (real path, its lstat)."""
        if self.jail is None:
            return
        seen_dirs: set[str] = set()
        for root in self.jail.roots:
            if any(root == p or root.is_relative_to(p) for p in (*self.exclude, *self.skip)):
                continue
            for top, dirs, files in os.walk(root, followlinks=False):
                if top in seen_dirs:  # a root inside another root
                    dirs[:] = []
                    continue
                seen_dirs.add(top)
                dirs[:] = sorted(
                    d for d in dirs if not self.skipped_folder(os.path.join(top, d), d)
                )
                for name in sorted(files):
                    if name.startswith(".") or not self.wanted(name):
                        continue
                    path = os.path.join(top, name)
                    try:
                        st = os.lstat(path)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        yield path, st

    def update(
        self,
        stop: threading.Event | None = None,
        budget_s: float | None = None,
        progress: Callable[[Progress], None] | None = None,
        pause: Callable[[], str] | None = None,
    ) -> Progress:
        """Bring the index up to date with the folders (see the module's notes). Stops early,
        keeping what it did, when ``stop`` is set, after ``budget_s`` seconds, or when
        ``pause`` gives a reason to (``state.paused`` says it); ``progress`` hears how far it
        came after each batch."""
        with self._write:
            return self._update(stop, budget_s, progress, pause)

    def _update(
        self,
        stop: threading.Event | None,
        budget_s: float | None,
        progress: Callable[[Progress], None] | None,
        pause: Callable[[], str] | None = None,
    ) -> Progress:
        began = self._clock()
        state = Progress()
        self.progress = state
        with closing(self._connect()) as db:
            known = {
                row[0]: (row[1], row[2], row[3], row[4] == "failed")
                for row in db.execute("SELECT path, id, size, mtime_ns, state FROM files")
            }
            state.known = len(known)
            state.not_indexed = sum(1 for k in known.values() if k[3])
            seen: set[str] = set()
            last_commit = time.monotonic()
            pending = 0
            self._meta(db, "scan_started", str(time.time()))
            complete = True

            def todo() -> Iterator[tuple[str, os.stat_result, int | None]]:
                """The files to read, as the walk finds them; stops the walk when asked."""
                nonlocal complete
                for path, st in self.candidates():
                    if (stop is not None and stop.is_set()) or (
                        budget_s is not None and self._clock() - began >= budget_s
                    ):
                        complete = False
                        return
                    state.paused = pause() if pause is not None else ""
                    if state.paused:
                        complete = False
                        return
                    seen.add(path)
                    state.seen += 1
                    before = known.get(path)
                    if before is None or before[1:3] != (st.st_size, st.st_mtime_ns):
                        if before is not None and before[3]:
                            state.not_indexed -= 1  # read again: counted as it turns out
                        yield path, st, before[0] if before else None

            for path, st, file_id, found in self._read_all(todo()):
                state.current = path
                self._store(db, path, st, file_id, state, found)
                pending += 1
                if pending >= BATCH_FILES or time.monotonic() - last_commit >= BATCH_S:
                    self._meta(db, "progress", state.line())
                    db.commit()
                    pending, last_commit = 0, time.monotonic()
                    if progress is not None:
                        progress(state)
            if complete:
                gone = [(known[p][0],) for p in known if p not in seen]
                state.not_indexed -= sum(1 for p in known if p not in seen and known[p][3])
                db.executemany("DELETE FROM passages WHERE file_id = ?", gone)
                db.executemany("DELETE FROM files WHERE id = ?", gone)
                state.removed = len(gone)
                state.complete = True
                self._meta(db, "scan_complete", str(time.time()))
            state.current = ""
            self._meta(db, "progress", state.line())
            db.commit()
        self._checked_at = self._clock()
        if progress is not None:
            progress(state)
        return state

    def candidate(self, path: str) -> os.stat_result | None:
        """The lstat of ``path`` if a scan would index it (a regular file of a wanted kind
        inside a root, in no hidden, skipped or excluded folder), else None."""
        if self.jail is None or not self.wanted(path) or os.path.basename(path).startswith("."):
            return None
        real = Path(path)
        root = next((r for r in self.jail.roots if real.is_relative_to(r)), None)
        if root is None:
            return None
        folder = str(root)
        for part in real.relative_to(root).parts[:-1]:
            folder = os.path.join(folder, part)
            if self.skipped_folder(folder, part):
                return None
        if any(real.is_relative_to(p) for p in (*self.exclude, *self.skip)):
            return None
        try:
            st = os.lstat(path)
        except OSError:
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def apply(self, paths: Sequence[str]) -> Progress:
        """Index what became of each of ``paths`` (a watcher's events): read if new or
        changed, forgotten if gone or no longer indexed, nothing if unchanged."""
        state = Progress()
        with self._write, closing(self._connect()) as db:
            for path in dict.fromkeys(paths):
                row = db.execute(
                    "SELECT id, size, mtime_ns FROM files WHERE path = ?", (path,)
                ).fetchone()
                st = self.candidate(path)
                state.seen += 1
                if st is None:
                    if row is not None:
                        db.execute("DELETE FROM passages WHERE file_id = ?", (row[0],))
                        db.execute("DELETE FROM files WHERE id = ?", (row[0],))
                        state.removed += 1
                elif row is None or tuple(row[1:]) != (st.st_size, st.st_mtime_ns):
                    self._store(db, path, st, row[0] if row else None, state, self._read(path))
                db.commit()
        state.complete = True
        return state

    def _read(self, path: str) -> Extracted | Unreadable:
        """The file's passages, or why it cannot be read (with this thread's reader)."""
        try:
            if kind_of(path) in ("text", "markdown"):  # plain decoding: nothing to isolate
                return extract(path, self.max_bytes)
            found = getattr(self._local, "reader", None)
            with self._readers_lock:
                if found is None or found not in self._readers:  # none yet, or closed
                    found = reader(self._isolate, self._read_timeout_s)
                    self._local.reader = found
                    self._readers.append(found)
            return found.read(path, self.max_bytes)
        except Unreadable as exc:
            return exc

    def _read_all(
        self, todo: Iterator[tuple[str, os.stat_result, int | None]]
    ) -> Iterator[tuple[str, os.stat_result, int | None, Extracted | Unreadable]]:
        """``todo`` read by ``readers`` threads (each with its reader process) side by side,
        given back in order; their readers end with it."""
        if self.readers <= 1:
            for path, st, file_id in todo:
                yield path, st, file_id, self._read(path)
            return
        window: deque[tuple[tuple[str, os.stat_result, int | None], Future[Any]]] = deque()
        pool = ThreadPoolExecutor(self.readers, thread_name_prefix="documents-read")
        try:
            for item in todo:
                window.append((item, pool.submit(self._read, item[0])))
                if len(window) >= 2 * self.readers:
                    (path, st, file_id), future = window.popleft()
                    yield path, st, file_id, future.result()
            while window:
                (path, st, file_id), future = window.popleft()
                yield path, st, file_id, future.result()
        finally:
            for _, future in window:
                future.cancel()
            pool.shutdown(wait=True)
            self._close_readers()

    def _close_readers(self) -> None:
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for r in readers:
            r.close()

    def _store(
        self,
        db: sqlite3.Connection,
        path: str,
        st: os.stat_result,
        file_id: int | None,
        state: Progress,
        read: Extracted | Unreadable,
    ) -> None:
        if isinstance(read, Unreadable):
            found, status, reason = Extracted([]), "failed", str(read)
        else:
            found, reason = read, read.note
            status = "indexed" if found.passages else "failed"
            if not found.passages:
                reason = "no text in it"
        if status == "failed":
            state.failed += 1
            state.not_indexed += 1
        else:
            state.read += 1
        if file_id is not None:
            db.execute("DELETE FROM passages WHERE file_id = ?", (file_id,))
            db.execute("DELETE FROM files WHERE id = ?", (file_id,))
        chars = sum(len(p.text) for p in found.passages)
        cursor = db.execute(
            "INSERT INTO files (path, size, mtime_ns, state, reason, passages, chars) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (path, st.st_size, st.st_mtime_ns, status, reason, len(found.passages), chars),
        )
        new_id = cursor.lastrowid
        name = _name_words(path)
        db.executemany(
            "INSERT INTO passages (file_id, place, body, cjk, name) VALUES (?, ?, ?, ?, ?)",
            [(new_id, p.place, p.text, cjk_column(p.text), name) for p in found.passages],
        )

    @staticmethod
    def _meta(db: sqlite3.Connection, key: str, value: str) -> None:
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def refresh(self, rescan_s: float, wait_s: float) -> str:
        """Before a search: if the folders were last checked more than ``rescan_s`` seconds
        ago (and no watcher follows them), check them now, for at most ``wait_s`` seconds (a
        scan running in another thread is waited for as long). A note when the index may not
        be complete, else ''."""
        if not self._write.acquire(timeout=max(0.0, wait_s)):
            return "The index is being updated; files changed just now may not be found yet."
        try:
            checked = self._checked_at
            # a watcher applies changes as they happen: once scanned, no rescans are needed
            fresh = checked is not None and (self.watched or self._clock() - checked < rescan_s)
            if fresh:
                return ""
            state = self._update(None, wait_s, None)
        finally:
            self._write.release()
        if not state.complete:
            return (
                "The index is still being built; only part of the documents were searched. "
                "Ask again in a while for more."
            )
        return ""

    def forget_under(self, folder: Path) -> int:
        """Remove every file under ``folder`` from the index; how many were removed."""
        prefix = str(_real(folder))
        with self._write, closing(self._connect()) as db:
            rows = [
                (r[0],)
                for r in db.execute("SELECT id, path FROM files")
                if r[1] == prefix or r[1].startswith(prefix.rstrip(os.sep) + os.sep)
            ]
            db.executemany("DELETE FROM passages WHERE file_id = ?", rows)
            db.executemany("DELETE FROM files WHERE id = ?", rows)
            db.commit()
        return len(rows)

    def forget(self) -> bool:
        """Delete the whole index (the next scan starts from nothing); whether there was one."""
        with self._write:
            existed = self.file.exists()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.file}{suffix}").unlink(missing_ok=True)
            self._ready = False
            self._checked_at = None
            return existed

    # --- searching ------------------------------------------------------------------------

    def search(self, text: str, limit: int = 5, under: Path | None = None) -> list[Hit]:
        """The best passages for ``text`` (all its words, else any of them, BM25-ranked), at
        most two per file, only files inside the allowed folders (and ``under``)."""
        query = parse_query(text)
        if query is None or not self.file.exists():
            return []
        with closing(self._connect()) as db:
            hits = self._ranked(db, query.all_words, limit, under)
            if not hits and query.any_word != query.all_words:
                hits = self._ranked(db, self._without_common(db, query.any_terms), limit, under)
        return hits

    @staticmethod
    def _without_common(db: sqlite3.Connection, terms: Sequence[str]) -> str:
        """The any-word query for the passages with its rarest terms only: as many as hold
        at most ``RANK_AT_MOST`` passages together (the rarest one at least), ranked with all
        of them. A word found in many passages has little weight in BM25, and scoring every
        passage it is in was most of a search's time."""
        counted = sorted(
            (
                db.execute(
                    "SELECT count(*) FROM passages_fts WHERE passages_fts MATCH ?", (t,)
                ).fetchone()[0],
                i,
                t,
            )
            for i, t in enumerate(terms)
        )
        kept: list[tuple[int, str]] = []
        total = 0
        for count, i, term in counted:
            if kept and total + count > RANK_AT_MOST:
                break
            kept.append((i, term))
            total += count
        rare = " OR ".join(t for _, t in sorted(kept))
        if len(kept) == len(terms):
            return rare
        # only the passages with a rare word, ranked with every word (the common ones add to
        # a passage's score; FTS5 looks them up for these passages alone)
        return f"({rare}) AND ({' OR '.join(terms)})"

    def _ranked(
        self, db: sqlite3.Connection, match: str, limit: int, under: Path | None
    ) -> list[Hit]:
        # the newest RANK_AT_MOST passages that match are ranked, not every one: BM25 scores
        # each passage it ranks, and a common word is in tens of thousands of them
        floor = db.execute(
            "SELECT rowid FROM passages_fts WHERE passages_fts MATCH ? "
            "ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (match, RANK_AT_MOST - 1),
        ).fetchone()
        # ranked in the FTS table alone first: only the best rows are joined with their text
        rows = db.execute(
            "WITH best AS (SELECT rowid AS id, bm25(passages_fts, 1.0, 1.0, 3.0) AS r "
            "FROM passages_fts WHERE passages_fts MATCH ? AND rowid >= ? ORDER BY r LIMIT ?) "
            "SELECT f.path, p.place, p.body, f.mtime_ns, best.r FROM best "
            "JOIN passages p ON p.id = best.id JOIN files f ON f.id = p.file_id ORDER BY best.r",
            (match, floor[0] if floor else 0, max(50, limit * 10)),
        )
        hits: list[Hit] = []
        per_file: dict[str, int] = {}
        for path, place, body, mtime_ns, score in rows:
            real = Path(path)
            if self.jail is None or not self.jail.contains(real):
                continue
            if under is not None and not (real == under or real.is_relative_to(under)):
                continue
            if any(real.is_relative_to(p) for p in self.exclude):
                continue
            if per_file.get(path, 0) >= 2:
                continue
            per_file[path] = per_file.get(path, 0) + 1
            hits.append(Hit(path, place, body, mtime_ns, float(score)))
            if len(hits) >= limit:
                break
        return hits

    def passages_of(self, path: str) -> tuple[list[tuple[str, str]], str]:
        """The passages (place, text) of the file at ``path`` (a real path inside the roots),
        read again first if it changed since it was indexed; and why there are none ('' when
        there are)."""
        self.apply([path])
        with closing(self._connect()) as db:
            row = db.execute(
                "SELECT id, state, reason FROM files WHERE path = ?", (path,)
            ).fetchone()
            if row is None:
                return [], "it is not a document the index reads (or it is in a folder left out)"
            if row[1] != "indexed":
                return [], row[2]
            rows = db.execute(
                "SELECT place, body FROM passages WHERE file_id = ? ORDER BY id", (row[0],)
            ).fetchall()
        return [(str(a), str(b)) for a, b in rows], ""

    # --- status ---------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What is in the index: files indexed and not (with reasons), passages, its size,
        the last scan's progress and when a scan last completed."""
        out: dict[str, Any] = {"index": str(self.file), "exists": self.file.exists()}
        if not self.file.exists():
            out.update(files=0, indexed=0, not_indexed=0, passages=0, bytes=0)
            return out
        with closing(self._connect()) as db:
            counts = dict(db.execute("SELECT state, count(*) FROM files GROUP BY state").fetchall())
            out["indexed"] = counts.get("indexed", 0)
            out["not_indexed"] = counts.get("failed", 0)
            out["files"] = sum(counts.values())
            out["passages"] = db.execute("SELECT count(*) FROM passages").fetchone()[0]
            out["text_chars"] = db.execute("SELECT coalesce(sum(chars), 0) FROM files").fetchone()[
                0
            ]
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            out["reasons"] = [
                {"path": p, "reason": r}
                for p, r in db.execute(
                    "SELECT path, reason FROM files WHERE state = 'failed' ORDER BY path LIMIT 50"
                )
            ]
        out["bytes"] = sum(
            Path(f"{self.file}{s}").stat().st_size
            for s in ("", "-wal")
            if Path(f"{self.file}{s}").exists()
        )
        out["last_scan"] = meta.get("progress", "")
        if "scan_complete" in meta:
            out["last_complete_scan"] = float(meta["scan_complete"])
        out["complete"] = float(meta.get("scan_complete", 0)) >= float(meta.get("scan_started", 1))
        return out


def _name_words(path: str) -> str:
    """The file's name as words (``2024-lease_Contract.pdf`` -> ``2024 lease Contract pdf``)."""
    name = os.path.basename(path)
    words = " ".join(re.findall(r"[^\W_]+", name))
    cjk = cjk_bigrams(name)
    return f"{words} {cjk}".strip()


def _real(path: Path) -> Path:
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


# --- snippets ------------------------------------------------------------------------------


def snippet(text: str, marks: Sequence[tuple[str, bool]], width: int = 240) -> str:
    """About ``width`` characters of ``text`` around the first place its marked words meet,
    each marked word in ``**``; whitespace made single spaces."""
    flat = " ".join(text.split())
    folded: list[str] = []
    where: list[int] = []  # the index in ``flat`` of each folded character
    for i, c in enumerate(flat):
        f = fold(c)
        folded.extend(f)
        where.extend([i] * len(f))
    low = "".join(folded)
    spans: list[tuple[int, int]] = []
    for term, prefix in marks:
        if not term:
            continue
        cjk = bool(_CJK_RUN.match(term))
        for m in re.finditer(re.escape(term), low):
            a, b = m.start(), m.end()
            if not cjk:
                if a > 0 and low[a - 1].isalnum():
                    continue
                if not prefix:
                    if b < len(low) and low[b].isalnum():
                        continue
                else:
                    while b < len(low) and low[b].isalnum():
                        b += 1
            spans.append((where[a], where[b - 1] + 1))
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):  # overlapping marks ("水管" and "管工") become one
        if merged and a < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    spans = merged
    if not spans:
        cut = flat[:width]
        return cut + ("…" if len(flat) > width else "")
    first = spans[0][0]
    start = max(0, first - width // 3)
    if start:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < first else start
    end = min(len(flat), start + width)
    if end < len(flat):
        space = flat.rfind(" ", start, end)
        end = space if space > spans[0][1] else end
    out: list[str] = ["…" if start else ""]
    at = start
    for a, b in spans:
        if a < at or b > end:
            continue
        out += [flat[at:a], "**", flat[a:b], "**"]
        at = b
    out.append(flat[at:end])
    out.append("…" if end < len(flat) else "")
    return "".join(out)
