"""The context budget: fit a conversation's prompt into the model's context, oldest turns first."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Messages = list[dict[str, Any]]
Counter = Callable[[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]], int]
"""Counts a prompt's tokens: (messages, tool schemas) -> tokens the backend would evaluate."""

CLIP_NOTE = "[clipped to fit the model's context: {n} more characters not shown]"
TOOL_SHARE = 4
"""A single tool result may take at most 1/TOOL_SHARE of the room left for the conversation."""
MIN_REPLY_TOKENS = 256
"""The least room kept for the reply when the request itself leaves less than the reserve."""


class ContextFull(Exception):
    """Even the parts that are never left out do not fit the context."""

    def __init__(self, needed: int, limit: int, n_ctx: int, reply_tokens: int) -> None:
        super().__init__(f"needs {needed} tokens, {limit} available")
        self.needed = needed
        self.limit = limit
        self.n_ctx = n_ctx
        self.reply_tokens = reply_tokens


@dataclass
class Fitted:
    """The prompt to send, and what was left out of it (the stored conversation keeps all)."""

    messages: Messages
    prompt_tokens: int
    dropped_turns: int = 0
    dropped_messages: int = 0
    clipped: list[str] = field(default_factory=list)
    """Names of the tools whose results were clipped, in prompt order."""

    @property
    def trimmed(self) -> bool:
        return bool(self.dropped_turns or self.clipped)


def split_turns(messages: Sequence[dict[str, Any]]) -> tuple[list[Messages], Messages]:
    """History turns (each from a user message to the next) and the current request's turn.

    The current turn starts at the last user message and holds the tool calls and results of the
    request in progress. Anything before the first user message belongs to the first turn.
    """
    starts = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not starts:
        return [], list(messages)
    current = list(messages[starts[-1] :])
    turns: Messages = []
    history: list[Messages] = []
    for i, m in enumerate(messages[: starts[-1]]):
        if m.get("role") == "user" and turns and i in starts:
            history.append(turns)
            turns = []
        turns.append(m)
    if turns:
        history.append(turns)
    return history, current


