"""Real inference with no network: a tiny random-weight qwen35 GGUF and SmolLM2-135M."""

from __future__ import annotations

import itertools
import pickle
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.events import Answer, Error, Token, TurnFinished
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.core.tools import ToolRegistry
from botpsy_desktop.llm.engines.engine import LlamaBackend
from botpsy_desktop.llm.language.parser import parse_turn
from botpsy_desktop.llm.language.prompt import PromptRenderer
from botpsy_desktop.llm.types import Completion, PromptProgress, TextPiece
from tests.agent.gate_tools import shipped_gate
from tests.helpers.models import sdist_assets, smollm2_gguf, tiny_qwen35_gguf
from tests.helpers.tool_schemas import TOOLS

pytestmark = pytest.mark.model

MESSAGES = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "Wake me at seven."},
]


@pytest.fixture(scope="module")
def tiny() -> Iterator[LlamaBackend]:
    # one thread: llama.cpp threads waiting on each other crawl on a shared, loaded CPU
    settings = ModelSettings(
        n_ctx=2048, temperature=0.0, max_tokens=48, seed=1, n_threads=1, n_threads_batch=1
    )
    backend = LlamaBackend(settings, tiny_qwen35_gguf())
    yield backend
    backend.close()


def run(backend: LlamaBackend, **kw: object) -> tuple[list[str], Completion]:
    pieces: list[str] = []
    for item in backend.complete(MESSAGES, TOOLS, enable_thinking=False, **kw):  # type: ignore[arg-type]
        if isinstance(item, TextPiece):
            pieces.append(item.text)
        elif isinstance(item, Completion):
            return pieces, item
    raise AssertionError("no completion")


def test_tiny_qwen35_is_hybrid_and_uses_its_own_template(tiny: LlamaBackend) -> None:
    assert tiny.info.architecture == "qwen35"
    assert tiny.hybrid
    assert not tiny.renderer.uses_fallback and tiny.renderer.call_format == "xml"
    _, template = sdist_assets()
    expected = PromptRenderer(Path(template).read_text(encoding="utf-8"))
    assert tiny.renderer.render(MESSAGES, TOOLS).text == expected.render(MESSAGES, TOOLS).text
    # the special tokens of the chat format are single tokens
    for special in ("<tool_call>", "</tool_call>", "<|im_end|>", "<think>"):
        assert len(tiny.tokenize(special)) == 1, special


def test_tiny_qwen35_streams_a_turn(tiny: LlamaBackend) -> None:
    pieces, done = run(tiny)
    assert done.finish_reason in ("stop", "length")
    assert "".join(pieces) == done.text
    st = done.stats
    assert st.prompt_tokens > 100 and st.evaluated_tokens == st.prompt_tokens - st.reused_tokens
    assert 0 < st.completion_tokens <= 48
    assert st.time_to_first_token_s > 0 and st.decode_tokens_per_s > 0


def test_cancel_stops_within_one_token(tiny: LlamaBackend) -> None:
    cancel = threading.Event()
    seen = 0
    done = None
    for item in tiny.complete(MESSAGES, TOOLS, enable_thinking=False, cancel=cancel):
        if isinstance(item, TextPiece):
            seen += 1
            cancel.set()
        else:
            done = item
    assert done is not None and done.finish_reason == "cancelled"
    assert done.stats.completion_tokens <= 2 and seen <= 2


def test_a_cancelled_prefill_leaves_the_engine_usable(tiny: LlamaBackend) -> None:
    cancel = threading.Event()
    cancel.set()
    items = list(tiny.complete(MESSAGES, TOOLS, enable_thinking=False, cancel=cancel))
    assert isinstance(items[-1], Completion) and items[-1].finish_reason == "cancelled"
    _, done = run(tiny)
    # nothing evaluated before the cancel is lost: the state (or a checkpoint) is reused
    st = done.stats
    assert st.reused_tokens + st.evaluated_tokens == st.prompt_tokens
    assert st.completion_tokens > 0


def test_a_forced_tool_call_is_constrained_to_the_schemas(tiny: LlamaBackend) -> None:
    """Random weights would never write a valid call by chance; the grammar makes them."""
    rendered = tiny.renderer.render(MESSAGES, TOOLS)
    grammar = tiny._grammar_for(TOOLS)
    assert grammar is not None
    done = None
    for item in tiny.generate(rendered.text, grammar=grammar, force_tool_call=True, max_tokens=200):
        if isinstance(item, Completion):
            done = item
    assert done is not None
    parsed = parse_turn(done.text, TOOLS)
    assert parsed.errors == [], done.text
    (call,) = parsed.tool_calls
    assert call.name in ("set_alarm", "get_weather")
    if call.name == "set_alarm":
        assert set(call.arguments) == {"hour", "minute", "repeat", "loud"}
        assert call.arguments["hour"] >= 0 and call.arguments["repeat"] in (
            "never",
            "daily",
            "weekdays",
        )
        assert isinstance(call.arguments["loud"], bool)
    else:
        assert call.arguments["unit"] in ("c", "f")
    assert done.stats.constrained_tokens > 0


