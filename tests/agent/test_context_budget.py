"""The context budget: long conversations keep working, what is left out is reported."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from botpsy_desktop.agent.budget import CLIP_NOTE, ContextBudget, split_turns
from botpsy_desktop.agent.events import Answer, ContextTrimmed, Error, Event, TurnFinished
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.llm.engines.engine import LlamaBackend
from botpsy_desktop.llm.engines.replay import ReplayBackend
from tests.agent.gate_tools import shipped_gate
from tests.helpers.models import tiny_qwen35_gguf

SYSTEM = "You are a test."


class LookArgs(BaseModel):
    """Look something up."""

    what: str


def look_call(what: str) -> str:
    body = f"<function=look>\n<parameter=what>\n{what}\n</parameter>\n</function>"
    return f"<tool_call>\n{body}\n</tool_call>"


def make_registry(output: str = "") -> ToolRegistry:
    def look(args: LookArgs) -> str:
        return output or f"found {args.what} " + "data " * 40

    registry = ToolRegistry()
    registry.register(make_tool(look, effects=[Effect.READ]))
    return registry


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConversationStore]:
    s = ConversationStore(tmp_path / "db.sqlite3")
    yield s
    s.close()


def run(session: AgentSession, text: str) -> list[Event]:
    return list(session.run(text))


def check_prompt(prompt: list[dict[str, Any]], request: str) -> None:
    """What is never left out is there; every tool call travels with its result."""
    assert prompt[0] == {"role": "system", "content": SYSTEM}
    users = [m for m in prompt if m["role"] == "user"]
    assert users[-1]["content"] == request
    calls = {c["id"] for m in prompt for c in m.get("tool_calls", [])}
    results = {m["tool_call_id"] for m in prompt if m["role"] == "tool"}
    assert calls == results
    assert prompt[1]["role"] == "user"  # whole turns are left out


def test_split_turns_groups_from_each_user_message() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]},
        {"role": "tool", "tool_call_id": "1", "content": "x"},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "B"},
        {"role": "user", "content": "c"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "2"}]},
    ]
    history, current = split_turns(msgs)
    assert [len(t) for t in history] == [4, 2]
    assert current == msgs[6:]
    assert split_turns([]) == ([], [])


def test_a_conversation_that_fits_is_sent_whole_with_one_count() -> None:
    counts: list[int] = []
    backend = ReplayBackend([], n_ctx=4096)

    def count(m: Any, t: Any) -> int:
        counts.append(1)
        return backend.count_tokens(m, t, enable_thinking=False)

    budget = ContextBudget(count, n_ctx=4096, reply_tokens=512, chunk_turns=4)
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
    fitted = budget.fit(msgs, [])
    assert fitted.messages == msgs and not fitted.trimmed and len(counts) == 1
    assert 0 < fitted.prompt_tokens < 50


def test_long_conversation_drops_old_turns_in_chunks(store: ConversationStore) -> None:
    """40 requests with tool calls in a 3072-token context (replay estimates tokens)."""
    turns: list[str] = []
    for i in range(40):
        turns += [look_call(f"item {i}"), f"Item {i} is fine. " + "More words. " * 10]
    backend = ReplayBackend(turns, n_ctx=3072)
    settings = LoopSettings(system_prompt=SYSTEM, reply_tokens=128, trim_chunk_turns=4)
    session = AgentSession(backend, make_registry(), shipped_gate(), store, settings)
    reported: list[ContextTrimmed] = []
    dropped: list[int] = []
    for i in range(40):
        request = f"Please look up item {i}."
        events = run(session, request)
        assert isinstance(events[-1], Answer), events[-1]
        assert not [e for e in events if isinstance(e, Error)]
        reported += [e for e in events if isinstance(e, ContextTrimmed)]
        for prompt in backend.prompts[-2:]:
            check_prompt(prompt, request)
            tokens = backend.count_tokens(prompt, session.registry.schemas(), enable_thinking=False)
            assert tokens <= 3072 - 128
        sent_users = [m for m in backend.prompts[-1] if m["role"] == "user"]
        dropped.append(i + 1 - len(sent_users))
    # dropped whole turns, a multiple of the chunk, never fewer than before
    assert dropped[0] == 0 and dropped[-1] >= 20
    # (or all the history there is, when that is less than a chunk)
    assert all(d % 4 == 0 or d == i for i, d in enumerate(dropped)), dropped
    assert dropped == sorted(dropped)
    # the prompt's start changes once per chunk, not on every request
    assert len(set(dropped)) <= 40 // 4 + 1
    assert reported and reported[0].dropped_turns == 4
    assert "Left out the oldest 4 turns" in reported[0].message
    assert "still saved" in reported[0].message
    assert all(e.n_ctx == 3072 and e.prompt_tokens <= 3072 - 128 for e in reported)
    # the stored conversation keeps everything
    stored = store.messages(session.conversation_id)
    assert sum(1 for m in stored if m["role"] == "user") == 40
    assert len(stored) == 40 * 4


def test_reported_in_the_json_transcript(store: ConversationStore) -> None:
    from botpsy_desktop.agent.events import Transcript

    backend = ReplayBackend([f"Answer {i}. " + "word " * 60 for i in range(12)], n_ctx=512)
    settings = LoopSettings(system_prompt=SYSTEM, reply_tokens=64, trim_chunk_turns=2)
    session = AgentSession(backend, ToolRegistry(), shipped_gate(), store, settings)
    transcripts = []
    for i in range(12):
        transcript = Transcript(f"question {i}")
        for event in session.run(f"question {i}"):
            transcript.add(event)
        transcripts.append(transcript.as_dict())
    assert transcripts[0]["context"] == []
    trimmed = [t["context"][0] for t in transcripts if t["context"]]
    assert trimmed, "a 512-token context cannot hold 12 long answers"
    first = trimmed[0]
    assert first["dropped_turns"] >= 1
    assert first["dropped_messages"] == 2 * first["dropped_turns"]  # a question and its answer
    assert first["n_ctx"] == 512 and first["message"].startswith("Left out the oldest")
    assert all(t["answer"] for t in transcripts)


def test_a_huge_tool_result_is_clipped_with_a_note(store: ConversationStore) -> None:
    big = "line of the report\n" * 2000  # ~38 kB, far more than a 2048-token context
    backend = ReplayBackend([look_call("report"), "Done."], n_ctx=2048)
    settings = LoopSettings(system_prompt=SYSTEM, reply_tokens=256, max_observation_chars=100_000)
    session = AgentSession(backend, make_registry(big), shipped_gate(), store, settings)
    events = run(session, "Read the report.")
    assert isinstance(events[-1], Answer)
    trimmed = [e for e in events if isinstance(e, ContextTrimmed)]
    assert len(trimmed) == 1 and trimmed[0].clipped == ("look",)
    assert "Clipped long results of look" in trimmed[0].message
    tool_msg = next(m for m in backend.prompts[1] if m["role"] == "tool")
    note = CLIP_NOTE.split("{n}")[0]
    assert note in tool_msg["content"] and tool_msg["content"].endswith("[End of look output.]")
    schemas = session.registry.schemas()
    assert backend.count_tokens(backend.prompts[1], schemas, enable_thinking=False) <= 2048 - 256
    # the clipped part is only what was sent: the store keeps the whole output
    stored = next(m for m in store.messages(session.conversation_id) if m["role"] == "tool")
    assert len(stored["content"]) >= len(big) - 1


def test_a_request_that_cannot_fit_is_a_clear_error(store: ConversationStore) -> None:
    backend = ReplayBackend(["never used"], n_ctx=512)
    settings = LoopSettings(system_prompt=SYSTEM, reply_tokens=128)
    session = AgentSession(backend, ToolRegistry(), shipped_gate(), store, settings)
    events = run(session, "please " * 800)
    assert len(events) == 1 and isinstance(events[0], Error)
    assert events[0].kind == "context"
    assert "shorter request" in events[0].message and "model.n_ctx" in events[0].message
    assert backend.prompts == [] and backend.remaining == 1
    # the request is kept, and the conversation goes on with a shorter one
    backend2 = ReplayBackend(["Sure."], n_ctx=512)
    again = AgentSession(
        backend2, ToolRegistry(), shipped_gate(), store, settings, session.conversation_id
    )
    events = run(again, "Short one.")
    assert isinstance(events[-1], Answer)
    assert next(e for e in events if isinstance(e, ContextTrimmed)).dropped_turns == 1


def test_no_context_limit_sends_everything(store: ConversationStore) -> None:
    backend = ReplayBackend(["ok"] * 3)  # no n_ctx: nothing is counted or trimmed
    session = AgentSession(
        backend, ToolRegistry(), shipped_gate(), store, LoopSettings(system_prompt=SYSTEM)
    )
    for i in range(3):
        assert isinstance(run(session, "word " * 5000 + str(i))[-1], Answer)
    assert len(backend.prompts[-1]) == 1 + 5


@pytest.mark.model
def test_fifty_turns_on_the_tiny_model_in_a_tiny_context(store: ConversationStore) -> None:
    """The issue's test: a conversation far longer than the context keeps working for 50 turns
    on the real engine (hybrid qwen35, real tokenizer); what is left out is reported and the
    engine never overflows. Warming between requests as the window does (the history as the
    budget will send it) leaves a follow-up little to evaluate while the cut stays put."""
    n_ctx, reply = 384, 16
    backend = LlamaBackend(
        ModelSettings(
            n_ctx=n_ctx, max_tokens=reply, temperature=0.0, seed=1, n_threads=1, n_threads_batch=1
        ),
        tiny_qwen35_gguf(),
    )
    settings = LoopSettings(
        system_prompt=SYSTEM, reply_tokens=reply, trim_chunk_turns=4, max_steps=2
    )
    session = AgentSession(backend, ToolRegistry(), shipped_gate(), store, settings)
    reported: list[ContextTrimmed] = []
    first_turns: list[tuple[int, int]] = []  # (turns left out, tokens evaluated) per request
    try:
        backend.warm([{"role": "system", "content": SYSTEM}], [])
        for i in range(50):
            events = run(session, f"Turn {i}: tell me something about the number {i}, briefly.")
            backend.warm(session.warm_messages([], False), [])
            errors = [e for e in events if isinstance(e, Error)]
            assert all(e.kind == "step_limit" for e in errors), errors  # random weights
            assert isinstance(events[-1], Answer | Error)
            for e in events:
                if isinstance(e, TurnFinished):
                    assert e.stats.prompt_tokens + reply <= n_ctx
            trims = [e for e in events if isinstance(e, ContextTrimmed)]
            reported += trims
            first = next(e for e in events if isinstance(e, TurnFinished))
            dropped = trims[0].dropped_turns if trims else 0
            first_turns.append((dropped, first.stats.evaluated_tokens))
    finally:
        backend.close()
    steady = [n for (d, n), (d0, _) in zip(first_turns[1:], first_turns, strict=False) if d == d0]
    assert len(steady) >= 35 and sorted(steady)[len(steady) // 2] < 40, first_turns
    assert reported, "50 turns cannot fit 384 tokens"
    assert all(e.dropped_turns % 4 == 0 and e.prompt_tokens <= n_ctx - reply for e in reported)
    assert max(e.dropped_turns for e in reported) >= 30
    assert sum(1 for m in store.messages(session.conversation_id) if m["role"] == "user") == 50


def test_the_current_requests_results_share_the_room(store: ConversationStore) -> None:
    """Six results of one turn, each cut to a single result's share but still too much
    together, are clipped further, evenly; the calls and their results all stay."""
    calls = "\n".join(look_call(f"part {i}") for i in range(6))
    backend = ReplayBackend([calls, "All six read."], n_ctx=2048)
    settings = LoopSettings(system_prompt=SYSTEM, reply_tokens=256, max_observation_chars=100_000)
    session = AgentSession(
        backend, make_registry("report text " * 120), shipped_gate(), store, settings
    )
    events = run(session, "Read the six parts.")
    assert isinstance(events[-1], Answer), events[-1]
    (trimmed,) = [e for e in events if isinstance(e, ContextTrimmed)]
    assert trimmed.clipped == ("look",) * 6 and trimmed.dropped_turns == 0
    prompt = backend.prompts[1]
    check_prompt(prompt, "Read the six parts.")
    results = [m["content"] for m in prompt if m["role"] == "tool"]
    assert len(results) == 6 and all(CLIP_NOTE.split("{n}")[0] in r for r in results)
    assert len({len(r) for r in results}) == 1  # evenly
    schemas = session.registry.schemas()
    assert backend.count_tokens(prompt, schemas, enable_thinking=False) <= 2048 - 256


def test_a_long_request_gets_a_shorter_reply_room_not_an_error(store: ConversationStore) -> None:
    """The request fits only with less than the reply reserve left: older turns go, the reply
    keeps at least 256 tokens (the engine stops a reply at the end of the context)."""
    backend = ReplayBackend(["First answer.", "Second answer."], n_ctx=1024)
    settings = LoopSettings(system_prompt=SYSTEM, reply_tokens=512)
    session = AgentSession(backend, ToolRegistry(), shipped_gate(), store, settings)
    assert isinstance(run(session, "A short question.")[-1], Answer)
    long_request = "please consider this " * 90  # ~630 estimated tokens: more than 1024 - 512
    events = run(session, long_request)
    assert isinstance(events[-1], Answer), events[-1]
    (trimmed,) = [e for e in events if isinstance(e, ContextTrimmed)]
    assert trimmed.dropped_turns == 1 and trimmed.prompt_tokens <= 1024 - 256
    assert [m["role"] for m in backend.prompts[-1]] == ["system", "user"]
