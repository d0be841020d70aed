"""Crash safety: children streaming through the real loop and store are killed with SIGKILL."""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.events import Answer
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import INTERRUPTED_NOTE, INTERRUPTED_TOOL, ConversationStore
from botpsy_desktop.core.tools import ToolRegistry
from botpsy_desktop.llm.engines.replay import ReplayBackend
from botpsy_desktop.llm.language.prompt import PromptRenderer
from tests.agent.gate_tools import shipped_gate
from tests.helpers.kill_child import ANSWERS

KILLS = 210
LANES = 3  # children running at once, each in its own conversation
HELPER = Path(__file__).resolve().parents[1] / "helpers" / "kill_child.py"

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the fork server needs fork()")


@dataclass
class Lane:
    conversation: str
    pid: int | None = None
    kill_at: float = 0.0
    acked: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)


def _visible(answer: str) -> str:
    return answer.split("</think>")[-1].strip()


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_kill_9_at_random_points_loses_no_committed_message(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    root = tmp_path / "files"
    root.mkdir()
    for name in ("a.txt", "b.txt", "report.pdf"):
        (root / name).write_text(name, encoding="utf-8")
    store = ConversationStore(db)
    lanes = [Lane(store.create(f"lane {i}")) for i in range(LANES)]
    store.close()

    server = subprocess.Popen(
        [sys.executable, str(HELPER), str(db), str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert server.stdin is not None and server.stdout is not None
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in server.stdout], daemon=True)  # type: ignore[union-attr]
    reader.start()
    by_conv = {lane.conversation: lane for lane in lanes}
    forked: queue.Queue[int] = queue.Queue()
    rng = random.Random(11)
    seen: dict[int, int] = {}  # message row -> visible characters a child showed, at a sentence end

    def pump(timeout: float = 0.0) -> None:
        try:
            line = lines.get(timeout=timeout).rstrip("\n")
        except queue.Empty:
            return
        while True:
            kind, _pid, conv, *rest = line.split(" ", 3)
            lane = by_conv[conv]
            if kind == "forked":
                forked.put(int(_pid))
            elif kind == "ack":
                lane.acked.append(rest[0])
            elif kind == "seen":
                row, chars = rest[0].split()
                seen[int(row)] = max(seen.get(int(row), 0), int(chars))
            elif kind == "answer":
                lane.answered.append(rest[0])
            try:
                line = lines.get_nowait().rstrip("\n")
            except queue.Empty:
                return

    def spawn(lane: Lane) -> None:
        server.stdin.write(f"fork {lane.conversation}\n")  # type: ignore[union-attr]
        server.stdin.flush()  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while forked.empty():
            assert time.monotonic() < deadline, "the fork server did not answer"
            pump(0.01)
        lane.pid = forked.get()
        lane.kill_at = time.monotonic() + rng.uniform(0.0, 0.35)

    started = time.monotonic()
    kills = 0
    try:
        for lane in lanes:
            spawn(lane)
        while kills < KILLS:
            pump(0.005)
            now = time.monotonic()
            for lane in lanes:
                if kills >= KILLS or lane.pid is None or now < lane.kill_at:
                    continue
                os.kill(lane.pid, signal.SIGKILL)
                while not _dead(lane.pid):
                    time.sleep(0.001)
                kills += 1
                lane.pid = None
                if kills + sum(x.pid is not None for x in lanes) < KILLS:
                    spawn(lane)
    finally:
        for lane in lanes:
            if lane.pid is not None:
                os.kill(lane.pid, signal.SIGKILL)
        server.stdin.write("quit\n")  # type: ignore[union-attr]
        server.stdin.close()  # type: ignore[union-attr]
        server.wait(10)
        reader.join(5)
        server.stdout.close()  # type: ignore[union-attr]
        pump()
    elapsed = time.monotonic() - started
    acked = sum(len(x.acked) for x in lanes)
    answered = sum(len(x.answered) for x in lanes)
    print(
        f"\nkill test: {kills} SIGKILLs in {elapsed:.1f} s; {acked} requests acknowledged, "
        f"{answered} answered"
    )
    assert kills >= 200

    # the file is sound; whatever a child showed up to a sentence end is on disk
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {
        int(r[0]): str(json.loads(r[1]).get("content", ""))
        for r in con.execute("SELECT id, payload FROM messages WHERE role = 'assistant'")
    }
    lost = [(row, n, stored.get(row)) for row, n in seen.items() if len(stored.get(row, "")) < n]
    assert seen and not lost, lost[:5]
    pending = con.execute("SELECT COUNT(*) FROM messages WHERE state = 'pending'").fetchone()[0]
    con.close()
    # opening the store marks what the dead children left pending, and only that
    store = ConversationStore(db)
    assert store.recovered == pending
    cut = {"text": 0, "empty": 0, "tool": 0}  # where the interrupted requests were cut off
    con = sqlite3.connect(db)
    assert con.execute("SELECT COUNT(*) FROM messages WHERE state = 'pending'").fetchone()[0] == 0
    con.close()
    for lane in lanes:
        messages = store.messages(lane.conversation)
        users = [m["content"] for m in messages if m["role"] == "user"]
        # every acknowledged user message is there, once, in order
        assert [u for u in users if u in set(lane.acked)] == lane.acked
        turns: list[list[dict[str, object]]] = []
        for m in messages:
            if m["role"] == "user":
                turns.append([m])
            else:
                turns[-1].append(m)
        for turn in turns:
            text, last = turn[0]["content"], turn[-1]
            # never silently missing: each request ends with its answer or an interrupted row
            assert len(turn) > 1, f"request {text!r} has no reply row"
            finished = last["role"] == "assistant" and not last.get("tool_calls")
            assert last.get("interrupted") or finished, (text, last)
            if text in lane.answered:
                assert finished and not last.get("interrupted"), (text, turn)
            for m in turn[1:]:
                if m["role"] == "assistant" and not m.get("tool_calls"):
                    visible = [_visible(a) for a in ANSWERS]
                    content = str(m["content"])
                    assert any(v.startswith(content) for v in visible), content
                    if not m.get("interrupted"):
                        assert content in visible
        assert any(m.get("interrupted") for m in messages)
        for m in messages:
            if m.get("interrupted"):
                kind = "tool" if m["role"] == "tool" else "text" if m.get("content") else "empty"
                cut[kind] += 1

    print(
        f"interrupted: {cut['text']} replies mid-text, {cut['empty']} before any text, "
        f"{cut['tool']} during a tool call"
    )

    # a fresh session continues each conversation; the prompt shows the cut-off replies as such
    registry = ToolRegistry(files_tools([root]))
    for lane in lanes:
        backend = ReplayBackend(["Carrying on."])
        session = AgentSession(
            backend,
            registry,
            shipped_gate(),
            store,
            LoopSettings(system_prompt="You are a test.", max_steps=2),
            lane.conversation,
        )
        answers = [e for e in session.run("still there?") if isinstance(e, Answer)]
        assert answers and answers[0].text == "Carrying on."
        prompt = backend.prompts[0]
        assert prompt[-1] == {"role": "user", "content": "still there?"}
        for m in prompt:
            assert "interrupted" not in m and "pending" not in m
            if m["role"] == "assistant":
                assert m.get("content") or m.get("tool_calls")
        answered_ids = {m["tool_call_id"] for m in prompt if m["role"] == "tool"}
        for m in prompt:
            for call in m.get("tool_calls") or []:
                assert call["id"] in answered_ids  # no call left unanswered
        cut = [m for m in prompt if INTERRUPTED_NOTE in str(m.get("content"))]
        stopped_tools = [m for m in prompt if m.get("content") == INTERRUPTED_TOOL]
        assert cut or stopped_tools or lane.answered
        PromptRenderer(None).render(prompt, registry.schemas(), enable_thinking=False)
        assert store.messages(lane.conversation)[-1]["content"] == "Carrying on."
    store.close()
