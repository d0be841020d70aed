"""A reply written to the store as it streams: throttled saves, so a crash loses one sentence."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from botpsy_desktop.agent.events import Event, Thinking, Token
from botpsy_desktop.agent.provenance import TAINT
from botpsy_desktop.agent.store import ConversationStore

SAVE_EVERY_S = 0.25
"""Streamed text is saved at each sentence end, and otherwise at most this often."""

_SENTENCE_END = re.compile("[.!?:;\n\u2026\u3002\uff01\uff1f]")  # also ellipsis and CJK ends


class PendingReply:
    """The pending row of the request being answered, and the text streamed into it.

    The loop opens it with :meth:`start` (the user's message and the pending row, committed
    together), passes streamed events through :meth:`stream`, and ends every row with
    :meth:`finish`, which can open the next one (a tool call, the next model turn) at once.
    Text is saved before the event that carries it is yielded whenever it ends a sentence, so
    whatever a user has seen up to a sentence end is on disk. :meth:`abandon` ends a row left
    open by an error or a dropped generator.
    """

    def __init__(
        self,
        store: ConversationStore,
        conversation_id: str,
        *,
        every_s: float = SAVE_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.conversation_id = conversation_id
        self.row: int | None = None
        self.saves = 0
        self._every_s = every_s
        self._clock = clock
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._saved_at = 0.0
        self._dirty = False
        self._stub: dict[str, Any] = {"role": "assistant", "content": ""}
        self.taint: tuple[str, ...] = ()
        """The untrusted content in the context the model writes from now (agent/gate.py):
        every reply row saved carries it (agent/provenance.py TAINT), partial ones too."""

    def _labelled(self, message: dict[str, Any]) -> dict[str, Any]:
        if self.taint and message.get("role") == "assistant":
            return {**message, TAINT: list(self.taint)}
        return message

    def start(self, user: dict[str, Any]) -> None:
        self.row = self.store.start_turn(self.conversation_id, user)
        self._reset(None)

    def adopt(self, row: int, stub: dict[str, Any]) -> None:
        """Go on with a pending row opened earlier (a parked run's tool call, see
        ConversationStore.reopen_tool_row); ``stub`` is what the row holds."""
        self.row = row
        self._reset(stub)

    def _reset(self, stub: dict[str, Any] | None) -> None:
        self._text, self._thinking, self._dirty = [], [], False
        self._stub = stub or {"role": "assistant", "content": ""}
        self._saved_at = self._clock()

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def thinking(self) -> str:
        return "".join(self._thinking)

    def stream(self, events: Iterable[Event]) -> Iterator[Event]:
        """Pass events through, saving the streamed text (thinking too) as it goes."""
        for event in events:
            if isinstance(event, Token | Thinking) and self.row is not None:
                (self._text if isinstance(event, Token) else self._thinking).append(event.text)
                self._dirty = True
                now = self._clock()
                if _SENTENCE_END.search(event.text) or now - self._saved_at >= self._every_s:
                    self.save()
            yield event

    def save(self) -> None:
        """Write what has streamed so far into the pending row, if anything is new."""
        if self.row is None or not self._dirty:
            return
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self._thinking:
            message["reasoning_content"] = self.thinking
        self.store.update(self.row, self._labelled(message))
        self.saves += 1
        self._dirty = False
        self._saved_at = self._clock()

    def finish(
        self,
        message: dict[str, Any] | None,
        *,
        interrupted: bool = False,
        then: dict[str, Any] | None = None,
    ) -> None:
        """End the pending row with ``message`` (None: remove it) and open ``then`` after it."""
        if self.row is None:
            return
        if message is not None:
            message = self._labelled(message)
        self.row = self.store.finish(self.row, message, interrupted=interrupted, then=then)
        self._reset(then)

    def next_turn(self) -> dict[str, Any]:
        """The placeholder of the next model turn's reply, for ``then``."""
        return {"role": "assistant", "content": ""}

    def abandon(self) -> None:
        """End a row still open: what streamed into it is kept as interrupted."""
        if self.row is None:
            return
        if self._stub.get("role") != "assistant":  # a tool call that never finished
            self.finish(self._stub, interrupted=True)
            return
        message: dict[str, Any] | None = None
        if self.text.strip() or self.thinking.strip():
            message = {"role": "assistant", "content": self.text.strip()}
            if self._thinking:
                message["reasoning_content"] = self.thinking
        self.finish(message, interrupted=True)
