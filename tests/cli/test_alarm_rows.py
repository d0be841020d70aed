"""One unreadable row in the alarms database (a routine at `25:99`, days that are not weekdays,
a due time out of range or of the wrong type, an unknown kind) is skipped with a warning by
every reader, through the real CLI: the daemon rings the good alarm, `botpsy routines`,
`botpsy alarms` and `list_alarms` list the rest, doctor names the row, and it can be removed."""

from __future__ import annotations

import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any
from zoneinfo import ZoneInfo

import pytest

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from tests.helpers.replay import xml_call

PARIS = ZoneInfo("Europe/Paris")
ROOT = Path(__file__).resolve().parents[2]

SPOILS: list[tuple[str, dict[str, Any], str]] = [
    ("routine", {"time_of_day": "25:99", "days": "0123456"}, "time of day '25:99'"),
    ("alarm", {"days": "79x"}, "days '79x'"),
    ("reminder", {"due": 1e300}, "due 1e+300 is out of range"),
    ("timer", {"due": "soon"}, "due 'soon' is not a stored time"),
    ("alarm", {"kind": "gong"}, "kind 'gong' is unknown"),
]
"""Each bad row: the kind it is set as, the stored values that spoil it, what the warning says."""


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {"files": {"roots": [str(tmp_path)]}, "alarms": {"time_zone": "Europe/Paris"}}
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def botpsy(profile: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": ""},
    )


def seed(profile: Path, *, timer_in: float) -> tuple[int, int, list[int]]:
    """A good timer due in ``timer_in`` s, a good routine tomorrow, and the bad rows: ids."""
    db = profile / "data" / "alarms.sqlite3"
    now = datetime.now(UTC)
    service = AlarmService(db, tz=PARIS)
    try:
        length = timedelta(seconds=timer_in)
        timer = service.add(AlarmKind.TIMER, now + length, label="tea", duration=length)
        routine = service.add(AlarmKind.ROUTINE, now + timedelta(days=1), label="Check mail")
        bad = [
            service.add(AlarmKind(kind), now + timedelta(hours=2), label=f"bad {i}").id
            for i, (kind, _, _) in enumerate(SPOILS)
        ]
    finally:
        service.shutdown()
    with sqlite3.connect(db) as conn:
        for alarm_id, (_, values, _) in zip(bad, SPOILS, strict=True):
            for column, value in values.items():
                conn.execute(f"UPDATE alarms SET {column} = ? WHERE id = ?", (value, alarm_id))
    return timer.id, routine.id, bad


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


def test_the_daemon_rings_the_good_timer_with_bad_rows_present(profile: Path) -> None:
    timer, _, bad = seed(profile, timer_in=3.0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), "daemon"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "DBUS_SESSION_BUS_ADDRESS": ""},
    )
    try:
        assert proc.stdout is not None
        ringing = Lines(proc.stdout).next(timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
    assert ringing.startswith(f"ringing: timer {timer} 'tea' (due "), (ringing, err)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    for alarm_id, (_, _, problem) in zip(bad, SPOILS, strict=True):
        [line] = [x for x in err.splitlines() if f"entry {alarm_id} (" in x]
        assert problem in line and f"`botpsy alarms remove {alarm_id}`" in line, line
    assert "2 set to ring" in err  # the timer and the routine; the bad rows are not counted


def test_routines_alarms_and_list_alarms_show_the_rest_and_a_bad_row_is_removed(
    profile: Path, tmp_path: Path
) -> None:
    timer, routine, bad = seed(profile, timer_in=3600)
    listed = botpsy(profile, "routines")
    assert listed.returncode == 0, listed.stderr
    assert f"{routine}: Check mail" in listed.stdout
    assert f"entry {bad[0]} (routine 'bad 0')" in listed.stderr
    assert "time of day '25:99' is not a time" in listed.stderr
    assert "Traceback" not in listed.stderr

    everything = botpsy(profile, "alarms", "--json")
    assert everything.returncode == 0, everything.stderr
    rows = {item["id"]: item for item in json.loads(everything.stdout)}
    assert rows[timer]["kind"] == "timer" and rows[routine]["kind"] == "routine"
    for alarm_id, (_, _, problem) in zip(bad, SPOILS, strict=True):
        assert rows[alarm_id]["status"] == "unreadable" and problem in rows[alarm_id]["problem"]

    script = tmp_path / "list.json"
    script.write_text(json.dumps([xml_call("list_alarms"), "Two."]), encoding="utf-8")
    asked = botpsy(profile, "ask", "--replay", str(script), "--json", "my alarms?")
    assert asked.returncode == 0, asked.stderr
    result = json.loads(json.loads(asked.stdout)["tool_calls"][0]["result"])
    assert result["count"] == 2 and {a["id"] for a in result["alarms"]} == {timer, routine}
    assert all(str(i) in result["unreadable"] for i in bad)

    gone = botpsy(profile, "routines", "remove", str(bad[0]))
    assert gone.returncode == 0, gone.stderr
    assert f"Removed entry {bad[0]}, which could not be read" in gone.stdout
    for alarm_id in bad[1:]:
        removed = botpsy(profile, "alarms", "remove", str(alarm_id))
        assert removed.returncode == 0, removed.stderr
        assert f"Removed entry {alarm_id}" in removed.stdout
    after = botpsy(profile, "alarms", "--json")
    assert {item["id"] for item in json.loads(after.stdout)} == {timer, routine}
    assert "cannot be read" not in after.stderr


def test_doctor_names_each_bad_row_and_how_to_remove_it(profile: Path) -> None:
    _, _, bad = seed(profile, timer_in=3600)
    proc = botpsy(profile, "doctor", "--json", timeout=300)
    checks = json.loads(proc.stdout)
    entries = [c for c in checks if c["name"] == "alarm entry"]
    assert len(entries) == len(bad)
    for alarm_id, check in zip(bad, entries, strict=True):
        assert check["status"] == "fail" and f"entry {alarm_id} (" in check["detail"]
        assert f"botpsy alarms remove {alarm_id}" in check["hint"]
    assert proc.returncode == 1  # a failed check
    for alarm_id in bad:
        assert botpsy(profile, "alarms", "remove", str(alarm_id)).returncode == 0
    proc = botpsy(profile, "doctor", "--json", timeout=300)
    [ok] = [c for c in json.loads(proc.stdout) if c["name"] == "alarm entries"]
    assert ok["status"] == "ok"
