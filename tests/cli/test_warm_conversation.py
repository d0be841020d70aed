"""A follow-up evaluates only its own message, whatever it is about: with the app's default
(every tool of the app's own in every prompt, agent.prompt_tools auto) the prompt's start never
changes; with per-request lists (prompt_tools selected, what a small context gets) a request
whose tool set changed reuses its prompt up to the first difference (the state at the end of
the earlier tool list). In the window's long-lived engine and in new `botpsy ask
--conversation` processes (counts of evaluated tokens, on the tiny hybrid model)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.agent.events import TurnFinished
from botpsy_desktop.agent.selection import ToolSelector
from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.llm.cache.prefix_cache import common_prefix
from botpsy_desktop.llm.engines.engine import LlamaBackend
from botpsy_desktop.llm.types import GenerationStats
from tests.helpers.models import tiny_qwen35_gguf, tiny_qwen35_long_gguf

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
WEATHER = "What's the weather in Paris tomorrow?"
WEATHER_AGAIN = "What's the weather in Lyon?"
TIMER = "Set a timer for 10 minutes."


FILES = "Which files are in my Documents folder?"


def make_profile(tmp_path: Path, prompt_tools: str = "auto") -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True, exist_ok=True)
    (tmp_path / "files").mkdir(exist_ok=True)
    settings = {
        "files": {"roots": [str(tmp_path / "files")]},
        "alarms": {"time_zone": "Europe/Paris"},
        "weather": {"forecast_url": "http://127.0.0.1:9", "geocoding_url": "http://127.0.0.1:9"},
        "agent": {"prompt_tools": prompt_tools},
        "model": {
            # the app's default context (16k): every tool fits it with the long-context model;
            # the 4k tiny model keeps per-request lists ("auto" falls back to them)
            "path": str(
                tiny_qwen35_gguf() if prompt_tools == "selected" else tiny_qwen35_long_gguf()
            ),
            "seed": 1,
            "temperature": 0.0,
            "max_tokens": 6,
            "n_threads": 1,
            "n_threads_batch": 1,
        },
    }
    (home / "config" / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    return home


@pytest.fixture(scope="module")
def tokenizer() -> Iterator[LlamaBackend]:
    """The tiny model in this process, only to render and tokenize prompts for the expectations."""
    backend = LlamaBackend(ModelSettings(n_ctx=4096), tiny_qwen35_gguf())
    yield backend
    backend.close()


def prefix_tokens(tok: LlamaBackend, app: App, text: str, history: list[Any]) -> list[int]:
    """The tokens of the system prompt with the tools the shipped selection offers ``text``
    after ``history``, as the model's own template renders them: independent of where the
    engine saves its states."""
    selector = ToolSelector(app.registry)
    tools = selector.schemas(selector.choose(text, history))
    system = [{"role": "system", "content": app.config.agent.system_prompt}]
    return tok.tokenize(tok.prefix_text(system, tools))


def before_request(app: App, conv: str, n: int) -> list[dict[str, Any]]:
    """The conversation's stored messages before its ``n``-th request (0-based)."""
    messages = app.store.messages(conv)
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    return messages[: users[n]]


def own_turn(tok: LlamaBackend, text: str) -> int:
    """At most the tokens of a user turn and the answer's start around ``text``."""
    return len(tok.tokenize(text)) + 12


def first_turn(stats: list[GenerationStats]) -> GenerationStats:
    assert stats, "the request made no model turn"
    return stats[0]


def run(app: App, session: Any, text: str) -> GenerationStats:
    turns = [e.stats for e in session.run(text) if isinstance(e, TurnFinished)]
    return first_turn(turns)


def test_a_grown_tool_set_reuses_the_prompt_up_to_the_first_difference_in_one_engine(
    tmp_path: Path, tokenizer: LlamaBackend
) -> None:
    """The window's path: one long-lived engine, the usual sets prepared after loading and the
    conversation after each answer; per-request tool lists."""
    app = build_app(make_profile(tmp_path, "selected"))
    backend = app.backend()
    try:
        app.warm(backend)  # the window prepares the usual sets after loading
        session = app.session(backend)
        conv = session.conversation_id
        first = run(app, session, WEATHER)
        app.warm(backend, conv)

        same = run(app, session, WEATHER_AGAIN)
        same_tokens = backend.last_prompt_tokens
        # the warmed conversation is extended: only the new user turn is evaluated (its text
        # and the dozen tokens of the turn's frame and the answer's start)
        assert same.reused_tokens > first.reused_tokens
        assert same.evaluated_tokens <= own_turn(tokenizer, WEATHER_AGAIN), same.as_dict()
        app.warm(backend, conv)

        grown = run(app, session, TIMER)
        grown_tokens = backend.last_prompt_tokens
        # the timer request is offered the alarms too: a longer tool list, the same start
        old = prefix_tokens(tokenizer, app, WEATHER_AGAIN, before_request(app, conv, 1))
        new = prefix_tokens(tokenizer, app, TIMER, before_request(app, conv, 2))
        shared = common_prefix(_array(old), _array(new))
        assert 0 < shared < len(old) and len(new) > len(old)
        assert common_prefix(_array(same_tokens), _array(grown_tokens)) == shared
        # reused up to the first difference (the end of the old tool list), not one token less
        assert grown.reused_tokens == shared, (grown.as_dict(), shared, len(old))
        assert grown.evaluated_tokens == grown.prompt_tokens - shared
    finally:
        backend.close()
        app.close()


