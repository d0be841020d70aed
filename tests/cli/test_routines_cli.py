"""`botpsy routines`: a routine is created with what happens when it is missed, listed, removed."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[2]


def botpsy(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_routines_are_added_with_their_catch_up_choice_listed_and_removed(tmp_path: Path) -> None:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {"alarms": {"time_zone": "Europe/Paris"}, "music": {"player": "none"}}
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    keen = botpsy(
        home,
        "routines",
        "add",
        "tomorrow 7:30",
        "What's the weather?",
        "--catch-up",
        "--repeat",
        "weekdays",
    )
    assert keen.returncode == 0, keen.stderr
    assert "runs once at the next start; routine 1)" in keen.stdout
    lazy = botpsy(home, "routines", "add", "tomorrow 8:00", "Read me the news", "--json")
    assert lazy.returncode == 0, lazy.stderr
    assert json.loads(lazy.stdout)["if_missed"] == "skip"

    listed = json.loads(botpsy(home, "routines", "list", "--json").stdout)
    # listed in the order they next run: on a Friday or Saturday "tomorrow 8:00, once" comes
    # before "tomorrow 7:30, weekdays", whose first run is then on Monday
    assert [r["at"] for r in listed] == sorted(r["at"] for r in listed)
    assert sorted((r["id"], r["request"], r["if_missed"], r["repeat"]) for r in listed) == [
        (1, "What's the weather?", "catch up", "weekdays (Mon-Fri)"),
        (2, "Read me the news", "skip", "once"),
    ]
    at = listed[[r["id"] for r in listed].index(1)]["at"]
    first_weekday_run = datetime.fromisoformat(at).astimezone(ZoneInfo("Europe/Paris"))
    assert first_weekday_run.weekday() < 5 and first_weekday_run.strftime("%H:%M") == "07:30"
    assert botpsy(home, "routines", "remove", "2").returncode == 0
    gone = botpsy(home, "routines", "remove", "2")
    assert gone.returncode == 1 and "There is no routine 2." in gone.stderr
    bad = botpsy(home, "routines", "add", "whenever", "x")
    assert bad.returncode == 1 and "Cannot read 'whenever' as a time." in bad.stderr
    text = botpsy(home, "routines").stdout
    assert text.startswith("1: What's the weather? — ") and "if missed: catch up" in text
