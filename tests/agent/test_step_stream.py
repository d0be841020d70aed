"""The stream step (agent/steps/stream.py): the model's turn shown and saved as it is written,
its first sentence held back while it may say that a tool is missing."""

from __future__ import annotations

import threading
from collections.abc import Generator
from pathlib import Path
from typing import TypeVar

from botpsy_desktop.agent.events import Event, Thinking, Token
from botpsy_desktop.agent.reply import PendingReply
from botpsy_desktop.agent.steps.stream import HeldStart, Streamed, stream_turn
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.busy import ANSWERING, Busy
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.engines.replay import ReplayBackend

T = TypeVar("T")


def drain(gen: Generator[Event, None, T]) -> tuple[list[Event], T]:
    events: list[Event] = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


def reply_in(tmp_path: Path) -> tuple[ConversationStore, str, PendingReply]:
    store = ConversationStore(tmp_path / "db.sqlite3")
    conversation = store.create()
    reply = PendingReply(store, conversation)
    reply.start({"role": "user", "content": "hello"})
    return store, conversation, reply


def turn(
    backend: ReplayBackend, reply: PendingReply, **opts: object
) -> tuple[list[Event], Streamed]:
    prompt = [{"role": "user", "content": "hello"}]
    settings: dict[str, object] = {"held": None, "busy": None, "may_call": None, **opts}
    return drain(
        stream_turn(
            backend,
            prompt,
            [],
            think=False,
            cancel=threading.Event(),
            reply=reply,
            **settings,  # type: ignore[arg-type]
        )
    )


def test_thinking_and_text_stream_as_written_and_are_saved(tmp_path: Path) -> None:
    _, _, reply = reply_in(tmp_path)
    now = [0.0]
    busy = Busy(linger_s=1.0, clock=lambda: now[0])
    backend = ReplayBackend(["<think>Ann asked.</think>Hello there. How can I help?"])
    gen = stream_turn(
        backend,
        [{"role": "user", "content": "hello"}],
        [],
        think=False,
        cancel=threading.Event(),
        may_call=None,
        reply=reply,
        held=None,
        busy=busy,
    )
    first = next(gen)
    assert busy.reason() == ANSWERING  # background work waits while the model writes
    events, streamed = drain(gen)
    events.insert(0, first)
    now[0] = 5.0
    assert busy.reason() == ""
    assert streamed.failure is None and streamed.completion is not None
    assert "".join(e.text for e in events if isinstance(e, Thinking)).strip() == "Ann asked."
    assert "".join(e.text for e in events if isinstance(e, Token)) == "Hello there. How can I help?"
    assert reply.text == "Hello there. How can I help?" and reply.thinking.strip() == "Ann asked."


def test_an_answer_that_says_a_tool_is_missing_is_not_shown(tmp_path: Path) -> None:
    _, _, reply = reply_in(tmp_path)
    held = HeldStart(lambda text: ["email"] if "email" in text else [])
    events, streamed = turn(
        ReplayBackend(["I can't read your email. Sorry about that."]), reply, held=held
    )
    assert streamed.completion is not None and held.lacking == ["email"]
    assert events == [] and reply.text == ""

    _, _, reply = reply_in(tmp_path / "2")
    held = HeldStart(lambda text: ["email"] if "email" in text else [])
    events, _ = turn(ReplayBackend(["Sure. It is sunny."]), reply, held=held)
    assert held.decided and held.lacking == []
    assert "".join(e.text for e in events if isinstance(e, Token)) == "Sure. It is sunny."


def test_what_was_held_is_shown_when_the_turn_is_cut_short() -> None:
    held = HeldStart(lambda text: ["email"])
    assert held.feed([Thinking("hm"), Token("I will")]) == [Thinking("hm")]
    assert held.release([Token(" look")]) == [Token("I will"), Token(" look")]


def test_a_backend_that_fails_ends_the_turn_with_its_error(tmp_path: Path) -> None:
    _, _, reply = reply_in(tmp_path)
    events, streamed = turn(ReplayBackend([]), reply)
    assert events == [] and streamed.completion is None
    assert isinstance(streamed.failure, ModelError)
