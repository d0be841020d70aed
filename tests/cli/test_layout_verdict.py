"""The engine's verdict on a weight layout (cache/engine/layouts.json), through the real CLI: a
crash after the first token streamed is not blamed on the layout, `botpsy doctor
--retry-layout` forgets a stale verdict once the layout decodes again, and a wrong-typed entry
in the file is dropped (the file repaired) instead of stopping every run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from botpsy_desktop.llm.engines.engine_process import LayoutMemory
from botpsy_desktop.llm.engines.worker_protocol import CRASH_FILE_ENV
from tests.cli.test_engine_crash import botpsy, make_profile
from tests.helpers.models import tiny_qwen35_gguf

pytestmark = pytest.mark.model

REQUEST = "List the files in my Documents folder."


def layouts(home: Path) -> dict[str, dict[str, object]]:
    path = home / "cache" / "engine" / "layouts.json"
    models = json.loads(path.read_text(encoding="utf-8"))["models"]
    assert isinstance(models, dict)
    return models


def engine_check(home: Path, *extra: str) -> tuple[dict[str, dict[str, str]], str]:
    run = botpsy(home, "doctor", "--json", *extra)
    assert "Traceback" not in run.stderr, run.stderr
    return {c["name"]: c for c in json.loads(run.stdout)}, run.stderr


def test_a_crash_after_the_first_token_is_not_blamed_on_the_layout(tmp_path: Path) -> None:
    # sampled: the random-weight model writes visible text before the crash
    home = make_profile(tmp_path, tiny_qwen35_gguf(), n_ctx=8192, max_tokens=24, temperature=1.0)
    crash = tmp_path / "crash-now"
    crash.write_text("SIGSEGV 6 tokens", encoding="utf-8")  # after 6 decoded tokens streamed
    run = botpsy(home, "ask", "--json", REQUEST, env={CRASH_FILE_ENV: str(crash)})
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    message = json.loads(run.stdout)["error"]["message"]
    assert message.startswith("The model engine stopped unexpectedly (segmentation fault)")
    assert message.endswith("It will restart for your next request; nothing was lost.")
    assert "plain layout" not in message
    conversation = json.loads(run.stdout)["conversation_id"]
    shown = botpsy(home, "history", conversation, "--json")
    kept = json.loads(shown.stdout)[-1]
    assert kept["role"] == "assistant" and kept["content"].strip()  # tokens had streamed
    [entry] = layouts(home).values()
    assert "plain" not in entry  # no verdict against the layout...
    assert entry["ok"]  # ...which decoded: a later crash is never blamed on it
    checks, _ = engine_check(home)
    assert checks["engine"]["status"] == "ok", checks["engine"]
    assert "weight layout plain" not in checks["engine"]["detail"]


def test_doctor_retry_layout_forgets_a_stale_verdict(tmp_path: Path) -> None:
    home = make_profile(tmp_path, tiny_qwen35_gguf(), n_ctx=8192, max_tokens=24)
    crash = tmp_path / "crash-now"
    crash.write_text("SIGSEGV 0", encoding="utf-8")  # before any token: its first decode
    run = botpsy(home, "ask", "--json", REQUEST, env={CRASH_FILE_ENV: str(crash)})
    assert run.returncode == 1, run.stderr
    message = json.loads(run.stdout)["error"]["message"]
    assert "will restart with the plain layout" in message
    [entry] = layouts(home).values()
    verdict = entry["plain"]
    assert isinstance(verdict, dict)
    blamed = verdict["after"]
    checks, _ = engine_check(home)
    assert checks["engine"]["status"] == "warn"
    assert "`botpsy doctor --retry-layout`" in checks["engine"]["hint"]

    checks, _ = engine_check(home, "--retry-layout")
    retried = checks["weight layout"]
    assert retried["status"] == "ok", retried
    assert f"the {blamed} layout decodes with this model now" in retried["detail"]
    assert checks["engine"]["status"] == "ok", checks["engine"]
    assert checks["engine"]["detail"].endswith(f"weight layout {blamed}")
    [entry] = layouts(home).values()
    assert "plain" not in entry and blamed in entry["ok"]  # type: ignore[operator]
    again = botpsy(home, "ask", REQUEST)
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize(
    "entry", [["extra"], {"ok": "extra"}, {"ok": [1, 2]}, {"plain": {"after": 3}}, 7]
)
def test_a_wrong_typed_layouts_entry_is_dropped_and_the_file_repaired(
    tmp_path: Path, entry: object
) -> None:
    home = make_profile(tmp_path, tiny_qwen35_gguf(), n_ctx=8192, max_tokens=8)
    key = LayoutMemory.key(tiny_qwen35_gguf())
    path = home / "cache" / "engine" / "layouts.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 1, "models": {key: entry}}), encoding="utf-8")
    for _ in range(2):  # every run, not only the first
        run = botpsy(home, "ask", REQUEST)
        assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    [kept] = layouts(home).values()
    assert isinstance(kept, dict) and isinstance(kept["ok"], list)
    assert all(isinstance(x, str) for x in kept["ok"]) and "plain" not in kept
    checks, _ = engine_check(home)
    assert checks["engine"]["status"] == "ok", checks["engine"]
