"""Ctrl-C stops `botpsy ask` for real: a normal answer and a hung engine worker (the test hook
makes the worker stop sending and ignore cancels, as a decode stuck in native code would). The
command exits 130, says "Stopped." and what was kept, and the next request answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.llm.engines.worker_protocol import CRASH_FILE_ENV
from tests.cli.test_engine_crash import botpsy, log_text, make_profile
from tests.helpers.models import tiny_qwen35_gguf

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]


class Output:
    """A pipe read on a thread, so the test can wait for text without blocking."""

    def __init__(self, pipe: IO[bytes]) -> None:
        self.text = ""
        self._pipe = pipe
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        fd = self._pipe.fileno()
        while chunk := os.read(fd, 4096):
            self.text += chunk.decode("utf-8", "replace")

    def close(self) -> None:
        self._thread.join(10)
        self._pipe.close()


class Ask:
    """`botpsy ask` running in the background, its output read as it comes."""

    def __init__(self, home: Path, text: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "botpsy_desktop", "--home", str(home), "ask", text],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.out, self.err = Output(self.proc.stdout), Output(self.proc.stderr)

    def interrupt(self) -> int:
        """Ctrl-C, once; the exit status (the test fails if it does not end in time)."""
        try:
            self.proc.send_signal(signal.SIGINT)
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.out.close()
            self.err.close()


def wait_for(check: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def last_reply(home: Path) -> dict[str, object]:
    store = ConversationStore(home / "data" / "conversations.sqlite3")
    try:
        [conversation] = [c.id for c in store.conversations()]
        return store.messages(conversation)[-1]
    finally:
        store.close()


def test_ctrl_c_during_an_answer_stops_it_exits_130_and_keeps_the_reply(tmp_path: Path) -> None:
    # sampled from random weights: it writes on until its 3,000-token limit unless stopped
    home = make_profile(tmp_path, tiny_qwen35_gguf(), n_ctx=16384, max_tokens=3000, temperature=1.0)
    ask = Ask(home, "Good morning! How are you? Tell me a long story.", {})  # chit-chat: no tools
    try:
        wait_for(lambda: len(ask.out.text.strip()) > 20, 240, "the answer to stream")
    finally:
        code = ask.interrupt()  # also when it never streamed: no process is left running
    err = ask.err.text
    assert code == 130, err
    assert "Traceback" not in err
    assert "Stopped." in err
    assert "What the model had written is kept in the conversation, marked as cut off." in err
    reply = last_reply(home)
    assert reply["role"] == "assistant" and reply.get("interrupted") is True
    assert str(reply["content"]).strip()


def test_ctrl_c_with_a_hung_engine_kills_its_worker_and_the_next_ask_answers(
    tmp_path: Path,
) -> None:
    home = make_profile(tmp_path, tiny_qwen35_gguf(), n_ctx=8192, max_tokens=200, temperature=1.0)
    hang = tmp_path / "hang-now"
    hang.write_text("hang 4", encoding="utf-8")  # after 4 streamed pieces
    env = {CRASH_FILE_ENV: str(hang)}
    ask = Ask(home, "List the files in my Documents folder.", env)
    try:
        wait_for(lambda: not hang.exists(), 240, "the worker to hang")
        time.sleep(0.5)
    finally:
        code = ask.interrupt()  # once: a hung worker must not need a second Ctrl-C
    err = ask.err.text
    assert code == 130, err
    assert "Traceback" not in err
    assert "Stopped." in err and "kept in the conversation" in err
    log = log_text(home)
    assert "did not stop within 1 s of being asked to: it was killed" in log
    assert "hanging on purpose" in log
    reply = last_reply(home)  # the request, and what streamed before the hang, if anything
    assert reply["role"] == "user" or reply.get("interrupted") is True

    again = botpsy(home, "ask", "--json", "List the files in my Pictures folder.", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["answer"] is not None
