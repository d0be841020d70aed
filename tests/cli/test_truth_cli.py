"""The terminal says what ran, what was refused and what the model only claimed, shows the
progress of a long prompt, and `botpsy tools` says what the gate really decides (the real CLI
in a subprocess, replayed model output)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from botpsy_desktop.agent.claims import NOTE
from botpsy_desktop.agent.logs import log_files, setup_logging
from botpsy_desktop.app import build_app
from tests.helpers.replay import xml_call

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    files = tmp_path / "files"
    (files / "Documents").mkdir(parents=True)
    (files / "Documents" / "a.txt").write_text("a", encoding="utf-8")
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}}), encoding="utf-8"
    )
    return home


def botpsy(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def replay(tmp_path: Path, *turns: object) -> str:
    f = tmp_path / "replay.json"
    f.write_text(json.dumps(list(turns)), encoding="utf-8")
    return str(f)


def test_a_claim_with_nothing_carried_out_is_said_on_the_terminal_and_in_json(
    profile: Path, tmp_path: Path
) -> None:
    file = replay(tmp_path, "Done! The timer will ring 10 minutes later.")
    run = botpsy(profile, "ask", "--replay", file, "timer 10 minutes")
    assert run.returncode == 0, run.stderr
    assert "The timer will ring" in run.stdout
    assert f"[note] {NOTE}" in run.stderr
    file = replay(tmp_path, "Done! The timer will ring 10 minutes later.")
    run = botpsy(profile, "ask", "--replay", file, "--json", "timer 10 minutes")
    assert json.loads(run.stdout)["note"] == NOTE


def test_a_refused_call_is_listed_as_not_carried_out(profile: Path, tmp_path: Path) -> None:
    file = replay(tmp_path, xml_call("move_to_trash", path="Documents/a.txt"), "Done.")
    run = botpsy(profile, "ask", "--replay", file, "--approve", "deny", "trash a.txt")
    assert run.returncode == 0, run.stderr
    assert "[outcome] ✗ Not approved, not carried out: move_to_trash(" in run.stderr
    assert f"[note] {NOTE}" in run.stderr


def test_what_ran_is_listed_and_a_true_answer_gets_no_note(profile: Path, tmp_path: Path) -> None:
    timer = xml_call("set_timer", duration="10 minutes")
    file = replay(tmp_path, timer, "Done! Your timer rings in 10 minutes.")
    run = botpsy(profile, "ask", "--replay", file, "timer 10 minutes")
    assert run.returncode == 0, run.stderr
    assert "[outcome] ✓ Done: Set a timer for 10 minutes." in run.stderr
    assert "[note]" not in run.stderr


def test_the_progress_of_a_long_prompt_is_shown(profile: Path, tmp_path: Path) -> None:
    progress = [[0, 5598, 0.0], [1536, 5598, 0.1], [3072, 5598, 0.2], [5598, 5598, 0.3]]
    file = replay(tmp_path, {"text": "Hello!", "prompt_progress": progress})
    run = botpsy(profile, "ask", "--replay", file, "hello")
    assert run.returncode == 0, run.stderr
    assert "[prompt] Reading the request: 1,536 of 5,598 tokens · about" in run.stderr
    assert "[prompt] Reading the request: 5,598 of 5,598 tokens" in run.stderr
    assert run.stdout.strip() == "Hello!"


def test_tools_json_says_what_the_gate_decides(profile: Path) -> None:
    run = botpsy(profile, "tools", "--json")
    tools = {t["name"]: t for t in json.loads(run.stdout)}
    # a timer you ask for runs at once (with Undo): it does not need approval
    assert tools["set_timer"]["tier"] == "reversible"
    assert tools["set_timer"]["needs_approval"] is False
    assert tools["set_timer"]["asks"].startswith("only when the request holds untrusted")
    assert tools["move_to_trash"]["needs_approval"] is True
    assert tools["list_folder"]["needs_approval"] is False
    # with "ask before every change", the same list says the timer asks
    config = profile / "config" / "config.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    data["agent"] = {"ask_before_every_change": True}
    config.write_text(json.dumps(data), encoding="utf-8")
    tools = {t["name"]: t for t in json.loads(botpsy(profile, "tools", "--json").stdout)}
    assert tools["set_timer"]["needs_approval"] is True
    assert tools["list_folder"]["needs_approval"] is False


def test_the_alarm_poller_does_not_fill_the_log(tmp_path: Path) -> None:
    app = build_app(tmp_path / "profile")
    handle = setup_logging(app.paths, app.config.logs, face="test")
    try:
        assert app.alarms is not None
        app.alarms.start()
        interval = app.alarms.poll_interval_s
        time.sleep(3 * interval + 0.5)  # a few polls (a lower bound only: no timing asserted)
    finally:
        app.close()
        handle.close()
    lines = log_files(app.paths)[0].read_text(encoding="utf-8").splitlines()
    assert lines  # the start is logged
    assert not [line for line in lines if "apscheduler" in line], lines[:5]


def test_history_says_how_each_call_ended_and_keeps_the_note(profile: Path, tmp_path: Path) -> None:
    file = replay(tmp_path, xml_call("move_to_trash", path="Documents/a.txt"), "Done.")
    run = botpsy(profile, "ask", "--replay", file, "--approve", "deny", "--json", "trash a.txt")
    conversation = json.loads(run.stdout)["conversation_id"]
    shown = botpsy(profile, "history", conversation)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any(
        line.startswith("[tool move_to_trash: not approved, not carried out]") for line in lines
    )
    assert f"[note] {NOTE}" in lines
