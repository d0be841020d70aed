"""A llama-server that lies or never ends, through the real CLI: a server that accepts and never
answers, one that streams forever or only keep-alive pings, one with wrong-typed fields, one that
drops the connection mid-sentence. Each ends with a sentence naming the server (no traceback,
no hang), what streamed is shown and kept, and `botpsy engine set` saves only a server that
works, naming `botpsy engine local` as the way back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.agent.store import ConversationStore
from tests.helpers.hanging_servers import hanging_server
from tests.helpers.lying_llama_server import lying_server

ROOT = Path(__file__).resolve().parents[2]


def profile(tmp_path: Path, **engine: Any) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True, exist_ok=True)
    (tmp_path / "files").mkdir(exist_ok=True)
    settings = {
        "files": {"roots": [str(tmp_path / "files")]},
        "model": {"max_tokens": 50},
        "engine": engine,
    }
    (home / "config" / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    return home


def botpsy(home: Path, *args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    """The CLI; ``timeout`` is a guard against a hang (the old 300 s read timeout, or none)."""
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=timeout,
        check=False,
    )


def last_message(home: Path) -> dict[str, Any]:
    store = ConversationStore(home / "data" / "conversations.sqlite3")
    try:
        [conversation] = store.conversations()
        return store.messages(conversation.id)[-1]
    finally:
        store.close()


def saved_engine(home: Path) -> Any:
    return json.loads((home / "config" / "config.json").read_text())["engine"].get("url")


def test_a_server_that_accepts_and_never_answers_is_given_up_soon_and_never_saved(
    tmp_path: Path,
) -> None:
    home = profile(tmp_path)
    with hanging_server("silent") as server:
        asked = botpsy(home, "ask", "--engine", server.base, "hello")
        assert asked.returncode == 1, asked.stderr
        assert "Traceback" not in asked.stderr
        assert f"The engine at {server.base} did not answer in time" in asked.stderr
        chosen = botpsy(home, "engine", "set", server.base)
    assert chosen.returncode == 1
    assert "Traceback" not in chosen.stderr
    assert f"{server.base} was not saved: The engine at {server.base}" in chosen.stderr
    assert "`botpsy engine local`" in chosen.stderr
    assert saved_engine(home) is None  # the model still runs here


def test_a_server_that_streams_forever_is_cut_at_the_requests_token_limit(
    tmp_path: Path,
) -> None:
    home = profile(tmp_path)
    with lying_server("forever") as server:
        asked = botpsy(home, "ask", "--engine", server.url, "hello")
        streamed = server.streamed
    assert asked.returncode == 1, asked.stderr
    assert "Traceback" not in asked.stderr
    assert (
        f"The engine at {server.url} went on past the 50 tokens this answer was allowed, so it "
        "was cut off there" in asked.stderr
    )
    assert streamed < 500  # cut off at once (it would stream for ever), not at the 300 s timeout
    assert "more more" in asked.stdout  # what it wrote is shown ...
    kept = last_message(home)  # ... and kept, marked cut off
    assert kept["role"] == "assistant" and kept.get("interrupted") is True
    assert "more more" in kept["content"]


def test_a_server_that_sends_only_keep_alive_pings_is_given_up(tmp_path: Path) -> None:
    home = profile(tmp_path, read_timeout_s=3)
    with lying_server("pings") as server:
        asked = botpsy(home, "ask", "--engine", server.url, "hello")
    assert asked.returncode == 1, asked.stderr
    assert "Traceback" not in asked.stderr
    assert f"The engine at {server.url} sent nothing of an answer for 3 s" in asked.stderr


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("wrong-props", "sent in /props model_path that is not text (['not', 'a', 'path'])"),
        ("not-object", "sent a stream line that is not an object ([1, 2, 3])"),
        ("wrong-stream", "sent in a stream line content that is not text ({'text': 'Hello'})"),
    ],
)
def test_wrong_typed_server_values_are_refused_with_a_sentence_naming_the_server(
    tmp_path: Path, mode: str, said: str
) -> None:
    home = profile(tmp_path)
    with lying_server(mode) as server:
        asked = botpsy(home, "ask", "--engine", server.url, "hello")
        chosen = botpsy(home, "engine", "set", server.url)
    for run in (asked, chosen):
        assert run.returncode == 1, run.stderr
        assert "Traceback" not in run.stderr
    assert f"The engine at {server.url} {said}" in asked.stderr, asked.stderr
    assert "`botpsy engine local`" in asked.stderr
    assert f"{server.url} was not saved: The engine at {server.url} {said}" in chosen.stderr
    assert saved_engine(home) is None


def test_a_reply_cut_short_is_shown_and_kept_with_its_held_back_text(tmp_path: Path) -> None:
    home = profile(tmp_path)
    with lying_server("cut") as server:
        asked = botpsy(home, "ask", "--engine", server.url, "hello")
    assert asked.returncode == 1, asked.stderr
    assert "Traceback" not in asked.stderr
    assert "I cannot say that" in asked.stdout
    kept = last_message(home)
    assert kept.get("interrupted") is True and kept["content"] == "I cannot say that"


def test_engine_set_tries_a_working_server_saves_it_and_names_the_way_back(
    tmp_path: Path,
) -> None:
    home = profile(tmp_path)
    with lying_server("ok") as server:
        chosen = botpsy(home, "engine", "set", server.url)
        assert chosen.returncode == 0, chosen.stderr
        assert "Connected: liar.gguf, 32768 tokens" in chosen.stdout
        assert "`botpsy engine local` runs it on this computer again." in chosen.stdout
        assert saved_engine(home) == server.url
        asked = botpsy(home, "ask", "hello")
        assert asked.returncode == 0, asked.stderr
        assert "Hello there." in asked.stdout
    assert botpsy(home, "engine", "local").returncode == 0
    assert saved_engine(home) is None
