"""The engine's worker crashes for real (SIGSEGV, SIGKILL) under the shipped CLI: `botpsy ask`
ends with a plain sentence and keeps the reply marked interrupted, the next ask answers, and the
daemon's alarms ring through a crash. `botpsy doctor` proves the engine with a real decode, and
`botpsy model import` / `verify` refuse a model that does not load."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any
from zoneinfo import ZoneInfo

import pytest

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.llm.engines.worker_protocol import CRASH_FILE_ENV
from tests.helpers.hub import write_gguf
from tests.helpers.models import tiny_qwen35_gguf, tiny_qwen35_long_gguf

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
PARIS = ZoneInfo("Europe/Paris")


def make_profile(tmp_path: Path, model: Path, **model_settings: Any) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True, exist_ok=True)
    (tmp_path / "files").mkdir(exist_ok=True)
    settings = {
        "files": {"roots": [str(tmp_path / "files")]},
        "alarms": {"time_zone": "Europe/Paris"},
        # one thread: llama.cpp threads waiting on each other crawl on a shared, loaded CPU
        "model": {
            "path": str(model),
            "seed": 1,
            "temperature": 0.0,
            "n_threads": 1,
            "n_threads_batch": 1,
            **model_settings,
        },
    }
    (home / "config" / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    return home


def botpsy(
    home: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        check=False,
    )


def log_text(home: Path) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in sorted(home.rglob("*.log*"))
    )


@pytest.mark.parametrize(
    ("how", "reason"), [("SIGSEGV", "segmentation fault"), ("SIGKILL", "killed")]
)
def test_ask_survives_an_engine_crash_mid_answer_and_the_next_ask_answers(
    tmp_path: Path, how: str, reason: str
) -> None:
    # sampled (not greedy): the random-weight model then writes visible text before the crash
    # the model trained for a long context: with the 4096 tokens of the plain tiny model the
    # follow-up below (the files tools, the profile's paths, two sampled replies) came within a
    # few tokens of its end, and a longer temporary folder path took it past
    home = make_profile(
        tmp_path, tiny_qwen35_long_gguf(), n_ctx=8192, max_tokens=24, temperature=1.0
    )
    crash = tmp_path / "crash-now"
    crash.write_text(f"{how} 12", encoding="utf-8")  # after 12 streamed pieces (env below)
    env = {CRASH_FILE_ENV: str(crash)}
    # a request about files: only the files tools are offered. The model answers once first
    # (a crash in a model's very first decode is blamed on the weight layout:
    # tests/llm/test_engine_process.py)
    first = botpsy(home, "ask", "Show me the files in my Documents folder.")
    assert first.returncode == 0, first.stderr
    run = botpsy(home, "ask", "--json", "List the files in my Documents folder.", env=env)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    transcript = json.loads(run.stdout)
    assert transcript["error"]["message"].startswith(
        f"The model engine stopped unexpectedly ({reason}"
    )
    assert transcript["error"]["message"].endswith(
        "while answering. It will restart for your next request; nothing was lost."
    )
    assert not crash.exists()
    # the reply so far is kept, marked interrupted
    conversation = transcript["conversation_id"]
    store = ConversationStore(home / "data" / "conversations.sqlite3")
    try:
        last = store.messages(conversation)[-1]
    finally:
        store.close()
    assert last["role"] == "assistant" and last.get("interrupted") is True
    assert last["content"].strip()
    # the app's log has the reason, with the worker's own report
    log = log_text(home)
    assert f"stopped while answering: {reason}" in log
    assert "crashing on purpose" in log
    if how == "SIGSEGV":
        assert "Fatal Python error: Segmentation fault" in log

    again = botpsy(
        home, "ask", "--conversation", conversation, "And the files in Pictures?", env=env
    )
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip()


def test_doctor_decodes_in_a_worker_and_reports_a_model_that_does_not_load(
    tmp_path: Path,
) -> None:
    home = make_profile(tmp_path, tiny_qwen35_gguf(), n_ctx=2048)
    run = botpsy(home, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(run.stdout)}
    engine = checks["engine"]
    assert engine["status"] == "ok", engine
    assert engine["detail"].startswith("loaded and decoded in a worker process: ")

    fake = write_gguf(tmp_path / "header-only.gguf", 1 << 20)  # its header passes, it does not load
    home = make_profile(tmp_path, fake)
    run = botpsy(home, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(run.stdout)}
    assert checks["model"]["status"] == "ok"
    assert checks["engine"]["status"] == "fail"
    assert "llama.cpp could not load header-only.gguf" in checks["engine"]["detail"]
    assert run.returncode == 1


def test_import_and_verify_prove_the_model_loads_and_refuse_it_otherwise(tmp_path: Path) -> None:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"model": {"n_threads": 1, "n_threads_batch": 1}}), encoding="utf-8"
    )
    fake = write_gguf(tmp_path / "Broken-Q8_0.gguf", 1 << 20)
    run = botpsy(home, "model", "import", str(fake))
    assert run.returncode == 1
    assert "Broken-Q8_0.gguf cannot be used, so nothing was imported: llama.cpp could not load" in (
        run.stderr
    )
    assert not list((home / "data" / "models").rglob("*.gguf"))
    config = json.loads((home / "config" / "config.json").read_text(encoding="utf-8"))
    assert config["model"].get("path") is None  # nothing was made active

    run = botpsy(home, "model", "import", "--link", str(tiny_qwen35_gguf()), "--name", "tiny")
    assert run.returncode == 0, run.stderr
    assert "loads and answers" in run.stderr and "tiny is now the active model." in run.stderr
    run = botpsy(home, "model", "verify", "tiny")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "matches; loads and decodes" in run.stdout


class Lines:
    """Reads a pipe on a thread so a test can wait for the next line with a timeout."""

    def __init__(self, pipe: IO[str]) -> None:
        self._q: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(pipe,), daemon=True).start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._q.put(line.rstrip("\n"))

    def next(self, timeout: float) -> str:
        return self._q.get(timeout=timeout)


def test_the_daemon_rings_its_alarm_while_the_engine_crashes_and_runs_the_next_routine(
    tmp_path: Path,
) -> None:
    # the 32k-trained tiny model, so that the routine's prompt (about 4,070 tokens with its
    # domain's tools) is not a few tokens from the 4,096 the `tiny` model is trained for
    home = make_profile(tmp_path, tiny_qwen35_long_gguf(), n_ctx=8192, max_tokens=24)
    crash = tmp_path / "crash-now"
    crash.write_text("SIGSEGV", encoding="utf-8")
    db = home / "data" / "alarms.sqlite3"
    db.parent.mkdir(parents=True, exist_ok=True)
    alarms = AlarmService(db, tz=PARIS)
    now = datetime.now(UTC)
    # the routine's request starts the engine; the timer is due while it loads and answers
    first = alarms.add(
        AlarmKind.ROUTINE, now + timedelta(seconds=2), label="List my Documents folder."
    )
    tea = timedelta(seconds=6)
    timer = alarms.add(AlarmKind.TIMER, now + tea, label="tea", duration=tea)
    alarms.shutdown()
    proc = subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), "daemon", "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", CRASH_FILE_ENV: str(crash)},
    )
    events: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)

        def until(check: Any, timeout: float = 240) -> dict[str, Any]:
            deadline = time.monotonic() + timeout
            while True:
                event = json.loads(lines.next(timeout=max(0.1, deadline - time.monotonic())))
                events.append(event)
                if check(event):
                    return event

        until(lambda e: e["event"] == "routine_error")
        if not any(e["event"] == "ringing" for e in events):
            until(lambda e: e["event"] == "ringing")
        (error,) = [e for e in events if e["event"] == "routine_error"]
        assert error["id"] == first.id
        assert error["message"].startswith("The model engine stopped unexpectedly (segmentation")
        (ringing,) = [e for e in events if e["event"] == "ringing"]
        assert ringing["id"] == timer.id and ringing["label"] == "tea"
        # the next routine gets a new engine and answers
        later = AlarmService(db, tz=PARIS)
        second = later.add(
            AlarmKind.ROUTINE,
            datetime.now(UTC) + timedelta(seconds=1),
            label="List the files in my Documents folder.",
        )
        later.shutdown()
        finished = until(lambda e: e["event"] == "routine_finished" and e["id"] == second.id)
        assert finished["state"] == "done", events
        assert not [e for e in events if e["event"] == "routine_error" and e["id"] == second.id]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