class ContextBudget:
    """Fits ``system + history + current request`` into ``n_ctx - reply_tokens`` tokens.

    The rule: the system prompt, the tool schemas and the current request (its user message and
    the tool calls and results of this request so far) are never left out. A conversation that
    fits is sent whole. Otherwise every tool result is first clipped, with a note, to its share
    (1/TOOL_SHARE of the room after the system prompt and tools), and the current request's
    results further, evenly, if the request alone still does not fit. Then older turns are left
    out whole, oldest first, so a tool call always travels with its results; the number left
    out is rounded up to a multiple of ``chunk_turns`` (at most half of the turns that fit)
    counted from the start of the conversation, so the prompt's start stays the same for
    several requests and the model's saved state of it (``llm/cache/prefix_cache.py``) stays usable.
    If the irreducible part does not fit with ``reply_tokens`` left for the reply, every older
    turn is left out and the reply gets what is left, down to MIN_REPLY_TOKENS (the engine stops
    a reply at the end of the context); below that, :class:`ContextFull` is raised.
    """

    def __init__(self, count: Counter, *, n_ctx: int, reply_tokens: int, chunk_turns: int) -> None:
        self._count = count
        self.n_ctx = n_ctx
        self.reply_tokens = reply_tokens
        self.min_reply_tokens = min(reply_tokens, MIN_REPLY_TOKENS)
        self.chunk_turns = max(1, chunk_turns)
        self._text_sizes: dict[str, int] = {}
        self._reserve = reply_tokens

    @property
    def limit(self) -> int:
        """Tokens the prompt may take: the context less the room kept for the reply."""
        return self.n_ctx - self._reserve

    def fit(self, messages: Sequence[dict[str, Any]], tools: Sequence[Mapping[str, Any]]) -> Fitted:
        """The messages to send (``messages[0]`` is the system prompt when there is one)."""
        self._reserve = self.reply_tokens
        try:
            return self._fit(messages, tools, keep_history=True)
        except ContextFull:
            if self.min_reply_tokens >= self.reply_tokens:
                raise
        self._reserve = self.min_reply_tokens  # the request alone is that long: a shorter reply
        try:
            return self._fit(messages, tools, keep_history=False)
        finally:
            self._reserve = self.reply_tokens

    def _fit(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        keep_history: bool,
    ) -> Fitted:
        has_system = bool(messages) and messages[0].get("role") == "system"
        system: Messages = [dict(messages[0])] if has_system else []
        history, current = split_turns(list(messages[1:] if has_system else messages))
        full = [*system, *(m for turn in history for m in turn), *current]
        total = self._count(full, tools)
        if keep_history and total <= self.limit:  # the common case: one count, all sent
            return Fitted(list(full), total)

        unchanged = {id(m) for m in full}  # a clipped message is a new object
        room = self.limit - self._count([*system, {"role": "user", "content": ""}], tools)
        share = max(room // TOOL_SHARE, 1)
        history = [[self._clip(m, share) for m in turn] for turn in history]
        current = [self._clip(m, share) for m in current]

        base = self._count([*system, *current], tools)
        if base > self.limit:
            current, base = self._squeeze(system, current, tools, base)
        kept = self._kept_turns(system, history, current, tools) if keep_history else 0
        drop = len(history) - kept
        if drop:
            # whole chunks from the conversation's start, but never more than half of the
            # turns that fit, so a small context still keeps the latest turns
            chunk = max(1, min(self.chunk_turns, kept // 2))
            drop = min(len(history), math.ceil(drop / chunk) * chunk)
        sent = [*system, *(m for turn in history[drop:] for m in turn), *current]
        tokens = self._count(sent, tools) if drop < len(history) else base
        return Fitted(
            sent,
            tokens,
            dropped_turns=drop,
            dropped_messages=sum(len(turn) for turn in history[:drop]),
            clipped=[
                str(m.get("name") or "tool")
                for m in sent
                if m.get("role") == "tool" and id(m) not in unchanged
            ],
        )

    def _kept_turns(
        self,
        system: Messages,
        history: list[Messages],
        current: Messages,
        tools: Sequence[Mapping[str, Any]],
    ) -> int:
        """The most recent history turns that fit with the rest (exponential, then binary search:
        only about log2(n) prompts are counted, none of them longer than what fits)."""

        def fits(k: int) -> bool:
            if k == 0:
                return True
            kept = [m for turn in history[len(history) - k :] for m in turn]
            return self._count([*system, *kept, *current], tools) <= self.limit

        if fits(len(history)):
            return len(history)
        good, bad = 0, len(history)  # fits(good) holds, fits(bad) does not
        k = 1
        while k < bad:
            if not fits(k):
                bad = k
                break
            good = k
            k *= 2
        while bad - good > 1:
            mid = (good + bad) // 2
            if fits(mid):
                good = mid
            else:
                bad = mid
        return good

    def _squeeze(
        self,
        system: Messages,
        current: Messages,
        tools: Sequence[Mapping[str, Any]],
        base: int,
    ) -> tuple[Messages, int]:
        """Clip the current request's tool results evenly until it fits, or raise ContextFull."""
        results = [i for i, m in enumerate(current) if m.get("role") == "tool"]
        if results:
            bare = [{**m, "content": ""} if i in results else m for i, m in enumerate(current)]
            room = self.limit - self._count([*system, *bare], tools)
            share = room // len(results)
            original = current
            if share > 0:
                for _ in range(3):  # token counts of clipped text are estimates: check again
                    current = [
                        self._clip(m, share) if i in results else m for i, m in enumerate(original)
                    ]
                    base = self._count([*system, *current], tools)
                    if base <= self.limit:
                        return current, base
                    share = max(1, share * 3 // 4)
        raise ContextFull(base, self.limit, self.n_ctx, self._reserve)

    def _text_tokens(self, text: str) -> int:
        size = self._text_sizes.get(text)
        if size is None:
            if len(self._text_sizes) > 512:
                self._text_sizes.clear()
            with_text = self._count([{"role": "user", "content": text}], [])
            size = with_text - self._count([{"role": "user", "content": ""}], [])
            self._text_sizes[text] = size
        return size

    def _clip(self, message: dict[str, Any], share: int) -> dict[str, Any]:
        """A tool result cut to about ``share`` tokens, with a note saying how much was cut."""
        if message.get("role") != "tool":
            return message
        text = str(message.get("content", ""))
        size = self._text_tokens(text)
        if size <= share:
            return message
        body, end = text, ""
        last = text.rfind("\n[End of ")
        if last >= 0 and text.endswith("]"):  # keep the closing line of framed tool output
            body, end = text[:last], text[last:]
        keep = int(len(body) * share / size)
        for _ in range(4):
            cut = f"{body[:keep]}\n{CLIP_NOTE.format(n=len(body) - keep)}{end}"
            if keep == 0 or self._text_tokens(cut) <= share:
                break
            keep = int(keep * 0.8)
        return {**message, "content": cut}
