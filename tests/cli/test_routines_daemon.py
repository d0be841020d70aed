"""`botpsy daemon` runs routines on a replay backend: missed ones reported, approvals stored and
given up on when nobody answers in time."""

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
from botpsy_desktop.agent.store import ConversationStore

PARIS = ZoneInfo("Europe/Paris")
ROOT = Path(__file__).resolve().parents[2]
REQUEST = "Cancel all my alarms"


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {
        "files": {"roots": [str(tmp_path)]},
        "alarms": {"time_zone": "Europe/Paris"},
        "agent": {"background_approval_timeout_s": 1},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


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


def seed(profile: Path, *, due_in: float) -> tuple[int, int]:
    """A routine missed two hours ago and one due in ``due_in`` seconds; their ids."""
    db = profile / "data" / "alarms.sqlite3"
    past = datetime.now(UTC) - timedelta(hours=2)
    then = AlarmService(db, tz=PARIS, now=lambda: past)
    old = then.add(AlarmKind.ROUTINE, past + timedelta(minutes=1), label="Old request")
    then.shutdown()
    now = AlarmService(db, tz=PARIS)
    new = now.add(AlarmKind.ROUTINE, datetime.now(UTC) + timedelta(seconds=due_in), label=REQUEST)
    now.shutdown()
    return old.id, new.id


def daemon(profile: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), "daemon", *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # no notifications on the session of whoever runs the tests
        env={**os.environ, "PYTHONUNBUFFERED": "1", "DBUS_SESSION_BUS_ADDRESS": ""},
    )


def stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return proc.returncode, err


def test_the_daemon_runs_a_routine_and_gives_up_on_its_approval_after_the_timeout(
    profile: Path, tmp_path: Path
) -> None:
    turns = [  # cancelling always asks (a timer would just be set: it can be undone)
        "<tool_call>\n<function=cancel_alarm>\n<parameter=alarm>\nall\n</parameter>\n"
        "</function>\n</tool_call>",
        "never asked for: a run nobody approved in time ends without the model",
    ]
    replay = tmp_path / "routine.json"
    replay.write_text(json.dumps(turns), encoding="utf-8")
    old_id, new_id = seed(profile, due_in=2.0)
    proc = daemon(profile, "--replay", str(replay), "--json")
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        events: list[dict[str, Any]] = [json.loads(lines.next(timeout=30)) for _ in range(5)]
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert "Traceback" not in err
    assert "wait up to 1 s (agent.background_approval_timeout_s)" in err
    missed, running, approval, denied, finished = events
    assert missed["event"] == "missed" and missed["kind"] == "routine"
    assert missed["id"] == old_id and missed["label"] == "Old request"  # reported, not run
    assert running["event"] == "running" and running["id"] == new_id
    assert running["label"] == REQUEST
    assert approval["event"] == "routine_approval" and approval["id"] == new_id
    assert approval["tool"] == "cancel_alarm" and approval["arguments"] == {"alarm": "all"}
    assert approval["waits_s"] == 1 and approval["approval"] == 1
    # the receipt names what "all" selects (the gate decides from the resolved effect): here
    # the one routine there is, cancelled for good
    assert approval["receipt"].startswith("Cancel alarm 1 (routine")
    assert "for good" in approval["receipt"]
    assert denied == {
        "event": "routine_denied",
        "id": new_id,
        "tool": "cancel_alarm",
        "by": "nobody in time",
    }
    assert finished["event"] == "routine_finished" and finished["state"] == "done"
    assert finished["answer"] == (
        "I did not do it: cancel_alarm waited 1 s for your approval and nobody answered, so "
        "nothing was run. Ask again when you are back."
    )
    assert finished["denied"] == ["cancel_alarm"]

    store = ConversationStore(profile / "data" / "conversations.sqlite3")
    try:
        assert store.title(finished["conversation"]) == f"Routine: {REQUEST}"
        assert store.messages(finished["conversation"])[0]["content"] == REQUEST
    finally:
        store.close()
    alarms = AlarmService(profile / "data" / "alarms.sqlite3", tz=PARIS)
    try:
        kinds = [(a.kind, a.status) for a in alarms.alarms()]
    finally:
        alarms.shutdown()
    assert kinds == [(AlarmKind.ROUTINE, "missed")]  # nothing was cancelled; the run is done