def botpsy(home: Path, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def test_botpsy_ask_conversation_restores_the_warmed_conversation_and_a_grown_set(
    tmp_path: Path, tokenizer: LlamaBackend
) -> None:
    """New processes: each `botpsy ask` leaves its conversation warmed on disk; the next one
    evaluates only its own message, or, when its tool set grew, what follows the old list
    (per-request tool lists)."""
    home = make_profile(tmp_path, "selected")
    first = botpsy(home, "ask", WEATHER)
    conv = first["conversation_id"]
    same = botpsy(home, "ask", "--conversation", conv, WEATHER_AGAIN)
    grown = botpsy(home, "ask", "--conversation", conv, TIMER)

    app = build_app(home)
    try:
        turn_1, turn_2, turn_3 = (r["turns"][0] for r in (first, same, grown))
        assert turn_1["reused_tokens"] == 0  # a fresh profile: nothing on disk yet
        # the second process starts where the first one's warm-up ended: its own message only
        assert turn_2["reused_tokens"] > turn_1["prompt_tokens"] - own_turn(tokenizer, WEATHER)
        assert turn_2["evaluated_tokens"] <= own_turn(tokenizer, WEATHER_AGAIN), turn_2
        old = prefix_tokens(tokenizer, app, WEATHER_AGAIN, before_request(app, conv, 1))
        new = prefix_tokens(tokenizer, app, TIMER, before_request(app, conv, 2))
        shared = common_prefix(_array(old), _array(new))
        assert 0 < shared < len(old) and len(new) > len(old)
        assert turn_3["reused_tokens"] == shared, (turn_3, shared, len(old))
        files = list((home / "cache" / "prefix-states").glob("*.prefix"))
        assert files, "no state kept on disk"
    finally:
        app.close()


def test_with_every_tool_listed_a_request_about_another_domain_reads_only_its_own_message(
    tmp_path: Path, tokenizer: LlamaBackend
) -> None:
    """The app's default in the window's path: every prompt lists the same tools, the request's
    choice is what the model may call; after the window's idle warm-up each request, whatever
    its domain, evaluates its own message only (the history is never read again)."""
    app = build_app(make_profile(tmp_path))
    backend = app.backend()
    try:
        app.warm(backend)
        session = app.session(backend)
        conv = session.conversation_id
        first = run(app, session, WEATHER)
        assert first.reused_tokens > 0  # the prefix prepared after loading
        prompts = [backend.last_prompt_tokens]
        for text in (TIMER, FILES, WEATHER_AGAIN):
            app.warm(backend, conv)
            stats = run(app, session, text)
            assert stats.evaluated_tokens <= own_turn(tokenizer, text), (text, stats.as_dict())
            assert stats.reused_tokens == stats.prompt_tokens - stats.evaluated_tokens
            prompts.append(backend.last_prompt_tokens)
        # one prompt start for all four (the system prompt and every tool), longer than the
        # weather request's own list: nothing of it was evaluated again
        tools = tokenizer.tokenize(
            tokenizer.prefix_text(
                [{"role": "system", "content": app.config.agent.system_prompt}],
                [
                    s
                    for s in app.registry.schemas()
                    if not app.registry.get(s["function"]["name"]).author
                ],  # type: ignore[union-attr]
            )
        )
        for tokens in prompts:
            assert tokens[: len(tools)] == tools
        selected = prefix_tokens(tokenizer, app, WEATHER, [])
        assert len(selected) < len(tools)
    finally:
        backend.close()
        app.close()


def test_with_every_tool_listed_botpsy_ask_reads_only_each_new_message(
    tmp_path: Path, tokenizer: LlamaBackend
) -> None:
    """New processes, the app's default: each `botpsy ask --conversation` restores the state its
    predecessor kept and evaluates its own message, a request about another domain too."""
    home = make_profile(tmp_path)
    first = botpsy(home, "ask", WEATHER)
    conv = first["conversation_id"]
    turns = [first["turns"][0]]
    for text in (TIMER, FILES):
        turn = botpsy(home, "ask", "--conversation", conv, text)["turns"][0]
        assert turn["evaluated_tokens"] <= own_turn(tokenizer, text), (text, turn)
        assert turn["reused_tokens"] > turns[-1]["prompt_tokens"] - 64
        turns.append(turn)


def _array(tokens: list[int]) -> Any:
    import numpy as np

    return np.asarray(tokens, dtype=np.intc)
