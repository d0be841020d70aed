"""Prefix states on disk: a model's full sequence state after a prompt prefix, for new processes.

A file holds what llama.cpp wrote for one sequence with flags 0 (attention KV cells and the
recurrent state of a hybrid model) after exactly one prefix's tokens, so another process with the
same model and context settings can restore it instead of evaluating the prefix again.

Our own small container format rather than ``llama_state_seq_save_file``: that format has no
checksum and no place for the key, and llama.cpp would start reading a truncated or mismatched
file before noticing. Here everything is checked *before* the state is handed to llama.cpp:

    header (fixed, little-endian)  magic, format version, n_tokens, meta length, payload length,
                                   key digest (32 bytes), SHA-256 of meta + tokens + payload
    meta                           JSON: what the key was made of (for people and ``doctor``)
    tokens                         int32 x n_tokens: the prefix's tokens
    payload                        the state bytes

Writes go to a uniquely named temporary file in the same folder, are fsynced, then renamed over
the final name, so a reader (another window, a CLI run) sees a whole file or none; two writers
of the same key each rename a whole file, the last one wins. The folder is bounded: after each
write the least recently used entries (by modification time, touched on every use) are removed
until the total fits. This module is pure Python (no llama.cpp), so ``doctor`` can read it.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from botpsy_desktop.llm.download import exclusive_lock

log = logging.getLogger(__name__)

MAGIC = b"BPSYPFX\x00"
FORMAT_VERSION = 1
SUFFIX = ".prefix"
_HEADER = struct.Struct("<8sIIQQ32s32s")  # magic, version, n_tokens, meta, payload, key, sha
HEADER_SIZE = _HEADER.size
_LOCK = ".lock"
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


@dataclass(frozen=True)
class Entry:
    """A verified prefix state read from disk."""

    key: str
    tokens: npt.NDArray[np.intc]
    payload: npt.NDArray[np.uint8]
    meta: dict[str, Any]
    read_s: float
    file_bytes: int


@dataclass(frozen=True)
class FolderStats:
    folder: Path
    entries: int
    total_bytes: int
    bound_bytes: int


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
    def load(self, key: str, tokens: Sequence[int] | npt.NDArray[Any]) -> Entry | None:
        """The verified entry for ``key`` whose tokens are ``tokens``; None if there is none.

        A file that is truncated, damaged or made for something else is removed and logged;
        nothing of it is returned.
        """
        path = self.path_for(key)
        started = time.perf_counter()
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below, after the size check
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("prefix state %s cannot be opened: %s", path.name, exc)
            return None
        with f:
            problem, entry = self._read(f, key, np.asarray(tokens, dtype=np.intc), started)
        if problem is not None:
            self._discard(path, problem)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used goes first: this one was just used
        return entry

    def _read(
        self, f: Any, key: str, want: npt.NDArray[np.intc], started: float
    ) -> tuple[str | None, Entry | None]:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(HEADER_SIZE)
        if len(raw) < HEADER_SIZE:
            return f"truncated header ({size} bytes)", None
        magic, version, n_tokens, meta_len, payload_len, key_raw, checksum = _HEADER.unpack(raw)
        if magic != MAGIC:
            return "not a prefix state file (bad magic)", None
        if version != FORMAT_VERSION:
            return f"format version {version}, this build reads {FORMAT_VERSION}", None
        if key_raw.hex() != key:
            return "made for another key", None
        expected = HEADER_SIZE + meta_len + 4 * n_tokens + payload_len
        if size != expected:
            return f"{size} bytes, the header announces {expected} (truncated or padded)", None
        if n_tokens != len(want):
            return f"{n_tokens} tokens, the prefix has {len(want)}", None
        body = np.empty(size - HEADER_SIZE, dtype=np.uint8)
        got = f.readinto(body.data)
        if got != body.nbytes:
            return "file shrank while reading", None
        if hashlib.sha256(body.data).digest() != checksum:
            return "checksum mismatch (damaged)", None
        meta_bytes = body[:meta_len].tobytes()
        tokens = body[meta_len : meta_len + 4 * n_tokens].view("<i4").astype(np.intc)
        if not np.array_equal(tokens, want):
            return "its tokens differ from the prefix's", None
        try:
            meta = json.loads(meta_bytes)
        except ValueError:
            return "unreadable metadata", None
        payload = body[meta_len + 4 * n_tokens :]
        entry = Entry(key, tokens, payload, meta, time.perf_counter() - started, size)
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
    def save(
        self,
        key: str,
        tokens: Sequence[int] | npt.NDArray[Any],
        payload: npt.NDArray[np.uint8],
        meta: Mapping[str, Any],
    ) -> Path | None:
        """Write an entry atomically, then evict down to the bound; the path, or None if the
        entry alone is larger than the bound or the folder cannot be written (logged)."""
        token_bytes = np.asarray(tokens, dtype="<i4").tobytes()
        meta_bytes = json.dumps(dict(meta), sort_keys=True, default=str).encode()
        total = HEADER_SIZE + len(meta_bytes) + len(token_bytes) + payload.nbytes
        if total > self.bound_bytes:
            log.info(
                "prefix state of %d tokens (%.1f MiB) is larger than the cache bound (%.0f MiB)",
                len(token_bytes) // 4,
                total / MiB,
                self.bound_bytes / MiB,
            )
            return None
        checksum = hashlib.sha256()
        checksum.update(meta_bytes)
        checksum.update(token_bytes)
        checksum.update(payload.data)
        header = _HEADER.pack(
            MAGIC,
            FORMAT_VERSION,
            len(token_bytes) // 4,
            len(meta_bytes),
            payload.nbytes,
            bytes.fromhex(key),
            checksum.digest(),
        )
        path = self.path_for(key)
        tmp = self.folder / f".{key[:16]}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            with open(tmp, "wb") as f:
                f.write(header)
                f.write(meta_bytes)
                f.write(token_bytes)
                f.write(payload.data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            _fsync_dir(self.folder)
        except OSError as exc:
            log.warning("prefix state %s not written: %s", path.name, exc)
            with contextlib.suppress(OSError):
                tmp.unlink()
            return None
        self.evict(keep=path)
        return path

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
