"""Checkpoints of the hybrid model's state: exact restore, no prefix re-evaluation, invalidation."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt
import pytest

from botpsy_desktop.agent.events import TurnFinished
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.tools import ToolRegistry
from botpsy_desktop.llm.cache.prefix_cache import StateCache
from botpsy_desktop.llm.cache.prefix_store import MiB, PrefixStore
from botpsy_desktop.llm.engines.engine import PREFIX, TURN, LlamaBackend
from botpsy_desktop.llm.types import Completion, GenerationStats
from tests.agent.gate_tools import shipped_gate
from tests.helpers.models import tiny_qwen35_gguf
from tests.helpers.prefix_prompts import SYSTEM, TOOLS, tool

pytestmark = pytest.mark.model


def settings(**kw: Any) -> ModelSettings:
    # one thread: llama.cpp threads waiting on each other crawl on a shared, loaded CPU
    values: dict[str, Any] = {"n_ctx": 2048, "temperature": 0.0, "max_tokens": 12, "seed": 1}
    values.update(n_threads=1, n_threads_batch=1)
    values.update(kw)
    return ModelSettings(**values)


@pytest.fixture(scope="module")
def model_path() -> Path:
    return tiny_qwen35_gguf()


@pytest.fixture
def tiny(model_path: Path) -> Iterator[LlamaBackend]:
    backend = LlamaBackend(settings(), model_path)
    yield backend
    backend.close()


def ask(
    backend: LlamaBackend,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = TOOLS,
    *,
    think: bool = False,
) -> Completion:
    done = None
    for item in backend.complete(messages, tools, enable_thinking=think):
        if isinstance(item, Completion):
            done = item
    assert done is not None and done.finish_reason in ("stop", "length")
    return done


def n_tokens(backend: LlamaBackend, text: str) -> int:
    return len(backend.tokenize(text))


def logits(backend: LlamaBackend) -> npt.NDArray[np.float32]:
    ctx = backend._llama._ctx.ctx
    ptr = llama_cpp.llama_get_logits_ith(ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(backend._n_vocab,)).copy()


def prefill(backend: LlamaBackend, prompt: str, cut: int) -> tuple[int, npt.NDArray[np.float32]]:
    """Evaluate ``prompt`` the way a request does (checkpoint at ``cut``); start and logits."""
    tokens, marks = backend._tokenize_continuing(prompt, [(cut, PREFIX)])
    start = backend._prepare(tokens)
    assert backend._eval(tokens, start, marks, threading.Event())
    return start, logits(backend)


def assert_consistent(backend: LlamaBackend) -> None:
    """Every kept checkpoint is a prefix of what the context holds (else it would be stale)."""
    assert backend.states is not None
    evaluated = backend._llama.input_ids[: backend._llama.n_tokens]
    for checkpoint in backend.states.checkpoints:
        assert checkpoint.n_tokens <= len(evaluated)
        assert np.array_equal(evaluated[: checkpoint.n_tokens], checkpoint.tokens)
    assert sum(c.pinned for c in backend.states.checkpoints) <= 1


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_a_restored_prefix_gives_bit_identical_logits(tiny: LlamaBackend, model_path: Path) -> None:
    messages = [SYSTEM, user("What is the weather in Paris?")]
    prompt = tiny.renderer.render(messages, TOOLS).text
    prefix = tiny.prefix_text(messages, TOOLS)
    assert prefix.endswith("<|im_end|>\n") and prompt.startswith(prefix)
    assert prompt[len(prefix) :].startswith("<|im_start|>user")

    start, fresh = prefill(tiny, prompt, len(prefix))
    assert start == 0
    # another conversation moves the state on (and back to the prefix checkpoint)
    other = tiny.renderer.render([SYSTEM, user("List my Documents folder.")], TOOLS).text
    start, _ = prefill(tiny, other, len(prefix))
    assert start == n_tokens(tiny, prefix)
    start, restored = prefill(tiny, prompt, len(prefix))
    assert start == n_tokens(tiny, prefix)
    assert np.array_equal(fresh, restored)

    # and both equal an engine without checkpoints evaluating the same two pieces afresh
    plain = LlamaBackend(settings(state_checkpoints=0), model_path)
    try:
        assert plain.states is None
        plain._llama.eval(plain.tokenize(prefix))
        plain._llama.eval(plain.tokenize(prompt[len(prefix) :]))
        assert np.array_equal(fresh, logits(plain))
    finally:
        plain.close()


def test_requests_after_the_first_evaluate_no_prefix_tokens(tiny: LlamaBackend) -> None:
    prefix_tokens = n_tokens(tiny, tiny.prefix_text([SYSTEM], TOOLS))
    first = ask(tiny, [SYSTEM, user("Set a timer for ten minutes.")]).stats
    assert first.reused_tokens == 0 and first.evaluated_tokens == first.prompt_tokens
    for text in ("What is the weather in Lyon?", "List ~/Music please.", "Hello!"):
        st = ask(tiny, [SYSTEM, user(text)]).stats
        assert st.reused_tokens >= prefix_tokens  # restored, not evaluated
        assert st.evaluated_tokens == st.prompt_tokens - st.reused_tokens
        assert st.evaluated_tokens < 25  # the user turn and the generation prompt only
        assert_consistent(tiny)
    assert tiny.states is not None and tiny.states.restores >= 3


def test_warm_evaluates_the_prefix_ahead_of_the_first_request(tiny: LlamaBackend) -> None:
    warm = tiny.warm([SYSTEM], TOOLS)
    prefix_tokens = n_tokens(tiny, tiny.prefix_text([SYSTEM], TOOLS))
    assert warm.evaluated_tokens == warm.prompt_tokens == prefix_tokens
    assert tiny.states is not None
    (checkpoint,) = tiny.states.checkpoints
    assert checkpoint.pinned and checkpoint.label == PREFIX
    assert tiny.warm([SYSTEM], TOOLS).evaluated_tokens == 0  # already there
    st = ask(tiny, [SYSTEM, user("Weather in Rome?")]).stats
    assert st.reused_tokens == prefix_tokens and st.evaluated_tokens < 25


def _after(messages: list[dict[str, Any]], done: Completion) -> list[dict[str, Any]]:
    """The conversation as the agent stores it after a plain answer (thinking kept aside)."""
    thinking, _, answer = done.text.rpartition("</think>")
    if not _ and done.started_in_thinking:
        thinking, answer = done.text, ""
    reply = {"role": "assistant", "content": answer.strip(), "reasoning_content": thinking.strip()}
    return [*messages, reply]


@pytest.mark.parametrize("think", [False, True])
def test_a_follow_up_evaluates_only_the_new_message_after_warm(
    tiny: LlamaBackend, think: bool
) -> None:
    """The template re-renders earlier turns without thinking; warm prepares that rendering."""
    tiny.warm([SYSTEM], TOOLS, enable_thinking=think)
    messages = [SYSTEM, user("What is the weather in Paris?")]
    first = ask(tiny, messages, think=think)
    history = _after(messages, first)
    warm = tiny.warm(history, TOOLS, enable_thinking=think)
    turn_end = tiny.renderer.render(messages, TOOLS, add_generation_prompt=False).text
    assert warm.reused_tokens >= n_tokens(tiny, turn_end)  # from the user-turn checkpoint
    assert 0 < warm.evaluated_tokens <= first.stats.completion_tokens + 12
    assert_consistent(tiny)

    follow_up = [*history, user("And tomorrow?")]
    st = ask(tiny, follow_up, think=think).stats
    head = tiny.conversation_head(history, TOOLS, enable_thinking=think)
    assert st.reused_tokens == n_tokens(tiny, head)
    assert st.evaluated_tokens < 25
    assert_consistent(tiny)


def test_a_bounded_warm_prepares_nothing_when_it_would_read_more(tiny: LlamaBackend) -> None:
    """`botpsy ask` keeps its conversation for the next process only when that costs next to
    nothing (App.keep_for_next): a warm with ``most`` evaluates nothing when more tokens than
    that would need evaluating, and runs as before otherwise."""
    messages = [SYSTEM, user("What is the weather in Paris?")]
    first = ask(tiny, messages)
    history = _after(messages, first)
    bound = first.stats.completion_tokens + 12
    # another tool list ahead of the history: the whole conversation would be read again
    skipped = tiny.warm(history, TOOLS[::-1], most=bound)
    assert skipped.evaluated_tokens == skipped.reused_tokens == 0
    assert skipped.prompt_tokens > bound
    # the request's own list: only the answer's end is left to evaluate
    kept = tiny.warm(history, TOOLS, most=bound)
    assert 0 < kept.evaluated_tokens <= bound
    st = ask(tiny, [*history, user("And tomorrow?")]).stats
    assert st.reused_tokens == n_tokens(tiny, tiny.conversation_head(history, TOOLS))
    assert_consistent(tiny)


def test_without_warm_a_follow_up_restores_the_user_turn_checkpoint(tiny: LlamaBackend) -> None:
    messages = [SYSTEM, user("What is the weather in Paris?")]
    first = ask(tiny, messages, think=True)
    assert tiny.states is not None
    assert [c.label for c in tiny.states.checkpoints] == [PREFIX, TURN]
    history = _after(messages, first)
    st = ask(tiny, [*history, user("And tomorrow?")], think=True).stats
    turn_end = tiny.renderer.render(messages, TOOLS, add_generation_prompt=False).text
    assert st.reused_tokens == n_tokens(tiny, turn_end)
    # only the previous answer (as re-rendered, without its thinking) and the new message
    assert st.evaluated_tokens <= first.stats.completion_tokens + 30


def test_changed_tools_or_system_prompt_invalidate_and_outputs_match_a_fresh_engine(
    tiny: LlamaBackend, model_path: Path
) -> None:
    tiny.warm([SYSTEM], TOOLS)
    old_prefix = n_tokens(tiny, tiny.prefix_text([SYSTEM], TOOLS))
    other_system = {"role": "system", "content": "You are terse."}
    cases: list[tuple[dict[str, Any], list[dict[str, Any]]]] = [
        (SYSTEM, TOOLS[:2]),  # a tool removed
        (SYSTEM, [*TOOLS, tool("play_music", "Play music.", query="e.g. some jazz")]),
        (other_system, TOOLS),  # another system prompt
        (SYSTEM, TOOLS),  # and back
    ]
    for system, tools in cases:
        messages = [system, user("Weather in Oslo?")]
        done = ask(tiny, messages, tools)
        prefix = tiny.prefix_text(messages, tools)
        # re-evaluated from where the prompt differs, never from a stale checkpoint
        assert done.stats.reused_tokens < n_tokens(tiny, prefix)
        assert_consistent(tiny)
        assert tiny.states is not None
        pinned = [c for c in tiny.states.checkpoints if c.pinned]
        assert [c.text for c in pinned] == [prefix]
        again = ask(tiny, [system, user("Weather in Bergen?")], tools)
        assert again.stats.reused_tokens >= n_tokens(tiny, prefix)
        # same output as an engine that never saw another prompt
        fresh = LlamaBackend(settings(), model_path)
        try:
            assert ask(fresh, [system, user("Weather in Bergen?")], tools).text == again.text
        finally:
            fresh.close()
    assert old_prefix == n_tokens(tiny, tiny.prefix_text([SYSTEM], TOOLS))


def test_thinking_on_or_off_shares_the_prefix(tiny: LlamaBackend) -> None:
    tiny.warm([SYSTEM], TOOLS, enable_thinking=False)
    prefix_tokens = n_tokens(tiny, tiny.prefix_text([SYSTEM], TOOLS))
    st = ask(tiny, [SYSTEM, user("Hi")], think=True).stats
    assert st.reused_tokens >= prefix_tokens
    assert ask(tiny, [SYSTEM, user("Hi")], think=False).stats.reused_tokens >= prefix_tokens


class _CancelAfter(threading.Event):
    """A cancel switch that trips after ``n`` checks (a stand-in for a user pressing Stop)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = n

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0


