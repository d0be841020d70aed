"""A real llama-server (built from the vendored llama.cpp) as the engine, on 127.0.0.1."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from botpsy_desktop.agent.events import Error, Token
from botpsy_desktop.app import build_app
from botpsy_desktop.core.config import EngineSettings, ModelSettings
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.engines.remote import RemoteBackend
from botpsy_desktop.llm.language.parser import parse_turn
from botpsy_desktop.llm.types import Completion, PromptProgress, TextPiece
from tests.helpers import llama_server
from tests.helpers.keyring_service import SecretService
from tests.helpers.models import REPO_ROOT, smollm2_gguf, tiny_qwen35_gguf
from tests.helpers.services import keyring_env, missing, secret_service  # noqa: F401
from tests.helpers.tool_schemas import TOOLS

pytestmark = pytest.mark.model

MESSAGES = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "Wake me at seven."},
]
SETTINGS = ModelSettings(temperature=0.0, max_tokens=40, seed=1)


def _binary() -> Path:
    if shutil.which("cmake") is None:
        missing("cmake (to build llama-server)", "apt install cmake", module=True)
    return llama_server.ensure_llama_server()


@pytest.mark.timeout(3600)
def test_llama_server_builds_from_the_vendored_llama_cpp() -> None:
    """First in the module: building takes minutes the first time (then it is cached)."""
    binary = _binary()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    assert version.returncode == 0 and "version" in (version.stdout + version.stderr)


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[llama_server.RunningServer]:
    _binary()
    folder = tmp_path_factory.mktemp("tiny-server")
    with llama_server.start_server(tiny_qwen35_gguf(), n_ctx=4096, slots=2, log_dir=folder) as s:
        yield s


@pytest.fixture
def tiny(tiny_server: llama_server.RunningServer) -> Iterator[RemoteBackend]:
    backend = RemoteBackend(EngineSettings(), SETTINGS, url=tiny_server.url)
    yield backend
    backend.close()


def finish(items: Iterator[TextPiece | PromptProgress | Completion]) -> tuple[str, Completion]:
    pieces = []
    for item in items:
        if isinstance(item, Completion):
            return "".join(pieces), item
        if isinstance(item, TextPiece):
            pieces.append(item.text)
    raise AssertionError("no completion")


def test_connecting_reads_the_model_its_context_and_its_template(tiny: RemoteBackend) -> None:
    info = tiny.info
    assert info.model.startswith("tiny-qwen35") and info.n_ctx == 4096 and info.slots == 2
    assert info.template_source == "model" and tiny.renderer.call_format == "xml"
    assert tiny.name == f"llama-server:{info.model}@{tiny.url}"
    # the count is the server's own tokenization of the app's rendering
    text = tiny.renderer.render(MESSAGES, TOOLS).text
    n = tiny.count_tokens(MESSAGES, TOOLS, enable_thinking=False)
    direct = httpx.post(f"{tiny.url}/tokenize", json={"content": text}).json()["tokens"]
    assert n == len(direct) > 100


def test_a_turn_streams_and_a_follow_up_reuses_the_servers_cache(tiny: RemoteBackend) -> None:
    text, done = finish(tiny.complete(MESSAGES, TOOLS, enable_thinking=False))
    assert text == done.text and done.finish_reason in ("stop", "length")
    st = done.stats
    assert st.prompt_tokens > 100 and st.reused_tokens + st.evaluated_tokens == st.prompt_tokens
    assert 0 < st.completion_tokens <= 40 and st.time_to_first_token_s > 0
    # the next turn of the same conversation extends the slot's tokens: only the new ones
    follow = [
        *MESSAGES,
        {"role": "assistant", "content": done.text},
        {"role": "user", "content": "And at eight?"},
    ]
    _, again = finish(tiny.complete(follow, TOOLS, enable_thinking=False))
    # Qwen3.5's template renders the earlier reply without its empty thinking block: the
    # server goes back to its checkpoint before that reply, not to the start
    assert again.stats.reused_tokens >= st.prompt_tokens - 10
    assert again.stats.evaluated_tokens < again.stats.prompt_tokens - st.prompt_tokens + 20
    # the window warms the conversation as its next request will render it (App.warm): the
    # next follow-up then evaluates only its own message
    history = [*follow, {"role": "assistant", "content": again.text}]
    warmed = tiny.warm(history, TOOLS)
    assert warmed.evaluated_tokens > 0
    third = [*history, {"role": "user", "content": "Thanks."}]
    head = len(tiny.tokenize(tiny.conversation_head(history, TOOLS)))
    _, last = finish(tiny.complete(third, TOOLS, enable_thinking=False))
    assert last.stats.reused_tokens >= head - 1
    assert last.stats.evaluated_tokens <= last.stats.prompt_tokens - head + 1


def test_the_servers_progress_through_a_long_prompt_is_reported(tiny: RemoteBackend) -> None:
    """Before the first piece of text: how far the server has come, as the local engine says."""
    fresh = [{"role": "system", "content": "A fresh system prompt. " * 300}, MESSAGES[1]]
    items = list(tiny.complete(fresh, TOOLS, enable_thinking=False, max_tokens=4))
    first_text = next(i for i, item in enumerate(items) if not isinstance(item, PromptProgress))
    progress = [item for item in items if isinstance(item, PromptProgress)]
    assert progress and all(isinstance(item, PromptProgress) for item in items[:first_text])
    # the new conversation's system prompt and tools (the prefix request), then its own turn
    assert max(p.total for p in progress) > 1000
    assert progress[-1].done == progress[-1].total


def test_a_forced_tool_call_is_constrained_by_the_servers_grammar(tiny: RemoteBackend) -> None:
    """Random weights never write a valid call by chance; the grammar sent along makes them."""
    rendered = tiny.renderer.render(MESSAGES, TOOLS)
    grammar = tiny._grammar_for(TOOLS)
    assert grammar is not None
    _, done = finish(
        tiny.generate(rendered.text, grammar=grammar, force_tool_call=True, max_tokens=200)
    )
    parsed = parse_turn(done.text, TOOLS)
    assert parsed.errors == [], done.text
    (call,) = parsed.tool_calls
    assert call.name in ("set_alarm", "get_weather")


def test_the_lazy_grammar_starts_at_the_models_own_tool_call(tiny: RemoteBackend) -> None:
    """The request the backend sends, with the <tool_call> token made likely: everything the
    model writes after it is held to the schemas, call after call."""
    tokens = tiny.tokenize(tiny.renderer.render(MESSAGES, TOOLS).text)
    body = tiny.request_body(tokens, 80, None, tiny._grammar_for(TOOLS), False, False)
    assert body["grammar_lazy"] is True and body["grammar_triggers"][0]["type"] == 0
    body.update(stream=False, logit_bias=[[tiny.tokenize("<tool_call>")[0], 30.0]])
    answer = httpx.post(f"{tiny.url}/completion", json=body, timeout=280).json()
    text = answer["content"]
    assert text.startswith("<tool_call>"), text
    parsed = parse_turn(text, TOOLS)
    assert parsed.tool_calls, text
    if answer["stop_type"] == "eos":
        assert parsed.errors == [], text
    else:  # cut off by n_predict: only the last call may be unfinished
        assert len(parsed.errors) <= 1 and parsed.calls[-1] in parsed.errors + parsed.tool_calls


def test_in_thinking_mode_the_grammar_waits_for_the_end_of_thinking(tiny: RemoteBackend) -> None:
    """The trigger is a pattern after </think>: a <tool_call> written while thinking is free."""
    tokens = tiny.tokenize(tiny.renderer.render(MESSAGES, TOOLS, enable_thinking=True).text)
    body = tiny.request_body(tokens, 30, None, tiny._grammar_for(TOOLS), True, False)
    assert body["grammar_triggers"] == [{"type": 2, "value": r"</think>[\s\S]*?(<tool_call>)"}]
    # made likely, <tool_call> comes again and again: inside thinking nothing constrains it
    body.update(stream=False, logit_bias=[[tiny.tokenize("<tool_call>")[0], 30.0]])
    answer = httpx.post(f"{tiny.url}/completion", json=body, timeout=280).json()
    assert answer["content"].startswith("<tool_call><tool_call>"), answer["content"]
    _, done = finish(tiny.complete(MESSAGES, TOOLS, enable_thinking=True))
    assert done.started_in_thinking and done.stats.completion_tokens > 0


def test_stop_closes_the_stream_and_the_server_stays_usable(tiny: RemoteBackend) -> None:
    cancel = threading.Event()
    seen = 0
    done = None
    # a reply of up to 3000 tokens (minutes here) that the user stops at its first piece
    for item in tiny.complete(
        MESSAGES, TOOLS, enable_thinking=False, cancel=cancel, max_tokens=3000
    ):
        if isinstance(item, TextPiece):
            seen += 1
            cancel.set()
        else:
            done = item
    assert done is not None and done.finish_reason == "cancelled" and seen <= 3
    # the server stopped generating: its slots go idle (it notices the closed stream at its
    # next token), long before the 3000 tokens could have been written
    deadline = time.monotonic() + 60
    while any(s["is_processing"] for s in httpx.get(f"{tiny.url}/slots").json()):
        assert time.monotonic() < deadline, "the server kept generating after Stop"
        time.sleep(0.1)
    _, after = finish(tiny.complete(MESSAGES, TOOLS, enable_thinking=False))
    assert after.finish_reason in ("stop", "length") and after.stats.completion_tokens > 0


LLAMA3_TEMPLATE = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
    "{{ m.content }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def test_a_template_that_is_not_botpsys_format_is_refused(tmp_path: Path) -> None:
    _binary()
    template = tmp_path / "llama3.jinja"
    template.write_text(LLAMA3_TEMPLATE)
    extra = ["--chat-template-file", str(template)]
    with (
        llama_server.start_server(tiny_qwen35_gguf(), extra=extra, log_dir=tmp_path) as server,
        pytest.raises(ModelError, match="does not fit BotPsy's format") as exc,
    ):
        RemoteBackend(EngineSettings(), SETTINGS, url=server.url)
    assert "chat template does not write ChatML" in exc.value.message
    # a built-in template chosen by name hides the model's own: said so, with the fix
    extra = ["--chat-template", "llama3"]
    with (
        llama_server.start_server(tiny_qwen35_gguf(), extra=extra, log_dir=tmp_path) as server,
        pytest.raises(ModelError, match="built-in chat template 'llama3'") as exc,
    ):
        RemoteBackend(EngineSettings(), SETTINGS, url=server.url)
    assert "without --chat-template" in exc.value.hint


def test_an_api_key_is_sent_and_a_missing_one_is_explained(tmp_path: Path) -> None:
    _binary()
    key = "k-" + os.urandom(6).hex()
    with llama_server.start_server(tiny_qwen35_gguf(), api_key=key, log_dir=tmp_path) as server:
        with pytest.raises(ModelError, match="refused the API key") as exc:
            RemoteBackend(EngineSettings(), SETTINGS, url=server.url)
        assert "--api-key-stdin" in exc.value.hint
        backend = RemoteBackend(EngineSettings(), SETTINGS, url=server.url, api_key=key)
        try:
            _, done = finish(backend.complete(MESSAGES, TOOLS, enable_thinking=False))
            assert done.stats.completion_tokens > 0
        finally:
            backend.close()


def test_a_server_that_dies_mid_answer_ends_it_with_a_clear_error(tmp_path: Path) -> None:
    """Through the app's session: the error says what happened; the partial reply is kept,
    marked interrupted."""
    _binary()
    home = tmp_path / "home"
    server_run = llama_server.start_server(tiny_qwen35_gguf(), log_dir=tmp_path)
    with server_run as server:
        app = build_app(home)
        try:
            app.config.model.max_tokens = 2000
            backend = app.backend(engine=server.url)
            session = app.session(backend)
            events = []
            for event in session.run("List the files in my notes folder."):
                events.append(event)
                if isinstance(event, Token) and server.process.poll() is None:
                    server.process.kill()
            backend.close()
            errors = [e for e in events if isinstance(e, Error)]
            assert errors and errors[-1].kind == "model", events[-3:]
            assert "stopped answering mid-reply" in errors[-1].message
            rows = app.store.messages(session.conversation_id)
            assert rows[0]["role"] == "user"
            assert rows[-1]["role"] == "assistant" and rows[-1].get("interrupted"), rows
        finally:
            app.close()


def test_plain_http_to_another_computer_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ModelError, match="unencrypted") as exc:
        RemoteBackend(EngineSettings(), SETTINGS, url="http://192.168.1.20:8080")
    assert "allow_plain_http" in exc.value.hint and "SSH tunnel" in exc.value.hint


def cli(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )


def test_the_cli_sets_shows_and_uses_a_server_engine(tmp_path: Path) -> None:
    _binary()
    home = tmp_path / "home"
    refused = cli(home, "engine", "set", "http://10.1.2.3:8080")
    assert refused.returncode == 1 and "unencrypted" in refused.stderr
    assert "local" in cli(home, "engine", "show").stdout
    with llama_server.start_server(smollm2_gguf(), n_ctx=8192, log_dir=tmp_path) as server:
        done = cli(home, "engine", "set", server.url)
        assert done.returncode == 0, done.stderr
        assert "Connected:" in done.stdout and "8192 tokens of context" in done.stdout
        config = json.loads((home / "config" / "config.json").read_text())
        assert config["engine"]["url"] == server.url
        shown = cli(home, "engine", "show", "--json")
        data = json.loads(shown.stdout)
        assert data["engine"] == "llama-server" and data["status"] == "connected"
        assert data["n_ctx"] == 8192 and data["round_trip_ms"] > 0
        # a short, deterministic answer: SmolLM2 may otherwise write up to max_tokens per step
        # for several steps, minutes on a loaded machine
        settings = home / "config" / "config.json"
        config = json.loads(settings.read_text())
        config["model"].update(max_tokens=32, temperature=0.0, seed=1)
        settings.write_text(json.dumps(config))
        answer = cli(home, "ask", "--json", "List the files in my notes folder.")
        assert answer.returncode == 0, answer.stdout + answer.stderr
        transcript = json.loads(answer.stdout)
        assert transcript["model"].startswith("llama-server:") and transcript["answer"]
        doctor = cli(home, "doctor")
        assert "engine" in doctor.stdout and server.url in doctor.stdout
        assert "prefix caching works" in doctor.stdout, doctor.stdout
    assert "runs on this computer" in cli(home, "engine", "local").stdout
    assert json.loads(cli(home, "engine", "show", "--json").stdout)["engine"] == "local"


def test_the_api_key_goes_to_the_keyring_and_nowhere_else(
    tmp_path: Path,
    keyring_env: SecretService,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`botpsy engine set URL --api-key-stdin`, then ask, doctor and a diagnostics bundle: the
    key reaches the server, and is in no file of the profile, no log and not in the bundle."""
    _binary()
    from botpsy_desktop import cli as botpsy

    key = "secret-engine-key-" + os.urandom(6).hex()
    home = tmp_path / "home"
    with llama_server.start_server(tiny_qwen35_gguf(), api_key=key, log_dir=tmp_path) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO(key + "\n"))
        assert (
            botpsy.main(["--home", str(home), "engine", "set", server.url, "--api-key-stdin"]) == 0
        )
        config = home / "config" / "config.json"  # a short, deterministic answer
        data = json.loads(config.read_text())
        data["model"].update(max_tokens=16, temperature=0.0, seed=1)
        config.write_text(json.dumps(data))
        assert botpsy.main(["--home", str(home), "ask", "List the files in my notes folder."]) == 0
        bundle = tmp_path / "bundle.zip"
        botpsy.main(["--home", str(home), "doctor", "--bundle", str(bundle)])
    with zipfile.ZipFile(bundle) as archive:
        for name in archive.namelist():
            assert key.encode() not in archive.read(name), name
    files = [p for p in home.rglob("*") if p.is_file()]
    assert any(p.name == "config.json" for p in files) and any("logs" in p.parts for p in files)
    for file in files:
        assert key.encode() not in file.read_bytes(), file


@pytest.mark.timeout(600)
def test_the_remote_bench_runs(tmp_path: Path) -> None:
    """tools/bench_remote.py (PERFORMANCE.md's figures), small, so that it cannot rot."""
    _binary()
    done = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "tools" / "bench.py"),
            "--remote",
            "--model",
            str(tiny_qwen35_gguf()),
            "--ctx",
            "4096",
            "--decode-tokens",
            "8",
            "--repeats",
            "1",
            # the requests in which the model opens calls itself run to this limit, under the
            # grammar (a few tokens a second): 128 here, 400 for the figures
            "--opened-tokens",
            "128",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (result,) = json.loads(done.stdout)
    assert result["cold"]["evaluated"] == result["prompt_tokens"] > 1000
    assert result["new_process"]["evaluated"] < 100
    assert result["decode"]["app_tok_s"] > 0 and result["decode"]["direct_tok_s"] > 0
    assert result["tool_calls"]["forced"].startswith("5/5 parsed")
    # the calls the model opened itself and finished within the limit all parse
    opened = re.match(r"(\d+)/(\d+) finished", result["tool_calls"]["opened_by_the_model"])
    assert opened and opened[1] == opened[2] and int(opened[2]) >= 1, result["tool_calls"]
