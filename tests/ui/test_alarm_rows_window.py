"""The window starts with an unreadable row in the alarms database, rings the good timer, and
names the bad row in its note above the chat (the real `botpsy-desktop`, offscreen)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from pytestqt.qtbot import QtBot

from botpsy_desktop.core.paths import Paths
from botpsy_desktop.ui.main import hand_over, instance_name
from tests.cli.test_alarm_rows import profile, seed

__all__ = ["profile"]
ROOT = Path(__file__).resolve().parents[2]


def test_the_window_starts_and_rings_the_good_timer_with_bad_rows_present(
    qtbot: QtBot, profile: Path
) -> None:
    timer, _, bad = seed(profile, timer_in=3.0)
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "DBUS_SESSION_BUS_ADDRESS": ""}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop.ui.main", "--home", str(profile)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    db = profile / "data" / "alarms.sqlite3"
    rang = False
    answered = False
    try:
        for _ in range(1200):  # up to two minutes on a loaded machine; ends at the ring
            if proc.poll() is not None:
                break
            with sqlite3.connect(db) as conn:
                (since,) = conn.execute(
                    "SELECT ringing_since FROM alarms WHERE id = ?", (timer,)
                ).fetchone()
            rang = since is not None
            answered = answered or hand_over(instance_name(Paths.resolve(profile)), "show")
            if rang and answered:
                break
            time.sleep(0.1)
        running = proc.poll() is None
    finally:
        proc.terminate()
        try:
            output, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    assert running, output
    assert answered and rang, output
    assert "Traceback" not in output
    with sqlite3.connect(db) as conn:  # nothing was deleted behind the person's back
        ids = {row[0] for row in conn.execute("SELECT id FROM alarms")}
    assert set(bad) <= ids
    logged = "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in sorted(profile.rglob("*.log*"))
    )
    for alarm_id in bad:  # each skipped row is named in the log, with the way to remove it
        assert f"`botpsy alarms remove {alarm_id}`" in logged, logged[-3000:]
