"""Token counting on the real engine matches what it evaluates; past n_ctx it refuses cleanly."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.engines.engine import LlamaBackend
from botpsy_desktop.llm.engines.replay import BYTES_PER_TOKEN, ReplayBackend
from botpsy_desktop.llm.types import Completion
from tests.helpers.models import tiny_qwen35_gguf

pytestmark = pytest.mark.model

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "look",
            "description": "Look something up.",
            "parameters": {
                "type": "object",
                "properties": {"what": {"type": "string", "description": "What to look up"}},
                "required": ["what"],
            },
        },
    }
]


@pytest.fixture(scope="module")
def tiny() -> Iterator[LlamaBackend]:
    # 384 is not a multiple of 256: llama.cpp pads the context, the binding does not
    backend = LlamaBackend(
        ModelSettings(
            n_ctx=384, max_tokens=8, temperature=0.0, seed=1, n_threads=1, n_threads_batch=1
        ),
        tiny_qwen35_gguf(),
    )
    yield backend
    backend.close()


def completion(backend: LlamaBackend, messages: list[dict[str, Any]]) -> Completion:
    items = list(backend.complete(messages, TOOLS, enable_thinking=False))
    assert isinstance(items[-1], Completion)
    return items[-1]


def test_count_matches_the_evaluated_prompt(tiny: LlamaBackend) -> None:
    assert tiny.n_ctx == 384
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a test."},
        {"role": "user", "content": "Hello there, how are you?"},
    ]
    counted = tiny.count_tokens(messages, TOOLS, enable_thinking=False)
    done = completion(tiny, messages)
    assert counted == done.stats.prompt_tokens > 20
    # a follow-up continues the evaluated tokens: counted the same way
    messages += [
        {"role": "assistant", "content": done.text},
        {"role": "user", "content": "And now?"},
    ]
    counted = tiny.count_tokens(messages, TOOLS, enable_thinking=False)
    assert counted == completion(tiny, messages).stats.prompt_tokens


def test_the_engine_refuses_a_prompt_past_its_context(tiny: LlamaBackend) -> None:
    messages = [{"role": "user", "content": "word " * 400}]
    assert tiny.count_tokens(messages, [], enable_thinking=False) > 384
    with pytest.raises(ModelError, match="does not fit the model's context of 384 tokens"):
        list(tiny.complete(messages, [], enable_thinking=False))
    # and the next request that fits still works
    done = completion(tiny, [{"role": "user", "content": "Hi."}])
    assert done.stats.prompt_tokens + done.stats.completion_tokens <= 384


def test_the_replay_estimate_is_close_to_the_real_count(tiny: LlamaBackend) -> None:
    """The replay's bytes/3 estimate of the ChatML prompt is near Qwen's count of its own
    prompt (the app's 39 tool schemas: 8089 estimated, 7147 counted; a small prompt: -20%)."""
    replay = ReplayBackend([], n_ctx=384)
    messages = [
        {"role": "system", "content": "You are a helpful assistant. Use the tools."},
        {"role": "user", "content": "What is the weather in Lyon tomorrow, and set an alarm."},
    ]
    real = tiny.count_tokens(messages, TOOLS, enable_thinking=False)
    estimate = replay.count_tokens(messages, TOOLS, enable_thinking=False)
    assert 0.75 * real <= estimate <= 1.6 * real, (real, estimate, BYTES_PER_TOKEN)
    exact = ReplayBackend([], count_text=lambda text: len(tiny.tokenize(text)))
    assert exact.count_tokens(messages, [], enable_thinking=False) > 0
