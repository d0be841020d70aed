"""Prefix states on disk: a model's full sequence state after a prompt prefix, for new processes.

A file holds what llama.cpp wrote for one sequence with flags 0 (attention KV cells and the
recurrent state of a hybrid model) after exactly one prefix's tokens, so another process with the
same model and context settings can restore it instead of evaluating the prefix again.

The body is llama.cpp's own sequence-state file (``llama_state_seq_save_file``), which llama.cpp
writes and reads tensor by tensor: neither saving nor restoring holds the whole state (tens of
MiB) in memory at once. That format has no checksum and no place for the key, and llama.cpp
would start reading a truncated or mismatched file before noticing, so a trailer of ours follows
it and everything is checked, reading in small blocks, *before* llama.cpp is given the file:

    body                           llama.cpp's file (opaque here): its own header, the tokens,
                                   the state
    meta                           JSON: what the key was made of (for people and ``doctor``)
    tokens                         int32 x n_tokens: the prefix's tokens
    trailer (fixed, little-endian) magic, format version, n_tokens, meta length, body length,
                                   key digest (32 bytes), SHA-256 of body + meta + tokens

Writes go to a uniquely named temporary file in the same folder, are fsynced, then renamed over
the final name, so a reader (another window, a CLI run) sees a whole file or none; two writers
of the same key each rename a whole file, the last one wins. A verified entry stays open while
llama.cpp reads it (through ``/proc/self/fd`` where there is one), so what is read is the file
that was checked. The folder is bounded: after each write the least recently used entries (by
modification time, touched on every use) are removed until the total fits. This module is pure
Python (no llama.cpp), so ``doctor`` can read it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import secrets
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from botpsy_desktop.llm.models.download import exclusive_lock

log = logging.getLogger(__name__)

MAGIC = b"BPSYPFX\x00"
FORMAT_VERSION = 2  # 2: llama.cpp's own file as the body, our trailer at the end
SUFFIX = ".prefix"
_TRAILER = struct.Struct("<8sIIQQ32s32s")  # magic, version, n_tokens, meta, body, key, sha
TRAILER_SIZE = _TRAILER.size
_BLOCK = 1 << 20  # read and hash in blocks of this size, never the whole file at once
_LOCK = ".lock"
_GROUPS = "groups.json"
_STALE_TMP_S = 3600.0  # a temporary file this old was left by a writer that died
MiB = 2**20


def prefix_key(components: Mapping[str, Any], tokens: Sequence[int] | npt.NDArray[Any]) -> str:
    """The key (hex SHA-256) of a prefix state: everything that determines it, and its tokens.

    ``components`` are the model's identity and every setting that changes the state (llama.cpp
    version, context and batch sizes, KV types, ...); the tokens stand for the chat template,
    system prompt, tool schemas and thinking flag exactly as they were rendered.
    """
    digest = hashlib.sha256()
    digest.update(f"botpsy-prefix/{FORMAT_VERSION}\n".encode())
    digest.update(json.dumps(dict(components), sort_keys=True, default=str).encode())
    digest.update(b"\ntokens\n")
    digest.update(np.asarray(tokens, dtype="<i4").tobytes())
    return digest.hexdigest()


@dataclass
class Entry:
    """A verified prefix state on disk, held open until ``close`` (use it as a context manager).

    ``body_path`` names the verified file for llama.cpp (``/proc/self/fd/N`` of the open file
    where the system has it, else the file's path); llama.cpp's part is its first
    ``body_bytes`` bytes.
    """

    key: str
    tokens: npt.NDArray[np.intc]
    meta: dict[str, Any]
    read_s: float
    file_bytes: int
    body_bytes: int
    path: Path
    _file: BinaryIO | None = field(default=None, repr=False)

    @property
    def body_path(self) -> str:
        if self._file is None:
            raise ValueError("the entry is closed")
        proc = f"/proc/self/fd/{self._file.fileno()}"
        return proc if os.path.exists(proc) else str(self.path)

    def read_body(self) -> bytes:
        """The body's bytes (for inspection; the engine lets llama.cpp read the file itself)."""
        if self._file is None:
            raise ValueError("the entry is closed")
        return os.pread(self._file.fileno(), self.body_bytes, 0)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Entry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class FolderStats:
    folder: Path
    entries: int
    total_bytes: int
    bound_bytes: int


class PendingWrite:
    """A new entry being written: its body goes to ``path`` (a temporary file in the folder,
    e.g. by llama.cpp), then ``finish`` checksums it, adds the trailer and renames it into
    place; ``abandon`` removes it. ``finish`` may run on another thread."""

    def __init__(self, store: PrefixStore, key: str, path: Path) -> None:
        self.store = store
        self.key = key
        self.path = path

    def finish(
        self,
        tokens: Sequence[int] | npt.NDArray[Any],
        meta: Mapping[str, Any],
        *,
        group: str | None = None,
    ) -> Path | None:
        """Seal the written body into an entry; its final path, or None (logged) when it is
        larger than the bound or cannot be written. ``group`` (a conversation) keeps one
        entry: the one it held before is removed (see ``PrefixStore.regroup``)."""
        store, key, tmp = self.store, self.key, self.path
        token_bytes = np.asarray(tokens, dtype="<i4").tobytes()
        meta_bytes = json.dumps(dict(meta), sort_keys=True, default=str).encode()
        final = store.path_for(key)
        try:
            with open(tmp, "r+b") as f:
                body_len = os.fstat(f.fileno()).st_size
                total = body_len + len(meta_bytes) + len(token_bytes) + TRAILER_SIZE
                if total > store.bound_bytes:
                    log.info(
                        "prefix state of %d tokens (%.1f MiB) is larger than the cache bound "
                        "(%.0f MiB)",
                        len(token_bytes) // 4,
                        total / MiB,
                        store.bound_bytes / MiB,
                    )
                    self.abandon()
                    return None
                checksum = _hash_blocks(f, body_len)
                checksum.update(meta_bytes)
                checksum.update(token_bytes)
                trailer = _TRAILER.pack(
                    MAGIC,
                    FORMAT_VERSION,
                    len(token_bytes) // 4,
                    len(meta_bytes),
                    body_len,
                    bytes.fromhex(key),
                    checksum.digest(),
                )
                f.seek(body_len)
                f.write(meta_bytes)
                f.write(token_bytes)
                f.write(trailer)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            _fsync_dir(store.folder)
        except OSError as exc:
            log.warning("prefix state %s not written: %s", final.name, exc)
            self.abandon()
            return None
        if group is not None:
            store.regroup(group, final)
        store.evict(keep=final)
        return final

    def abandon(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()


class PrefixStore:
    """A bounded folder of prefix states, shared safely by every process of one profile."""

    def __init__(self, folder: str | os.PathLike[str], *, bound_bytes: int) -> None:
        self.folder = Path(folder)
        self.bound_bytes = max(0, int(bound_bytes))
        self.discarded = 0  # files found damaged or mismatched and removed, this process

    @classmethod
    def for_profile(cls, cache_dir: Path, bound_mb: int) -> PrefixStore | None:
        """The profile's store (``cache_dir/prefix-states``), or None when the bound is 0."""
        if bound_mb <= 0:
            return None
        return cls(cache_dir / "prefix-states", bound_bytes=bound_mb * MiB)

    def path_for(self, key: str) -> Path:
        return self.folder / f"{key}{SUFFIX}"

    def contains(self, key: str) -> bool:
        return self.path_for(key).is_file()

    # -- reading ---------------------------------------------------------------------------
    def load(
        self, key: str, tokens: Sequence[int] | npt.NDArray[Any], *, at_least: bool = False
    ) -> Entry | None:
        """The verified entry for ``key`` whose tokens are ``tokens`` (``at_least``: whose
        tokens start with them), open; None if there is none. The caller closes it.

        A file that is truncated, damaged or made for something else is removed and logged;
        nothing of it is returned.
        """
        path = self.path_for(key)
        started = time.perf_counter()
        try:
            f = open(path, "rb")  # noqa: SIM115 - handed to the entry, or closed below
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("prefix state %s cannot be opened: %s", path.name, exc)
            return None
        try:
            want = np.asarray(tokens, dtype=np.intc)
            problem, entry = self._read(f, path, key, want, started, at_least)
        except OSError as exc:
            problem, entry = f"unreadable ({exc})", None
        if entry is None:
            f.close()
            self._discard(path, problem or "unreadable")
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used goes first: this one was just used
        return entry

    def _read(
        self,
        f: BinaryIO,
        path: Path,
        key: str,
        want: npt.NDArray[np.intc],
        started: float,
        at_least: bool = False,
    ) -> tuple[str | None, Entry | None]:
        size = os.fstat(f.fileno()).st_size
        if size < TRAILER_SIZE:
            return f"truncated ({size} bytes)", None
        f.seek(size - TRAILER_SIZE)
        raw = f.read(TRAILER_SIZE)
        magic, version, n_tokens, meta_len, body_len, key_raw, checksum = _TRAILER.unpack(raw)
        if magic != MAGIC:
            return "not a prefix state file, or truncated (no trailer)", None
        if version != FORMAT_VERSION:
            return f"format version {version}, this build reads {FORMAT_VERSION}", None
        if key_raw.hex() != key:
            return "made for another key", None
        expected = body_len + meta_len + 4 * n_tokens + TRAILER_SIZE
        if size != expected:
            return f"{size} bytes, the trailer announces {expected} (truncated or padded)", None
        if n_tokens < len(want) or (n_tokens != len(want) and not at_least):
            return f"{n_tokens} tokens, the prefix has {len(want)}", None
        f.seek(0)
        digest = _hash_blocks(f, body_len)
        rest = f.read(meta_len + 4 * n_tokens)
        if len(rest) != meta_len + 4 * n_tokens:
            return "file shrank while reading", None
        digest.update(rest)
        if digest.digest() != checksum:
            return "checksum mismatch (damaged)", None
        tokens = np.frombuffer(rest, dtype="<i4", offset=meta_len).astype(np.intc)
        if not np.array_equal(tokens[: len(want)], want):
            return "its tokens differ from the prefix's", None
        try:
            meta = json.loads(rest[:meta_len])
        except ValueError:
            return "unreadable metadata", None
        entry = Entry(key, tokens, meta, time.perf_counter() - started, size, body_len, path, f)
        return None, entry

    def discard(self, key: str, why: str) -> None:
        """Remove an entry llama.cpp refused (it is never tried again)."""
        self._discard(self.path_for(key), why)

    def _discard(self, path: Path, why: str) -> None:
        self.discarded += 1
        log.warning("prefix state %s discarded: %s", path.name, why)
        with contextlib.suppress(OSError):
            path.unlink()

    # -- writing ---------------------------------------------------------------------------
    def begin(self, key: str) -> PendingWrite | None:
        """A temporary file in the folder for a new entry's body; None (logged) if the folder
        cannot be written."""
        tmp = self.folder / f".{key[:16]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp.touch(mode=0o600, exist_ok=False)
        except OSError as exc:
            log.warning("prefix state %s not written: %s", self.path_for(key).name, exc)
            return None
        return PendingWrite(self, key, tmp)

    def save(
        self,
        key: str,
        tokens: Sequence[int] | npt.NDArray[Any],
        body: bytes | npt.NDArray[np.uint8],
        meta: Mapping[str, Any],
    ) -> Path | None:
        """Write an entry whose body is ``body`` atomically, then evict down to the bound; the
        path, or None if the entry alone is larger than the bound or the folder cannot be
        written (logged)."""
        pending = self.begin(key)
        if pending is None:
            return None
        try:
            with open(pending.path, "wb") as f:
                f.write(body if isinstance(body, bytes) else body.data)
        except OSError as exc:
            log.warning("prefix state %s not written: %s", self.path_for(key).name, exc)
            pending.abandon()
            return None
        return pending.finish(tokens, meta)

    def regroup(self, group: str, path: Path) -> None:
        """Make ``path`` the one entry of ``group`` (a conversation, whose newest warmed state
        is the only one worth keeping): the entry the group had before is removed. The
        groups are listed in a small JSON file in the folder, changed under its lock."""
        name = hashlib.sha256(group.encode()).hexdigest()[:32]
        index = self.folder / _GROUPS
        with exclusive_lock(self.folder / _LOCK, "the prefix state cache", wait=True):
            try:
                groups = json.loads(index.read_text(encoding="utf-8"))
                if not isinstance(groups, dict):
                    groups = {}
            except (OSError, ValueError):
                groups = {}
            old = groups.get(name)
            if isinstance(old, str) and old != path.name and old.endswith(SUFFIX):
                with contextlib.suppress(OSError):
                    (self.folder / Path(old).name).unlink()
            groups[name] = path.name
            known = {e.name for _, _, e in self._entries()}
            groups = {g: f for g, f in groups.items() if f in known}
            tmp = index.with_name(f".{_GROUPS}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            try:
                tmp.write_text(json.dumps(groups), encoding="utf-8")
                os.replace(tmp, index)
            except OSError as exc:
                log.warning("prefix state groups not written: %s", exc)
                with contextlib.suppress(OSError):
                    tmp.unlink()

    # -- the bound -------------------------------------------------------------------------
    def _entries(self) -> list[tuple[float, int, Path]]:
        found: list[tuple[float, int, Path]] = []
        try:
            listing = list(os.scandir(self.folder))
        except OSError:
            return found
        now = time.time()
        for item in listing:
            try:
                st = item.stat()
            except OSError:
                continue
            if item.name.endswith(SUFFIX) and not item.name.startswith("."):
                found.append((st.st_mtime, st.st_size, Path(item.path)))
            elif item.name.endswith(".tmp") and now - st.st_mtime > _STALE_TMP_S:
                with contextlib.suppress(OSError):
                    os.unlink(item.path)
        return found

    def evict(self, keep: Path | None = None) -> list[Path]:
        """Remove least recently used entries until the folder fits its bound."""
        removed: list[Path] = []
        if not self.folder.is_dir():
            return removed
        with exclusive_lock(self.folder / _LOCK, "the prefix state cache", wait=True):
            entries = sorted(self._entries(), key=lambda e: e[0])
            total = sum(size for _, size, _ in entries)
            for _, size, path in entries:
                if total <= self.bound_bytes:
                    break
                if path == keep:
                    continue
                with contextlib.suppress(OSError):
                    path.unlink()
                    removed.append(path)
                    total -= size
        for path in removed:
            log.info("prefix state %s evicted (cache bound %d MiB)", path.name, self.bound_mib)
        return removed

    @property
    def bound_mib(self) -> int:
        return self.bound_bytes // MiB

    def stats(self) -> FolderStats:
        entries = self._entries()
        return FolderStats(
            self.folder, len(entries), sum(size for _, size, _ in entries), self.bound_bytes
        )


def _hash_blocks(f: BinaryIO, n: int) -> Any:
    """SHA-256 of the next ``n`` bytes of ``f``, read a block at a time (raises OSError if the
    file ends first)."""
    digest = hashlib.sha256()
    block = bytearray(_BLOCK)
    view = memoryview(block)
    left = n
    while left > 0:
        got = f.readinto(view[: min(left, _BLOCK)])  # type: ignore[attr-defined]
        if not got:
            raise OSError("the file ended early")
        digest.update(view[:got])
        left -= got
    return digest


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def file_identity(path: str | os.PathLike[str], sha256: str | None = None) -> dict[str, Any]:
    """What identifies a model file in a key: its SHA-256 when known (the model registry checked
    it), else its size, modification time and a hash of its first 8 MiB (the GGUF header with
    the tokenizer and template, and the first tensors)."""
    p = Path(path)
    st = p.stat()
    if sha256:
        return {"sha256": sha256, "size": st.st_size}
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        digest.update(f.read(8 * MiB))
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "head_sha256": digest.hexdigest()}