def test_without_a_model_the_daemon_says_the_routine_did_not_run(profile: Path) -> None:
    _, new_id = seed(profile, due_in=1.0)
    proc = daemon(profile)
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        got = [lines.next(timeout=30) for _ in range(3)]
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert got[0].startswith("missed: routine 1 'Old request' was due ")
    assert got[1].startswith(f"running: routine {new_id} {REQUEST!r} (due ")
    assert got[2] == (
        f"routine {new_id}: not run, no model is set up (set model.path with "
        "`botpsy model use`, or start the daemon with --model or --replay)"
    )


def test_the_model_is_loaded_only_when_a_routine_is_due(profile: Path, tmp_path: Path) -> None:
    # a file that is not a GGUF: the daemon starts and rings alarms; only the due routine fails
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not a gguf file")
    _, new_id = seed(profile, due_in=2.0)
    proc = daemon(profile, "--model", str(broken))
    try:
        assert proc.stdout is not None and proc.stderr is not None
        started = proc.stderr.readline()
        lines = Lines(proc.stdout)
        got = [lines.next(timeout=30) for _ in range(4)]
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert f"routines run on {broken} (loaded when the first one is due)" in started
    assert got[1].startswith(f"running: routine {new_id} {REQUEST!r}")
    assert got[2].startswith("routines: the model did not load: ")
    assert "broken.gguf" in got[2]
    assert got[3].startswith(f"routine {new_id}: No model is loaded yet.")


def test_a_routine_waiting_for_approval_does_not_hold_up_the_next_one(
    profile: Path, tmp_path: Path
) -> None:
    # the first routine's cancellation waits for an approval nobody gives;
    # it is parked, so the second routine runs and finishes before the first gives up
    config_file = profile / "config" / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["agent"]["background_approval_timeout_s"] = 6
    config_file.write_text(json.dumps(config), encoding="utf-8")
    turns = [
        "<tool_call>\n<function=cancel_alarm>\n<parameter=alarm>\nall\n</parameter>\n"
        "</function>\n</tool_call>",
        "<tool_call>\n<function=list_alarms>\n</function>\n</tool_call>",
        "You have an alarm and two routines.",
    ]
    replay = tmp_path / "routines.json"
    replay.write_text(json.dumps(turns), encoding="utf-8")
    db = profile / "data" / "alarms.sqlite3"
    service = AlarmService(db, tz=PARIS)
    soon = datetime.now(UTC) + timedelta(seconds=2)
    first = service.add(AlarmKind.ROUTINE, soon, label="Cancel all my alarms")
    second = service.add(AlarmKind.ROUTINE, soon + timedelta(seconds=0.5), label="List alarms")
    wake = service.add(AlarmKind.ALARM, soon + timedelta(hours=8), label="Wake up")
    service.shutdown()
    proc = daemon(profile, "--replay", str(replay), "--json")
    events: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        lines = Lines(proc.stdout)
        while sum(e["event"] == "routine_finished" for e in events) < 2:
            events.append(json.loads(lines.next(timeout=30)))
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert "Traceback" not in err
    routine_events = [(e["event"], e["id"]) for e in events if e["event"] != "running"]
    assert routine_events == [
        ("routine_approval", first.id),
        ("routine_finished", second.id),  # ran while the first one waited
        ("routine_denied", first.id),
        ("routine_finished", first.id),
    ]
    done = {e["id"]: e for e in events if e["event"] == "routine_finished"}
    assert done[second.id]["answer"] == "You have an alarm and two routines."
    assert done[second.id]["denied"] == []
    assert done[first.id]["denied"] == ["cancel_alarm"]
    assert done[first.id]["answer"].startswith("I did not do it: cancel_alarm waited 6 s")
    alarms = AlarmService(db, tz=PARIS)
    try:
        assert [a.id for a in alarms.alarms()] == [wake.id]  # nothing was cancelled
    finally:
        alarms.shutdown()