def test_a_cancelled_warm_keeps_what_it_evaluated(model_path: Path) -> None:
    backend = LlamaBackend(settings(n_batch=64), model_path)
    try:
        st = backend.warm([SYSTEM], TOOLS, cancel=_CancelAfter(2))
        assert backend._llama.n_tokens == 128 and st.evaluated_tokens > 128  # 64 + 64
        done = ask(backend, [SYSTEM, user("Hi")])
        assert done.stats.reused_tokens == 128  # continued from where warm-up stopped
        assert backend.states is not None and backend.states.checkpoints[0].label == PREFIX
    finally:
        backend.close()


def test_disabled_checkpoints_fall_back_to_full_evaluation(model_path: Path) -> None:
    backend = LlamaBackend(settings(state_checkpoints=0), model_path)
    try:
        assert backend.states is None
        ask(backend, [SYSTEM, user("Hi")])
        st = ask(backend, [SYSTEM, user("Hello")]).stats
        assert st.reused_tokens == 0 and st.evaluated_tokens == st.prompt_tokens
    finally:
        backend.close()


def test_the_cache_keeps_its_limit_and_the_pinned_prefix(tiny: LlamaBackend) -> None:
    llm = tiny._llama
    turn = "<|im_start|>user\nhi<|im_end|>\n"
    tokens = tiny.tokenize("<|im_start|>system\nx<|im_end|>\n" + turn * 4)
    tiny.reset()
    cache = StateCache(llm._ctx.ctx, llama_cpp.llama_get_memory(llm._ctx.ctx), limit=2)
    llm.eval(tokens[:5])
    prefix = cache.save(llm.input_ids[:5], PREFIX, pinned=True)
    for end in (10, 15, 20):
        llm.eval(tokens[llm.n_tokens : end])
        cache.save(llm.input_ids[:end], TURN)
    assert [c.n_tokens for c in cache.checkpoints] == [5, 20]
    assert cache.checkpoints[0] is prefix and cache.nbytes == 2 * cache.state_size()
    assert cache.best(19) is prefix and cache.best(4) is None
    last = cache.checkpoints[1]
    cache.truncate(7)
    assert cache.checkpoints == [prefix]
    assert cache.restore(prefix) and cache.restores == 1
    # the forgotten checkpoint's memory is kept for the next one, never more than the limit
    assert cache.nbytes == 2 * cache.state_size() and not cache.restore(last)
    llm.n_tokens = 5
    llm.eval(tokens[5:12])
    again = cache.save(llm.input_ids[:12], TURN)
    assert cache.nbytes == 2 * cache.state_size() and cache.restore(again)
    cache.clear()
    assert cache.checkpoints == [] and cache.nbytes == 2 * cache.state_size()
    with pytest.raises(ValueError, match="at least one"):
        StateCache(llm._ctx.ctx, None, limit=0)
    tiny.reset()


