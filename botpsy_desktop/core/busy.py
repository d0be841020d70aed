"""What the app is doing now that background work (the documents index) should yield to.

The agent loop holds the app's :class:`Busy` while the model writes a reply (agent/steps/stream.py),
and the app while it prepares the model (App.warm); the documents indexer asks it between files
and waits while it is held (App.start_indexing). A held Busy stays "busy" for ``linger_s``
after its last release, so the few seconds of tool calls between two model turns of one
request do not start a scan (a walk of the folders) that the next turn stops again.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ANSWERING = "while the model answers"
PREPARING = "while the model prepares"
"""The reasons the app gives (after "paused": "paused while the model answers")."""


class Busy:
    """A count of holds, each with its reason; thread-safe."""

    def __init__(self, linger_s: float = 3.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.linger_s = linger_s
        self._clock = clock
        self._held: Counter[str] = Counter()
        self._last: tuple[float, str] | None = None  # when the last hold ended, and why it was
        self._changed = threading.Condition()

    @contextmanager
    def hold(self, why: str) -> Iterator[None]:
        """Busy for ``why`` (e.g. "while the model answers") inside the ``with``."""
        with self._changed:
            self._held[why] += 1
        try:
            yield
        finally:
            with self._changed:
                self._held[why] -= 1
                if self._held[why] <= 0:
                    del self._held[why]
                self._last = (self._clock(), why)
                self._changed.notify_all()

    def reason(self) -> str:
        """Why background work should wait now ('' when it need not): a hold's reason, or the
        last one's for ``linger_s`` after it ended."""
        with self._changed:
            if self._held:
                return next(iter(self._held))
            if self._last is not None and self._clock() - self._last[0] < self.linger_s:
                return self._last[1]
            return ""

    def wait(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` seconds, less when a hold ends."""
        with self._changed:
            self._changed.wait(timeout_s)