def test_may_call_narrows_the_grammar_to_the_requests_tools(tiny: LlamaBackend) -> None:
    """The prompt lists every tool, ``may_call`` is what the turn may call: a forced call names
    it whatever the model leaned to; a name the model began outside it is reported, never one
    it may call."""
    names = [t["function"]["name"] for t in TOOLS]
    rendered = tiny.renderer.render(MESSAGES, TOOLS).text
    for allowed in names:
        _, done = run(tiny, force_tool_call=True, max_tokens=120, may_call={allowed})
        assert tiny.renderer.render(MESSAGES, TOOLS).text == rendered  # the same prompt
        assert re.findall(r"<function=(\w+)>", done.text) == [allowed], done.text
        assert set(done.stats.wanted_tools) <= set(names) - {allowed}
    _, done = run(tiny, force_tool_call=True, max_tokens=120)
    assert re.findall(r"<function=(\w+)>", done.text)[0] in names
    assert done.stats.wanted_tools == ()  # nothing is out of reach without may_call


def test_the_name_a_refused_choice_began_points_to_the_tools_left_out() -> None:
    from botpsy_desktop.llm.language.grammar import (
        CALL_NAME_SO_FAR,
        callable_tools,
        tools_reached_for,
    )

    text = "<tool_call>\n<function=set_"
    so_far = CALL_NAME_SO_FAR.search(text)
    assert so_far is not None and so_far.group(1) == "set_"
    assert CALL_NAME_SO_FAR.search("<tool_call>\n<function=get_weather>\n") is None
    assert tools_reached_for("set_al", TOOLS, {"get_weather"}) == ("set_alarm",)
    assert tools_reached_for("get", TOOLS, {"get_weather"}) == ()  # allowed: not reached for
    assert tools_reached_for("zebra", TOOLS, {"get_weather"}) == ()
    assert tools_reached_for("set", TOOLS, None) == ()  # nothing was left out
    assert [t["function"]["name"] for t in callable_tools(TOOLS, {"set_alarm"})] == ["set_alarm"]
    # none of the prompt's tools named: the grammar keeps them all (the agent judges the call)
    assert callable_tools(TOOLS, set()) == list(TOOLS)


def test_the_next_turn_of_a_request_evaluates_only_the_new_tokens(tiny: LlamaBackend) -> None:
    """After a tool call, the prompt with the tool result extends the state: no re-evaluation."""
    grammar = tiny._grammar_for(TOOLS)
    first = None
    for item in tiny.generate(
        tiny.renderer.render(MESSAGES, TOOLS).text,
        grammar=grammar,
        force_tool_call=True,
        max_tokens=120,
    ):
        if isinstance(item, Completion):
            first = item
    assert first is not None and first.finish_reason == "stop"
    assert first.text.endswith("</tool_call>")  # nothing may follow a call but another call
    call = parse_turn(first.text, TOOLS).tool_calls[0]
    followup = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}
            ],
        },
        {"role": "tool", "content": "ok"},
    ]
    done = None
    for item in tiny.generate(tiny.renderer.render(followup, TOOLS).text, max_tokens=2):
        if isinstance(item, Completion):
            done = item
    assert done is not None
    assert done.stats.reused_tokens > first.stats.prompt_tokens
    assert done.stats.evaluated_tokens < 40
    assert done.stats.reused_tokens + done.stats.evaluated_tokens == done.stats.prompt_tokens


def test_a_context_overflow_is_a_clear_error(tmp_path: Path) -> None:
    backend = LlamaBackend(ModelSettings(n_ctx=256, max_tokens=8), tiny_qwen35_gguf())
    try:
        long = [{"role": "user", "content": "word " * 400}]
        with pytest.raises(ModelError, match="does not fit the model's context of 256"):
            list(backend.complete(long, TOOLS, enable_thinking=False))
    finally:
        backend.close()


