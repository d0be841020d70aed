"""Which process owns a pending message row: one OS file lock per open store, freed at death."""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from botpsy_desktop.core.dbsafety import try_lock


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
        if not try_lock(fd):  # a fresh random name: nobody else can hold it
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
            dead = try_lock(fd)
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


class WriterLock:
    """One request at a time per conversation, across threads and processes.

    A conversation's history is written as its request runs (the user's message, the reply as
    it streams, each tool call); two requests at once would interleave them, and each would
    answer from a history the other is changing. The lock is an OS file lock on
    ``DB.writers/ID.lock`` (or, for an in-memory database, a lock within this process); the OS
    frees it when its process ends in any way, so a crashed request never blocks the next.
    """

    _memory: ClassVar[dict[str, threading.Lock]] = {}
    _memory_guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, database: Path | None, conversation_id: str) -> None:
        self._file = (
            None
            if database is None
            else database.with_name(database.name + ".writers") / f"{conversation_id}.lock"
        )
        self._id = conversation_id
        self._fd: int | None = None
        self._held: threading.Lock | None = None

    def acquire(self, cancel: threading.Event | None = None, poll_s: float = 0.05) -> bool:
        """Wait until this is the conversation's only writer (True), or ``cancel`` is set
        while waiting (False)."""
        if self._file is None:
            with WriterLock._memory_guard:
                lock = WriterLock._memory.setdefault(self._id, threading.Lock())
            while not lock.acquire(timeout=poll_s):
                if cancel is not None and cancel.is_set():
                    return False
            self._held = lock
            return True
        self._file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._file, os.O_RDWR | os.O_CREAT, 0o600)
        while not try_lock(fd):
            if cancel is not None and cancel.wait(poll_s):
                os.close(fd)
                return False
            if cancel is None:
                time.sleep(poll_s)
        self._fd = fd
        return True

    def release(self) -> None:
        if self._held is not None:
            self._held.release()
            self._held = None
        if self._fd is not None:
            os.close(self._fd)  # closing the file frees its lock
            self._fd = None
