"""What the app is doing now that background work (the documents index) should yield to.

The agent loop holds the app's :class:`Busy` while the model writes a reply (agent/steps/stream.py),
and the app while it prepares the model (App.warm); the documents indexer asks it between files
and waits while it is held (App.start_indexing). A held Busy stays "busy" for ``linger_s``
after its last release, so the few seconds of tool calls between two model turns of one
request do not start a scan (a walk of the folders) that the next turn stops again.

Across processes of one profile (the window, `botpsy ask`, `botpsy daemon`, `botpsy model
pull`): with a ``shared`` file, a process that answers holds a shared ``flock`` on it for as long
as it answers; :meth:`Busy.answering_elsewhere` tries an exclusive lock without waiting, which
fails while any process holds its shared one. The kernel drops a lock with its process, so a
killed process never leaves the profile "busy". POSIX only (``fcntl``); elsewhere only this
process's own holds count.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

try:
    import fcntl
except ImportError:  # Windows: no cross-process signal (see the module's text)
    fcntl = None  # type: ignore[assignment]

ANSWERING = "while the model answers"
PREPARING = "while the model prepares"
"""The reasons the app gives (after "paused": "paused while the model answers")."""


class Busy:
    """A count of holds, each with its reason; thread-safe."""

    def __init__(
        self,
        linger_s: float = 3.0,
        clock: Callable[[], float] = time.monotonic,
        *,
        shared: Path | None = None,
    ) -> None:
        self.linger_s = linger_s
        self._clock = clock
        self._held: Counter[str] = Counter()
        self._last: tuple[float, str] | None = None  # when the last hold ended, and why it was
        self._changed = threading.Condition()
        self.shared = shared if fcntl is not None else None
        self._answering: IO[bytes] | None = None  # the shared lock, while this process answers

    @contextmanager
    def hold(self, why: str) -> Iterator[None]:
        """Busy for ``why`` (e.g. "while the model answers") inside the ``with``."""
        with self._changed:
            self._held[why] += 1
            if why == ANSWERING and self._held[why] == 1:
                self._answering = self._lock_shared()
        try:
            yield
        finally:
            with self._changed:
                self._held[why] -= 1
                if self._held[why] <= 0:
                    del self._held[why]
                    if why == ANSWERING and self._answering is not None:
                        self._answering.close()  # the lock goes with the file
                        self._answering = None
                self._last = (self._clock(), why)
                self._changed.notify_all()

    def reason(self) -> str:
        """Why background work should wait now ('' when it need not): a hold's reason, or the
        last one's for ``linger_s`` after it ended, or another process of the profile
        answering."""
        with self._changed:
            if self._held:
                return next(iter(self._held))
            if self._last is not None and self._clock() - self._last[0] < self.linger_s:
                return self._last[1]
        return ANSWERING if self.answering_elsewhere() else ""

    def answering_elsewhere(self) -> bool:
        """Whether another process of the profile (or another ``Busy`` on the same file) is
        answering now; False without a shared file, and while this one answers itself."""
        if self.shared is None or fcntl is None:
            return False
        with self._changed:
            if self._answering is not None:
                return False  # our own shared lock would fail the probe
            try:
                probe = self.shared.open("ab")
            except OSError:
                return False  # an unwritable profile: nothing to learn, nothing to stop
            with probe:
                try:
                    fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return True
                except OSError:
                    return False
                fcntl.flock(probe.fileno(), fcntl.LOCK_UN)
                return False

    def _lock_shared(self) -> IO[bytes] | None:
        if self.shared is None or fcntl is None:
            return None
        try:
            handle = self.shared.open("ab")
        except OSError:
            return None  # the request goes on; other processes just do not see it
        # a prober holds its exclusive lock for a moment only: wait for it, briefly
        for _ in range(200):
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
                return handle
            except BlockingIOError:
                time.sleep(0.005)
            except OSError:
                break
        handle.close()
        return None

    def wait(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` seconds, less when a hold ends."""
        with self._changed:
            self._changed.wait(timeout_s)
