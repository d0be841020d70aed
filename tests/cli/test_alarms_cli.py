"""Alarms end to end: `botpsy ask --replay` sets real stored alarms; `botpsy daemon` rings them."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any
from zoneinfo import ZoneInfo

import pytest

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.cli import main
from tests.helpers.replay import xml_call

PARIS = ZoneInfo("Europe/Paris")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {"files": {"roots": [str(tmp_path)]}, "alarms": {"time_zone": "Europe/Paris"}}
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def replay(tmp_path: Path, name: str, *turns: str) -> str:
    f = tmp_path / name
    f.write_text(json.dumps(list(turns)), encoding="utf-8")
    return str(f)


def botpsy(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_ask_sets_a_real_alarm_that_a_second_process_lists(profile: Path, tmp_path: Path) -> None:
    set_it = replay(
        tmp_path,
        "set.json",
        xml_call("set_alarm", time="tomorrow at 7:30", label="Wake up"),
        "Your alarm is set for 7:30 tomorrow.",
    )
    proc = botpsy(
        "--home",
        str(profile),
        "ask",
        "--replay",
        set_it,
        "--json",
        "--approve",
        "all",
        "wake me at 7:30 tomorrow",
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    [tool_call] = data["tool_calls"]
    assert tool_call["name"] == "set_alarm" and tool_call["ok"], tool_call
    assert tool_call["decision"] == "allowed"  # asked for directly: runs at once
    result = json.loads(tool_call["result"])
    today = datetime.now(PARIS).date()
    tomorrow = today + timedelta(days=1)
    year = f" {tomorrow.year}" if tomorrow.year != today.year else ""  # said on 31 December
    expected_day = f"{tomorrow:%a} {tomorrow.day} {tomorrow:%b}{year} 07:30"
    assert result["summary"].startswith(f"Alarm set (Wake up): rings {expected_day} (in ")
    assert data["answer"] == "Your alarm is set for 7:30 tomorrow."
    assert (profile / "data" / "alarms.sqlite3").is_file()

    list_them = replay(
        tmp_path, "list.json", xml_call("list_alarms"), "You have one alarm, tomorrow at 7:30."
    )
    proc = botpsy("--home", str(profile), "ask", "--replay", list_them, "--json", "my alarms?")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(json.loads(proc.stdout)["tool_calls"][0]["result"])
    assert listed["count"] == 1 and listed["time_zone"] == "Europe/Paris"
    [alarm] = listed["alarms"]
    assert alarm["label"] == "Wake up" and alarm["status"] == "scheduled"
    assert datetime.fromisoformat(alarm["at"]) == datetime.combine(
        tomorrow, datetime.min.time().replace(hour=7, minute=30), PARIS
    )

    store = AlarmService(profile / "data" / "alarms.sqlite3", tz=PARIS)
    try:
        [stored] = store.alarms()
        assert stored.kind is AlarmKind.ALARM and stored.label == "Wake up"
    finally:
        store.shutdown()


def test_a_denied_alarm_is_not_set_and_ask_leaves_no_threads(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = set(threading.enumerate())
    # after reading the alarms (tool output in the context) a new timer asks
    file = replay(
        tmp_path,
        "deny.json",
        xml_call("list_alarms"),
        xml_call("set_timer", duration="10 minutes"),
        "Not set.",
    )
    code = main(
        ["--home", str(profile), "ask", "--replay", file, "--json", "--approve", "deny", "x"]
    )
    assert code == 0
    _, tool_call = json.loads(capsys.readouterr().out)["tool_calls"]
    assert tool_call["decision"] == "denied" and not tool_call["ok"]
    lister = replay(tmp_path, "list.json", xml_call("list_alarms"), "None.")
    assert main(["--home", str(profile), "ask", "--replay", lister, "--json", "list"]) == 0
    listed = json.loads(json.loads(capsys.readouterr().out)["tool_calls"][0]["result"])
    assert listed["count"] == 0
    extra = [t for t in set(threading.enumerate()) - before if t.is_alive() and not t.daemon]
    assert extra == []
    assert not any("APScheduler" in t.name for t in threading.enumerate())


def test_tools_json_lists_the_alarm_tools(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--home", str(profile), "tools", "--json"]) == 0
    tools = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert tools["list_alarms"]["effects"] == ["read"]
    assert not tools["list_alarms"]["needs_approval"] and tools["list_alarms"]["tier"] == "read"
    for name in ("set_alarm", "set_timer", "set_reminder", "snooze_alarm"):
        # a reversible change you ask for runs at once (with Undo): no approval, as the gate does
        assert tools[name]["effects"] == ["local-write"] and not tools[name]["needs_approval"]
        assert tools[name]["tier"] == "reversible"
    assert tools["cancel_alarm"]["needs_approval"]
    assert tools["cancel_alarm"]["effects"] == ["destructive", "local-write"]
    assert tools["cancel_alarm"]["tier"] == tools["set_routine"]["tier"] == "ask"
    assert "duration" in tools["set_timer"]["parameters"]["properties"]


class _Lines:
    """Reads a pipe on a thread so a test can wait for the next line with a timeout."""

    def __init__(self, pipe: IO[str]) -> None:
        self._q: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._q.put(line.rstrip("\n"))

    def next(self, timeout: float) -> str:
        return self._q.get(timeout=timeout)


def _seed(profile: Path, *, timer_in: float) -> None:
    """An alarm due two hours ago (missed while nothing ran) and a timer due in ``timer_in`` s."""
    db = profile / "data" / "alarms.sqlite3"
    past = datetime.now(UTC) - timedelta(hours=2)
    then = AlarmService(db, tz=PARIS, now=lambda: past)
    then.add(AlarmKind.ALARM, past + timedelta(minutes=1), label="Old")
    then.shutdown()
    now = AlarmService(db, tz=PARIS)
    length = timedelta(seconds=timer_in)
    now.add(AlarmKind.TIMER, datetime.now(UTC) + length, label="tea", duration=length)
    now.shutdown()


def _daemon(profile: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), "daemon", *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _stop(proc: subprocess.Popen[str], sig: int) -> tuple[int, str]:
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, err


def test_daemon_reports_missed_alarms_then_rings_and_stops_on_sigterm(profile: Path) -> None:
    _seed(profile, timer_in=1.0)
    proc = _daemon(profile)
    try:
        assert proc.stdout is not None
        lines = _Lines(proc.stdout)
        missed = lines.next(timeout=20)
        assert missed.startswith("missed: alarm 1 'Old' was due "), missed
        ringing = lines.next(timeout=10)
        assert ringing.startswith("ringing: timer 2 'tea' (due "), ringing
    finally:
        code, err = _stop(proc, signal.SIGTERM)
    assert code == 0, err
    assert "set to ring" in err and "botpsy daemon: stopped." in err
    assert "Traceback" not in err


def test_daemon_json_lines_and_ctrl_c(profile: Path) -> None:
    _seed(profile, timer_in=1.0)
    proc = _daemon(profile, "--json")
    try:
        assert proc.stdout is not None
        lines = _Lines(proc.stdout)
        events: list[dict[str, Any]] = [json.loads(lines.next(timeout=20)) for _ in range(2)]
    finally:
        code, err = _stop(proc, signal.SIGINT)
    assert code == 0, err
    missed, ringing = events
    assert missed["event"] == "missed" and missed["label"] == "Old" and missed["count"] == 1
    assert ringing["event"] == "ringing" and ringing["kind"] == "timer"
    assert ringing["label"] == "tea" and ringing["late_s"] < 30
    due = datetime.fromisoformat(ringing["due"])
    assert due.utcoffset() == datetime.now(PARIS).utcoffset()
    # the next start has nothing new to report
    store = AlarmService(profile / "data" / "alarms.sqlite3", tz=PARIS)
    try:
        assert store.start() == []
    finally:
        store.shutdown()