def test_smollm2_answers_through_the_whole_loop(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    # one thread: llama.cpp threads waiting on each other crawl on a shared, loaded CPU
    settings = ModelSettings(
        n_ctx=2048, temperature=0.0, max_tokens=48, seed=1, n_threads=1, n_threads_batch=1
    )
    backend = LlamaBackend(settings, smollm2_gguf())
    assert backend.renderer.uses_fallback and backend.renderer.call_format == "json"
    session = AgentSession(
        backend,
        ToolRegistry(files_tools([tmp_path / "files"])),
        shipped_gate(),
        ConversationStore(tmp_path / "db.sqlite3"),
        LoopSettings(system_prompt="You are a helpful assistant.", max_steps=3),
    )
    try:
        events = list(session.run("Say hello in one short sentence."))
    finally:
        backend.close()
    finished = [e for e in events if isinstance(e, TurnFinished)]
    assert finished and finished[0].stats.completion_tokens > 0
    assert finished[0].stats.prefill_tokens_per_s > 0
    end = events[-1]
    assert isinstance(end, Answer | Error)
    if isinstance(end, Answer):
        assert end.text and "".join(e.text for e in events if isinstance(e, Token))
    else:  # a tiny model may loop on tools; the loop must still end cleanly
        assert end.kind == "step_limit"


def test_thinking_mode_opens_a_think_block(tiny: LlamaBackend) -> None:
    done = None
    for item in tiny.complete(MESSAGES, TOOLS, enable_thinking=True):
        if isinstance(item, Completion):
            done = item
    assert done is not None and done.started_in_thinking
    rendered = tiny.renderer.render(MESSAGES, TOOLS, enable_thinking=False)
    assert rendered.text.endswith("<think>\n\n</think>\n\n") and not rendered.started_in_thinking


def test_rejected_choices_are_resampled_among_the_grammars_literal_tokens(
    tiny: LlamaBackend,
) -> None:
    """Random weights break the grammar on most tokens; after a few full-vocabulary passes the
    engine filters only the tokens that spell the grammar's fixed text, and calls stay valid."""
    grammar = tiny._grammar_for(TOOLS)
    assert grammar is not None
    prompt = tiny.renderer.render(MESSAGES, TOOLS).text
    for _ in range(4):
        done = None
        for item in tiny.generate(prompt, grammar=grammar, force_tool_call=True, max_tokens=120):
            if isinstance(item, Completion):
                done = item
        assert done is not None and done.finish_reason == "stop", done
        assert parse_turn(done.text, TOOLS).errors == [], done.text
    assert tiny._full_passes[grammar] >= 3
    ids, _ = tiny._literal_sets[grammar]
    pieces = {tiny._token_text(int(t)) for t in ids}
    assert {"set", "week", "7", "\n", "<", "function"} <= pieces
    assert len(ids) < 5000  # a small part of the 248k vocabulary


def test_a_long_prompt_reports_its_evaluation_progress(tiny: LlamaBackend) -> None:
    tiny.reset()
    long = [MESSAGES[0], {"role": "user", "content": "Please read this. " * 120}]
    items = list(tiny.complete(long, TOOLS, enable_thinking=False, max_tokens=1))
    progress = [i for i in items if isinstance(i, PromptProgress)]
    done = items[-1]
    assert isinstance(done, Completion) and done.finish_reason in ("stop", "length")
    # before any text: from nothing to every evaluated token, one batch at a time
    first_text = next(i for i, item in enumerate(items) if not isinstance(item, PromptProgress))
    assert first_text == len(progress) and len(progress) >= 3
    assert progress[0].done == 0 and progress[-1].done == progress[-1].total
    assert progress[-1].total == done.stats.evaluated_tokens
    assert all(a.done < b.done for a, b in itertools.pairwise(progress))
    assert progress[-1].eta_s == 0.0
    # small and picklable: an engine in another process forwards it as it is
    assert pickle.loads(pickle.dumps(progress[1])) == progress[1]
    # a short follow-up (the prompt's start is reused) reports nothing
    again = list(tiny.complete(long, TOOLS, enable_thinking=False, max_tokens=1))
    assert not any(isinstance(i, PromptProgress) for i in again)


def test_a_warm_up_reports_its_progress_and_stop_keeps_it_short(tiny: LlamaBackend) -> None:
    tiny.reset()
    seen: list[PromptProgress] = []
    cancel = threading.Event()

    def told(p: PromptProgress) -> None:
        seen.append(p)
        if p.done > 0:
            cancel.set()  # a request arrives: the warm-up gives way after this batch

    long = [{"role": "system", "content": "You are a test. " * 120}]
    tiny.warm(long, TOOLS, cancel=cancel, progress=told)
    assert seen[0].done == 0 and len(seen) == 2 and seen[1].done < seen[1].total


def test_the_decode_loop_gives_the_tokens_of_the_bindings_own_eval(tiny: LlamaBackend) -> None:
    """The loop evaluates each sampled token through its own prepared one-token batch; at
    temperature 0 that is the sequence that sampling and ``Llama.eval([token])`` one by one
    give, and the binding's token list and count follow it (what later requests reuse)."""
    _, done = run(tiny, max_tokens=24)
    llm = tiny._llama
    held = [int(t) for t in llm.input_ids[: llm.n_tokens]]
    prompt = tiny.last_prompt_tokens
    generated = held[len(prompt) :]
    assert held[: len(prompt)] == prompt and len(generated) >= done.stats.completion_tokens - 1
    assert generated, "the tiny model wrote nothing"
    tiny.reset()
    llm.eval(prompt)
    sampler = tiny._sampler()
    try:
        again: list[int] = []
        for _ in generated:
            token = int(sampler.sample(llm._ctx, -1))
            again.append(token)
            llm.eval([token])
    finally:
        sampler.close()  # type: ignore[no-untyped-call]
        tiny.reset()
    assert again == generated
