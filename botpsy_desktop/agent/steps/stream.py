"""Stream: the model's turn streamed to the person as it is written, saved as it goes, its
first sentence held back while it may say that a tool is missing."""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.events import Event, Thinking, Token
from botpsy_desktop.agent.reply import PendingReply
from botpsy_desktop.core.busy import ANSWERING, Busy
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.backend import Backend
from botpsy_desktop.llm.language.parser import StreamSplitter
from botpsy_desktop.llm.types import Completion, PromptProgress


@dataclass(frozen=True)
class Streamed:
    """How a streamed turn ended: its completion, or the error that cut it short (what it had
    written is shown and kept)."""

    completion: Completion | None
    failure: BotpsyError | None = None


def stream_turn(
    backend: Backend,
    prompt: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    think: bool,
    cancel: threading.Event,
    may_call: frozenset[str] | None,
    reply: PendingReply,
    held: HeldStart | None,
    busy: Busy | None,
) -> Generator[Event, None, Streamed]:
    """Takes the fitted prompt and the tools; yields the turn's prompt progress, thinking and
    text as the backend writes them (the text through ``held`` when it is given), saved into
    ``reply`` as they stream; gives the completion, or the error that cut the turn short (a
    crash, a server gone, a Stop the engine did not honour). The app is busy (core/busy.py)
    while the model writes."""
    splitter: StreamSplitter | None = None
    completion: Completion | None = None
    try:
        with busy.hold(ANSWERING) if busy is not None else contextlib.nullcontext():
            for item in backend.complete(
                prompt, tools, enable_thinking=think, cancel=cancel, may_call=may_call
            ):
                if isinstance(item, Completion):
                    completion = item
                    break
                if isinstance(item, PromptProgress):
                    yield item
                    continue
                if splitter is None:
                    splitter = StreamSplitter(started_in_thinking=item.started_in_thinking)
                events = stream_events(splitter.feed(item.text))
                yield from reply.stream(held.feed(events) if held else events)
    except BotpsyError as exc:
        # what was held back is shown and kept with what streamed before it
        rest = list(stream_events(splitter.finish())) if splitter is not None else []
        yield from reply.stream(held.release(rest) if held else rest)
        return Streamed(None, exc)
    if splitter is not None:
        events = stream_events(splitter.finish())
        yield from reply.stream(held.feed(events, final=True) if held else events)
    return Streamed(completion)


class HeldStart:
    """Streamed events held back until the visible text's first sentence is complete, then
    judged by ``lacking`` (agent/selection.py RequestTools.lacking): passed on when it does not
    say a tool is missing, dropped (with all that follows) when it does."""

    LIMIT = 160

    def __init__(self, lacking: Callable[[str], list[str]]) -> None:
        self._judge = lacking
        self._held: list[Event] = []
        self._text = ""
        self.decided = False
        self.lacking: list[str] = []

    def release(self, events: Iterable[Event]) -> list[Event]:
        """Everything held, then ``events``, unjudged: the reply was cut short, and what the
        model wrote is shown and kept as it is."""
        held, self._held = self._held, []
        if self.decided and self.lacking:
            return []
        self.decided = True
        return [*held, *events]

    def feed(self, events: Iterable[Event], final: bool = False) -> list[Event]:
        """What of ``events`` to show now: the thinking before the answer at once, the answer's
        text once its first sentence is judged (nothing of it when it says a tool is missing);
        ``final``: the turn ended, judge what there is."""
        if self.decided:
            return [] if self.lacking else list(events)
        out: list[Event] = []
        for event in events:
            if not isinstance(event, Token) and not self._held:
                out.append(event)  # thinking before the answer is not held
                continue
            self._held.append(event)
            if isinstance(event, Token):
                self._text += event.text
        if not final and not _SENTENCE.search(self._text) and len(self._text) < self.LIMIT:
            return out
        self.decided = True
        self.lacking = self._judge(self._text) if self._text.strip() else []
        held, self._held = self._held, []
        return out if self.lacking else out + held


_SENTENCE = re.compile("[.!?\n\u3002\uff01\uff1f\u0964]")  # also CJK and Devanagari ends


def stream_events(parts: Sequence[tuple[str, str]]) -> Iterator[Event]:
    """The parser's streamed parts (llm/language/parser.py StreamSplitter) as events."""
    for kind, text in parts:
        if kind == "thinking" and text:
            yield Thinking(text)
        elif kind == "text" and text:
            yield Token(text)