def test_the_agent_loop_follow_up_after_warm(tmp_path: Path, tiny: LlamaBackend) -> None:
    """Through the real loop and store: warming with what the store holds matches the loop."""
    store = ConversationStore(tmp_path / "db.sqlite3")
    loop = LoopSettings(system_prompt=str(SYSTEM["content"]), max_steps=2)
    session = AgentSession(tiny, ToolRegistry(), shipped_gate(), store, loop)
    try:
        tiny.warm([SYSTEM], [])
        stats: list[GenerationStats] = []
        for text in ("Hello there.", "And again?", "One more."):
            for event in session.run(text, think=True):
                if isinstance(event, TurnFinished):
                    stats.append(event.stats)
            # what the loop will send next (the app warms with the loop's own messages)
            tiny.warm(session._messages(), [], enable_thinking=True)
            assert_consistent(tiny)
        assert all(st.evaluated_tokens < 20 for st in stats), [s.as_dict() for s in stats]
    finally:
        store.close()


def _conversations(backend: LlamaBackend) -> list[Completion]:
    """A request, another conversation's first request (which restores the prefix
    checkpoint), and a follow-up in that one without warm-up (which restores its user-turn
    checkpoint), after the prefix's state was brought back into memory as a tool list's save
    does (``LlamaBackend._save_partial``): with the disk cache, both restores read a file."""
    assert backend.states is not None
    done = [ask(backend, [SYSTEM, user("What is the weather in Paris?")], think=True)]
    second = [SYSTEM, user("List my Documents folder.")]
    done.append(ask(backend, second, think=True))
    prefix, turn = backend.states.checkpoints
    assert (prefix.label, turn.label) == (PREFIX, TURN)
    assert backend.states.resident_state(prefix) is not None
    done.append(ask(backend, [*_after(second, done[1]), user("And the Music one?")], think=True))
    turn_end = backend.renderer.render(second, TOOLS, add_generation_prompt=False).text
    assert done[2].stats.reused_tokens == n_tokens(backend, turn_end)
    assert_consistent(backend)
    return done


