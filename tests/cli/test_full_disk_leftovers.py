"""What a full disk leaves behind, through the real CLI (RLIMIT_FSIZE: every write past a size
fails, as on a full disk): a note written but not confirmed in the audit log is undone from the
file-change log's record of it; an entry for a note never written does not block a plain
`botpsy undo`; and `botpsy ask --json` reports every call that ran."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.agent.store import UNCONFIRMED
from tests.cli.test_faults import (
    WAL_FRAME,
    WAL_HEADER,
    _prepared,
    actions,
    alarms_rows,
    botpsy,
    no_traceback,
    replay,
)
from tests.helpers.replay import xml_call

Run = tuple[subprocess.CompletedProcess[str], Path, Path]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "files"
    (folder / "Notes").mkdir(parents=True)
    return folder


@pytest.fixture
def home(tmp_path: Path, files: Path) -> Path:
    """A profile as tests/cli/test_faults.py makes one."""
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (home / "data").mkdir(parents=True)
    config = {
        "files": {"roots": [str(files)]},
        "music": {"folders": [], "player": "none"},
        "calendar": {"time_zone": "UTC"},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def sweep(
    home: Path, files: Path, tmp_path: Path, note_path: str, stop: Callable[[Run], bool]
) -> list[Run]:
    """`botpsy ask --json` writing ``note_path`` on copies of the profile, its database writes
    failing from the k-th WAL frame on, for k = 8, 9, ... until ``stop`` says enough."""
    _prepared(home, tmp_path)
    turns = replay(
        tmp_path, xml_call("write_text_note", path=note_path, text="the plan"), "Written.",
        name="note.json",
    )  # fmt: skip

    def attempt(frames: int) -> Run:
        run_home, run_files = tmp_path / f"p{frames}", tmp_path / f"f{frames}"
        shutil.copytree(home, run_home)
        shutil.copytree(files, run_files)
        config = {"files": {"roots": [str(run_files)]}, "music": {"folders": [], "player": "none"}}
        (run_home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
        run = botpsy(
            run_home, "ask", "--json", "--replay", turns, "--approve", "all", "write the plan",
            file_size_limit=WAL_HEADER + frames * WAL_FRAME,
        )  # fmt: skip
        no_traceback(run)
        return run, run_home, run_files

    runs: list[Run] = []
    frames = 8
    with ThreadPoolExecutor(max_workers=3) as pool:
        while not any(stop(r) for r in runs):
            assert frames < 80, [r[0].stderr[-300:] for r in runs]
            runs += list(pool.map(attempt, range(frames, frames + 3)))
            frames += 3
    return runs


def note_entries(run_home: Path) -> list[dict[str, Any]]:
    return [e for e in actions(run_home) if e["tool"] == "write_text_note"]


def test_every_call_that_ran_is_reported_and_an_unconfirmed_note_is_undone(
    home: Path, files: Path, tmp_path: Path
) -> None:
    runs = sweep(
        home, files, tmp_path, "Notes/plan.md",
        lambda r: r[0].returncode == 0,  # until one is enough for the whole request
    )  # fmt: skip
    unconfirmed = []
    for run, run_home, run_files in runs:
        entries = note_entries(run_home)
        if not entries:
            continue  # the audit log could not record it first: it did not run
        # it ran: --json reports the call, whatever failed after it
        transcript = json.loads(run.stdout)
        names = [c["name"] for c in transcript["tool_calls"]]
        assert "write_text_note" in names, (run.returncode, run.stderr[-1500:])
        if entries[0]["result"] == UNCONFIRMED:
            assert (run_files / "Notes" / "plan.md").exists()
            unconfirmed.append((run_home, run_files))
    assert unconfirmed, [r[0].returncode for r in runs]
    run_home, run_files = unconfirmed[0]
    shown = botpsy(run_home, "log")
    assert "NOT CONFIRMED" in shown.stdout
    undo = botpsy(run_home, "undo", "--json")
    no_traceback(undo)
    assert undo.returncode == 0, undo.stderr
    assert json.loads(undo.stdout)["undone"]["tool"] == "write_text_note"
    assert not (run_files / "Notes" / "plan.md").exists()
    timer = next(e for e in actions(run_home) if e["tool"] == "set_timer")
    assert timer["undone_by"] is None and alarms_rows(run_home) == 1  # the older action stays
    [entry] = note_entries(run_home)
    assert entry["undone_by"] is not None  # the note's own entry names its undo
    again = botpsy(run_home, "log")
    assert "NOT CONFIRMED" not in again.stdout


def test_an_unconfirmed_entry_for_a_note_never_written_does_not_block_a_plain_undo(
    home: Path, files: Path, tmp_path: Path
) -> None:
    # the folder does not exist: the call fails and writes nothing; the disk is full when the
    # audit log would record that it failed
    runs = sweep(
        home, files, tmp_path, "Missing/plan.md",
        lambda r: any(not e["ok"] and e["result"] != UNCONFIRMED for e in note_entries(r[1])),
    )  # fmt: skip
    found = [(h, f) for _, h, f in runs if any(e["result"] == UNCONFIRMED for e in note_entries(h))]
    assert found, [r[0].stderr[-300:] for r in runs]
    run_home, run_files = found[0]
    assert not (run_files / "Missing").exists()
    undo = botpsy(run_home, "undo", "--json")
    no_traceback(undo)
    assert undo.returncode == 0, undo.stderr
    # the newest action that happened is the timer: a plain undo reaches it
    assert json.loads(undo.stdout)["undone"]["tool"] == "set_timer"
    assert alarms_rows(run_home) == 0
    [entry] = note_entries(run_home)
    assert entry["result"] != UNCONFIRMED and not entry["ok"]
    shown = botpsy(run_home, "log")
    assert "it never happened" in shown.stdout
