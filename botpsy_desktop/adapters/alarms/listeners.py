"""Who hears the alarms ring: listeners added and removed from any thread, each told in turn."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from botpsy_desktop.adapters.alarms.records import AlarmFired, Listener

log = logging.getLogger(__name__)


class Listeners:
    """The listeners of one service; a listener that fails is logged and the others still hear."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Listener] = []

    def add(self, listener: Listener) -> None:
        with self._lock:
            self._items.append(listener)

    def remove(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._items:
                self._items.remove(listener)

    def current(self) -> list[Listener]:
        """The listeners now (later changes do not affect the list returned)."""
        with self._lock:
            return list(self._items)

    @staticmethod
    def tell(listeners: Iterable[Listener], events: Iterable[AlarmFired]) -> None:
        """Each event to each listener, in order, on this thread."""
        listeners = list(listeners)
        for event in events:
            for listener in listeners:
                try:
                    listener(event)
                except Exception:
                    # the id and kind only: a reminder's or routine's text is the user's words
                    log.exception("an alarm listener failed on %s %s", event.kind.value, event.id)