def test_with_the_disk_cache_checkpoints_wait_on_disk_and_restore_the_same(
    model_path: Path, tmp_path: Path
) -> None:
    """With the prefix store on, no state stays in memory and each is read back from its
    file: the same tokens are reused and evaluated as with every state in memory, and
    the same text comes out at temperature 0."""
    in_memory = LlamaBackend(settings(), model_path)
    try:
        expected = _conversations(in_memory)
        assert in_memory.states is not None
        size = in_memory.states.state_size()
        assert in_memory.states.nbytes == 2 * size and in_memory.states.on_disk == 0
    finally:
        in_memory.close()

    store = PrefixStore(tmp_path / "prefix-states", bound_bytes=64 * MiB)
    on_disk = LlamaBackend(settings(), model_path, prefix_store=store)
    try:
        assert on_disk.states is not None
        got = _conversations(on_disk)
        # the second request restored the prefix and the follow-up its user turn, from files
        assert on_disk.states.disk_reads >= 2 and on_disk.states.disk_failures == 0
        # and no state stays in memory between a save or restore and the next
        assert on_disk.states.on_disk == 2 and on_disk.states.nbytes == 0
        for a, b in zip(expected, got, strict=True):
            assert (b.stats.reused_tokens, b.stats.evaluated_tokens) == (
                a.stats.reused_tokens,
                a.stats.evaluated_tokens,
            )
            assert b.text == a.text
        # the files have no name in the folder (the system removes them when they are closed)
        names = [f.name for f in store.folder.iterdir()]
        assert names and all(n.endswith(".prefix") or n == ".lock" for n in names), names
    finally:
        on_disk.close()


@pytest.mark.parametrize("why", ["bound", "unwritable"])
def test_checkpoints_stay_in_memory_when_the_disk_cache_has_no_room(
    model_path: Path, tmp_path: Path, why: str
) -> None:
    """A bound too small for the states, or a folder that cannot be written (here a file where
    the folder should be): the checkpoints stay in memory and nothing else changes."""
    folder = tmp_path / "prefix-states"
    if why == "bound":
        store = PrefixStore(folder, bound_bytes=10_000)  # two tiny states are 19,400 bytes
    else:
        folder.write_bytes(b"not a folder")
        store = PrefixStore(folder, bound_bytes=64 * MiB)
    backend = LlamaBackend(settings(), model_path, prefix_store=store)
    try:
        assert backend.states is not None
        _conversations(backend)
        size = backend.states.state_size()
        assert backend.states.on_disk == 0 and backend.states.nbytes == 2 * size
        assert (backend.states.disk_failures > 0) == (why == "unwritable")
    finally:
        backend.close()
