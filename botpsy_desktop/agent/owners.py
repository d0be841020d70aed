"""Which process owns a pending message row: one OS file lock per open store, freed at death."""

from __future__ import annotations

import contextlib
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True


class OwnerLock:
    """A token naming this store instance, backed by a locked file next to the database.

    The file ``DB.owners/TOKEN.lock`` stays locked while the store is open; the OS releases the
    lock when the process ends in any way (``kill -9`` included), so another process can tell
    a dead owner (lock free, or file gone) from a live one (lock held) without trusting pids,
    which the OS reuses. ``path=None`` (an in-memory database) keeps a token and no file.
    """

    def __init__(self, path: Path | None) -> None:
        self.token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self._folder = None if path is None else path.with_name(path.name + ".owners")
        self._fd: int | None = None
        if self._folder is None:
            return
        self._folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._file(self.token), os.O_RDWR | os.O_CREAT, 0o600)
        if not _try_lock(fd):  # a fresh random name: nobody else can hold it
            os.close(fd)
            raise OSError(f"cannot lock {self._file(self.token)}")
        self._fd = fd

    def _file(self, token: str) -> Path:
        assert self._folder is not None
        return self._folder / f"{token}.lock"

    @contextlib.contextmanager
    def if_dead(self, token: str) -> Iterator[bool]:
        """Yield whether ``token``'s process is gone; while True, its lock is held here, and its
        file is removed afterwards (so a second process recovering at the same time finds it
        gone, which also means dead, and does the same idempotent work)."""
        if self._folder is None or not token:
            yield True
            return
        file = self._file(token)
        try:
            fd = os.open(file, os.O_RDWR)
        except FileNotFoundError:
            yield True
            return
        dead = False
        try:
            dead = _try_lock(fd)
            yield dead
        finally:
            os.close(fd)
            if dead:  # removed after closing it (Windows cannot remove an open file)
                with contextlib.suppress(OSError):
                    file.unlink()

    def release(self) -> None:
        """Give up the lock and remove this token's file (at close)."""
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        with contextlib.suppress(OSError):
            self._file(self.token).unlink()
