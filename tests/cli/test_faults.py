"""Faults and bad input through the shipped CLI: every action logged or not done, every error true.

Each test drives ``python -m botpsy_desktop`` in a subprocess with replayed model output
(``--replay``), as a person would, and checks the side effects: files, alarms, the audit log,
the conversation database. A full disk is a real one for the process: ``RLIMIT_FSIZE`` makes
every write past a size fail with EFBIG, as ENOSPC does, with no root and no mount.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import zipfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.keyring_service import SecretService
from tests.helpers.radicale_server import Radicale
from tests.helpers.replay import xml_call
from tests.helpers.services import keyring_env, radicale, secret_service  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
WAL_HEADER, WAL_FRAME = 32, 24 + 4096
"""SQLite's WAL file: a 32-byte header, then one frame (24-byte header + page) per page written."""


_LIMITED = (
    "import os, resource, sys; n = int(sys.argv[1]); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])"
)
"""Runs the CLI with RLIMIT_FSIZE set (no preexec_fn: the tests start processes from threads)."""


def botpsy(
    home: Path,
    *args: str,
    stdin: str = "",
    file_size_limit: int | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """Run the shipped CLI on profile ``home``; ``file_size_limit`` makes every write that
    would grow a file past that many bytes fail (a disk that is full for this process)."""
    command = [sys.executable, "-m", "botpsy_desktop", "--home", str(home), *args]
    if file_size_limit is not None:
        command = [sys.executable, "-c", _LIMITED, str(file_size_limit), *command[1:]]
    return subprocess.run(
        command,
        input=stdin,
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
        timeout=timeout,
        check=False,
    )


def replay(folder: Path, *turns: str, name: str = "replay.json") -> str:
    file = folder / name
    file.write_text(json.dumps(list(turns)), encoding="utf-8")
    return str(file)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]


def audit(home: Path) -> list[dict[str, Any]]:
    """The audit log as `botpsy log --json` prints it, newest first."""
    shown = botpsy(home, "log", "--json", "--limit", "1000")
    assert shown.returncode == 0, shown.stderr
    entries: list[dict[str, Any]] = json.loads(shown.stdout)
    return entries


def alarms_rows(home: Path) -> int:
    file = home / "data" / "alarms.sqlite3"
    if not file.exists():
        return 0
    db = sqlite3.connect(f"{file.as_uri()}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM alarms").fetchone()[0])
    finally:
        db.close()


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "files"
    (folder / "Notes").mkdir(parents=True)
    return folder


@pytest.fixture
def home(tmp_path: Path, files: Path) -> Path:
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


# --- a file name that is not UTF-8 ---------------------------------------------------------------


def test_a_latin1_file_name_is_listed_stored_and_shown_and_chat_goes_on(
    home: Path, files: Path, tmp_path: Path
) -> None:
    old = files / "Old"
    old.mkdir()
    with open(os.fsencode(old) + b"/caf\xe9.txt", "wb") as f:  # an old Latin-1 name
        f.write(b"menu")
    (old / "plain.txt").write_text("x", encoding="utf-8")
    turns = replay(
        tmp_path,
        xml_call("list_folder", path="Old"),
        "Two files.",
        xml_call("read_text_file", path="Old/caf\\xe9.txt"),  # the name as it was shown
        "It says menu.",
        "Hello again.",
    )
    said = "what is in Old?\nread the first\nhello\n/quit\n"
    chat = botpsy(home, "chat", "--replay", turns, stdin=said)
    no_traceback(chat)
    assert chat.returncode == 0, chat.stderr
    assert "caf\\xe9.txt" in chat.stderr  # shown readably, byte for byte
    assert "disk space" not in chat.stderr
    assert "Two files." in chat.stdout and "Hello again." in chat.stdout  # chat went on
    assert '"text":"menu' in chat.stderr.replace(" ", "")  # the file is read by that name
    conversation = chat.stderr.rsplit("Conversation saved as ", 1)[1].split(".")[0]
    shown = botpsy(home, "history", conversation)
    assert shown.returncode == 0, shown.stderr
    assert "caf\\xe9.txt" in shown.stdout and "Hello again." in shown.stdout
    # the database is not left locked: the next request to the conversation is saved
    again = botpsy(
        home, "ask", "--replay", replay(tmp_path, "Still here.", name="r2.json"),
        "--conversation", conversation, "still there?",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "Still here." in again.stdout


# --- a damaged page in the conversation database -------------------------------------------------


def damage_messages_page(database: Path) -> None:
    """Overwrite the first page of the messages table's b-tree (a page in the middle)."""
    db = sqlite3.connect(database)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = int(db.execute("PRAGMA page_size").fetchone()[0])
        root = int(
            db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
        )
        pages = int(db.execute("PRAGMA page_count").fetchone()[0])
    finally:
        db.close()
    assert 1 < root < pages, (root, pages)
    with open(database, "r+b") as f:
        f.seek((root - 1) * page)
        f.write(b"\x0d\xff\xff\xff\xff\x00\x00\x00" * 64)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_damaged_database_is_found_on_open_and_never_written(home: Path, tmp_path: Path) -> None:
    first = botpsy(home, "ask", "--replay", replay(tmp_path, "Hello."), "hi")
    assert first.returncode == 0, first.stderr
    database = home / "data" / "conversations.sqlite3"
    # the request was backed up; without that copy (lost, say) the advice must still be true
    made = list((home / "data").glob("conversations.backup-*.sqlite3"))
    assert len(made) == 1
    made[0].unlink()
    damage_messages_page(database)
    before = digest(database)
    timer = replay(tmp_path, xml_call("set_timer", duration="10 minutes"), "Set.", name="t.json")
    asked = botpsy(home, "ask", "--replay", timer, "--approve", "all", "a timer for 10 minutes")
    no_traceback(asked)
    assert asked.returncode == 1
    assert "is damaged" in asked.stderr, asked.stderr
    assert "disk space" not in asked.stderr
    # no backup exists yet: the advice is to move the file away, not to restore
    assert "There is no backup" in asked.stderr and "db restore" not in asked.stderr
    assert alarms_rows(home) == 0  # nothing was done
    assert digest(database) == before  # and nothing was written into the damaged file
    assert not Path(f"{database}-wal").exists() or Path(f"{database}-wal").stat().st_size == 0

    log = botpsy(home, "log")
    no_traceback(log)
    assert "is damaged" in log.stderr  # what can be read is shown, the damage said first

    doctor = botpsy(home, "doctor")
    no_traceback(doctor)
    assert doctor.returncode == 1
    assert "[FAIL] conversations" in doctor.stdout and "is damaged" in doctor.stdout
    assert "[FAIL] database integrity" in doctor.stdout
    assert "tools:" in doctor.stdout and "logs:" in doctor.stdout  # the whole report
    assert "db restore" not in doctor.stdout
    bundle = tmp_path / "report.zip"
    bundled = botpsy(home, "doctor", "--bundle", str(bundle))
    no_traceback(bundled)
    assert bundle.is_file()
    with zipfile.ZipFile(bundle) as z:
        assert any(n.endswith(".json") for n in z.namelist())
    assert digest(database) == before


def test_a_recent_backup_is_kept_and_restored(home: Path, tmp_path: Path) -> None:
    assert botpsy(home, "ask", "--replay", replay(tmp_path, "Hello."), "hi").returncode == 0
    assert botpsy(home, "log").returncode == 0  # an open of a database with history backs it up
    database = home / "data" / "conversations.sqlite3"
    backups = list((home / "data").glob("conversations.backup-*.sqlite3"))
    assert len(backups) == 1
    damage_messages_page(database)
    asked = botpsy(home, "ask", "--replay", replay(tmp_path, "Hi.", name="r2.json"), "hi again")
    assert asked.returncode == 1
    assert "botpsy db restore conversations.sqlite3" in asked.stderr, asked.stderr
    restored = botpsy(home, "db", "restore", "conversations.sqlite3")
    assert restored.returncode == 0, restored.stderr
    asked = botpsy(home, "ask", "--replay", replay(tmp_path, "Back.", name="r3.json"), "again")
    assert asked.returncode == 0, asked.stderr
    assert "Back." in asked.stdout
    listed = botpsy(home, "history")
    assert listed.stdout.count("messages") == 2  # the backed-up conversation and the new one


# --- a full disk in the middle of a request ------------------------------------------------------


def _prepared(home: Path, tmp_path: Path) -> None:
    """A profile with an older action (a timer) in its audit log."""
    timer = replay(tmp_path, xml_call("set_timer", duration="2 hours"), "Set.", name="t.json")
    done = botpsy(home, "ask", "--replay", timer, "--approve", "all", "a timer")
    assert done.returncode == 0, done.stderr
    [entry] = audit(home)
    assert entry["tool"] == "set_timer" and entry["ok"]


def _note_run(home: Path, tmp_path: Path, limit: int | None) -> subprocess.CompletedProcess[str]:
    turns = replay(
        tmp_path,
        xml_call("write_text_note", path="Notes/plan.md", text="the plan"),
        "Written.",
        name="note.json",
    )
    return botpsy(
        home, "ask", "--replay", turns, "--approve", "all", "write the plan", file_size_limit=limit
    )


def actions(home: Path) -> list[dict[str, Any]]:
    """The audit log read straight from the database (read-only), newest first."""
    db = sqlite3.connect(f"{(home / 'data' / 'conversations.sqlite3').as_uri()}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT id, tool, ok, result, undone_by FROM actions ORDER BY id DESC")
        keys = ("id", "tool", "ok", "result", "undone_by")
        return [dict(zip(keys, row, strict=True)) for row in rows]
    finally:
        db.close()


def _outcome(home: Path, files: Path, run: subprocess.CompletedProcess[str]) -> str:
    """The invariants after a request that may have hit a full disk; returns what happened."""
    no_traceback(run)
    note = files / "Notes" / "plan.md"
    entries = [e for e in actions(home) if e["tool"] == "write_text_note"]
    assert len(entries) <= 1
    # the action and its audit entry exist together, or neither does
    assert note.exists() == bool(entries), (run.returncode, run.stderr[-2000:])
    if run.returncode != 0:
        assert "disk" in run.stderr and "Write a shorter request" not in run.stderr, run.stderr
    log = home / "data" / "files-actions.jsonl"
    for line in log.read_text("utf-8").splitlines() if log.exists() else []:
        if line.strip():  # no half-written line: each entry is whole and on its own line
            json.loads(line)
    if not entries:
        return "nothing"
    if entries[0]["ok"]:
        return "done" if run.returncode == 0 else "done, then stopped"
    assert "never recorded" in entries[0]["result"]
    return "unconfirmed"


def _undo_after(home: Path, files: Path, outcome: str) -> None:
    """`botpsy undo` removes the note (an entry left unconfirmed is settled from the
    file-change log first), never the older timer in place of the note."""
    note = files / "Notes" / "plan.md"
    undo = botpsy(home, "undo", "--json")
    no_traceback(undo)
    timer = next(e for e in actions(home) if e["tool"] == "set_timer")
    assert timer["undone_by"] is None and alarms_rows(home) == 1
    # an entry left unconfirmed is settled from the file-change log, which holds the note
    assert undo.returncode == 0, (outcome, undo.stderr)
    assert json.loads(undo.stdout)["undone"]["tool"] == "write_text_note"
    assert not note.exists()


def test_a_full_disk_at_every_point_of_a_request_leaves_no_action_unlogged(
    home: Path, files: Path, tmp_path: Path
) -> None:
    """The request's database writes fail from its k-th WAL frame on, for each k until one is
    enough for the whole request: each run ends with the note and its audit entry both there
    or both absent, a whole file-change log, and an undo that reverses the note or nothing."""
    _prepared(home, tmp_path)
    files_before = tmp_path / "files-before"
    shutil.copytree(files, files_before)
    profile_before = tmp_path / "profile-before"
    shutil.copytree(home, profile_before)

    def attempt(frames: int) -> tuple[int, str, Path, Path]:
        run_home, run_files = tmp_path / f"p{frames}", tmp_path / f"f{frames}"
        shutil.copytree(profile_before, run_home)
        shutil.copytree(files_before, run_files)
        config = {"files": {"roots": [str(run_files)]}, "music": {"folders": [], "player": "none"}}
        (run_home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
        run = _note_run(run_home, tmp_path, WAL_HEADER + frames * WAL_FRAME)
        return frames, _outcome(run_home, run_files, run), run_home, run_files

    # 8 frames: the first limit over the 32 KiB shared-memory file SQLite needs to open at all
    seen: dict[int, tuple[str, Path, Path]] = {}
    frames = 8
    with ThreadPoolExecutor(max_workers=3) as pool:
        while "done" not in {outcome for outcome, _, _ in seen.values()}:
            assert frames < 80, seen  # a request needs a few dozen frames
            for k, outcome, run_home, run_files in pool.map(attempt, range(frames, frames + 3)):
                seen[k] = (outcome, run_home, run_files)
            frames += 3
    outcomes = [seen[k][0] for k in sorted(seen)]
    assert {"nothing", "unconfirmed", "done"} <= set(outcomes), outcomes
    # the undo of each kind of ending: the first run that ended unconfirmed, and one that did it
    for wanted in ("unconfirmed", "done, then stopped", "done"):
        for k in sorted(seen):
            if seen[k][0] == wanted:
                _undo_after(seen[k][1], seen[k][2], wanted)
                break


# --- concurrency ---------------------------------------------------------------------------------


def test_eight_undos_at_once_undo_each_action_once(home: Path, files: Path, tmp_path: Path) -> None:
    names = [f"Trip {i}" for i in range(1, 6)]
    turn = "\n".join(xml_call("create_folder", path=f"Notes/{n}") for n in names)
    made = botpsy(
        home, "ask", "--replay", replay(tmp_path, turn, "Made."), "--approve", "all", "folders"
    )
    assert made.returncode == 0, made.stderr
    assert all((files / "Notes" / n).is_dir() for n in names)
    with ThreadPoolExecutor(max_workers=8) as pool:
        runs = list(pool.map(lambda _: botpsy(home, "undo", "--json"), range(8)))
    for run in runs:
        no_traceback(run)
        assert run.returncode == 0 or (
            "undone already" in run.stderr or "no action left" in run.stderr
        ), run.stderr
    undone = [json.loads(r.stdout)["undone"]["id"] for r in runs if r.returncode == 0]
    assert len(undone) == len(set(undone))  # no action reported undone twice
    entries = actions(home)
    undos = [e for e in entries if e["tool"] == "undo_last_file_change"]
    assert len(undos) == len(undone)  # each success is one entry in the log
    left = [n for n in names if (files / "Notes" / n).exists()]
    assert len(left) == 5 - len(undone)  # and one folder removed per success, no more
    # the folders still there are the oldest ones: undone newest first, each exactly once
    assert left == names[: len(left)]
    done = {e["id"] for e in entries if e["tool"] == "create_folder" and e["undone_by"]}
    assert done == set(undone)


def test_five_requests_to_one_conversation_at_once_do_not_interleave(
    home: Path, tmp_path: Path
) -> None:
    from tests.helpers.hanging_servers import hanging_server

    first = botpsy(home, "ask", "--replay", replay(tmp_path, "Hello."), "hi")
    assert first.returncode == 0, first.stderr
    conversation = botpsy(home, "history").stdout.split()[0]
    with hanging_server("silent") as server:  # each request's tool waits 2 s for the weather
        config = json.loads((home / "config" / "config.json").read_text("utf-8"))
        config["weather"] = {
            "geocoding_url": f"{server.base}/v1/search",
            "forecast_url": f"{server.base}/v1/forecast",
            "timeout_s": 30,
        }
        config["agent"] = {"tool_timeouts": {"weather": 2}}
        (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")

        def ask(i: int) -> subprocess.CompletedProcess[str]:
            turns = replay(
                tmp_path,
                xml_call("get_weather", place=f"Town{i}"),
                f"Answer {i}.",
                name=f"{i}.json",
            )
            return botpsy(home, "ask", "--replay", turns, "--conversation", conversation, f"Q{i}")

        with ThreadPoolExecutor(max_workers=5) as pool:
            runs = list(pool.map(ask, range(5)))
    for i, run in enumerate(runs):
        assert run.returncode == 0, run.stderr
        assert f"Answer {i}." in run.stdout
    shown = botpsy(home, "history", conversation, "--json")
    messages = json.loads(shown.stdout)
    # each request's messages together, in order: its question, the call, the result, the answer
    turns = [m for m in messages if m["role"] == "user"]
    assert len(turns) == 6
    for start in range(2, len(messages), 4):
        question, call, result, answer = messages[start : start + 4]
        i = question["content"][1:]
        assert question["role"] == "user" and question["content"] == f"Q{i}"
        assert f"Town{i}" in json.dumps(call["tool_calls"])
        assert result["role"] == "tool"
        assert answer["content"] == f"Answer {i}."


# --- a calendar event that repeats every second --------------------------------------------------


def _ics(uid: str, summary: str, start: datetime, rule: str | None) -> str:
    repeat = f"RRULE:{rule}\n" if rule else ""
    return (
        "BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//test//EN\nBEGIN:VEVENT\n"
        f"UID:{uid}\nDTSTAMP:20250101T000000Z\nDTSTART:{start:%Y%m%dT%H%M%SZ}\n"
        f"DURATION:PT30M\nSUMMARY:{summary}\n{repeat}END:VEVENT\nEND:VCALENDAR\n"
    )


def test_an_event_repeating_every_second_is_not_expanded_but_named(
    home: Path,
    tmp_path: Path,
    radicale: Radicale,  # noqa: F811
    keyring_env: SecretService,  # noqa: F811
) -> None:
    from botpsy_desktop.core.accounts import AccountBook, CalDAVAccount
    from botpsy_desktop.core.secrets import SecretStore

    user, password = radicale.new_user()
    theirs = radicale.client(user).principal().make_calendar(name="Personal")
    AccountBook(home / "config" / "accounts.json").add(
        CalDAVAccount(name="cloud", url=radicale.url, username=user)
    )
    SecretStore().set("cloud", password)
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    theirs.add_event(_ics("tick", "Tick", midnight - timedelta(days=1), "FREQ=SECONDLY"))
    theirs.add_event(_ics("lunch", "Lunch", midnight + timedelta(hours=12), None))
    # (Radicale itself expands the rule to answer a time-range query: about 25 s for a day
    # and minutes for a week here; the client's part is what is bounded)
    _lists_without_expanding(home, tmp_path, "today")


def _lists_without_expanding(home: Path, tmp_path: Path, when: str) -> None:
    turns = replay(tmp_path, xml_call("list_events", when=when), "Listed.", name="c.json")
    asked = botpsy(home, "ask", "--replay", turns, "--json", f"what is on {when}?")
    no_traceback(asked)
    assert asked.returncode == 0, asked.stderr
    [call] = json.loads(asked.stdout)["tool_calls"]
    assert call["ok"], call
    assert "Lunch" in call["result"]
    assert "repeats secondly" in call["result"] and "too many to list" in call["result"]
    assert call["result"].count("Tick") == 1  # named once in the note, never expanded


def test_a_local_event_repeating_every_second_is_not_expanded_for_a_week(
    home: Path, tmp_path: Path
) -> None:
    folder = home / "data" / "calendar"
    folder.mkdir(parents=True)
    midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    (folder / "tick.ics").write_text(
        _ics("tick", "Tick", midnight - timedelta(days=400), "FREQ=SECONDLY")
    )
    (folder / "lunch.ics").write_text(_ics("lunch", "Lunch", midnight + timedelta(days=1), None))
    _lists_without_expanding(home, tmp_path, "next 7 days")


def test_a_calendar_call_past_its_time_limit_stops(tmp_path: Path) -> None:
    """Through the composition root: the call is abandoned at its limit and its thread, told
    to stop, ends instead of reading on through objects that take seconds each."""
    from botpsy_desktop.agent.events import ToolResult
    from botpsy_desktop.app import build_app
    from botpsy_desktop.llm.engines.replay import ReplayBackend

    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {"agent": {"tool_timeouts": {"calendar": 1}}, "music": {"folders": []}}
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    folder = home / "data" / "calendar"
    folder.mkdir(parents=True)
    # hourly for twenty years: ~175,000 steps to expand each (seconds of work apiece)
    start = datetime(2006, 1, 1, 9, tzinfo=UTC)
    for i in range(100):
        (folder / f"e{i}.ics").write_text(_ics(f"e{i}", f"Ping {i}", start, "FREQ=HOURLY"))
    app = build_app(home)
    try:
        session = app.session(ReplayBackend([xml_call("list_events", when="today"), "Slow."]))
        events = list(session.run("what is on today?"))
        [result] = [e for e in events if isinstance(e, ToolResult)]
        assert "did not finish within 1 s" in result.output, result.output
        workers = [t for t in threading.enumerate() if t.name == "tool-list_events"]
        for worker in workers:
            worker.join(timeout=60)  # unstopped, it would run on for minutes
            assert not worker.is_alive()
    finally:
        app.close()


# --- a damaged model file ------------------------------------------------------------------------


def test_a_damaged_model_is_refused_by_import_doctor_and_ask(home: Path, tmp_path: Path) -> None:
    from tests.llm.test_gguf_info import damaged_files

    for kind, file in damaged_files(tmp_path).items():
        imported = botpsy(home, "model", "import", str(file))
        no_traceback(imported)
        assert imported.returncode == 1, (kind, imported.stdout)
        assert "is damaged" in imported.stderr and "interrupted" not in imported.stderr, kind
        if kind != "no layers":  # each kind once through import; doctor and ask with one
            continue
        doctor = botpsy(home, "doctor", "--model", str(file))
        no_traceback(doctor)
        assert "[FAIL] model" in doctor.stdout and "is damaged" in doctor.stdout, kind
        asked = botpsy(home, "ask", "--model", str(file), "hello")
        no_traceback(asked)
        assert asked.returncode == 1 and "is damaged" in asked.stderr, (kind, asked.stderr)
    listed = botpsy(home, "model", "list")
    assert "damaged-model" not in listed.stdout  # nothing was added or made active


# --- smaller faults ------------------------------------------------------------------------------


def test_the_calls_of_one_model_turn_are_capped(home: Path, files: Path, tmp_path: Path) -> None:
    turn = "\n".join(xml_call("create_folder", path=f"Notes/F{i}") for i in range(40))
    asked = botpsy(
        home, "ask", "--replay", replay(tmp_path, turn, "Made."), "--approve", "all", "--json", "go"
    )
    assert asked.returncode == 0, asked.stderr
    calls = json.loads(asked.stdout)["tool_calls"]
    assert len(calls) == 16
    assert "the other 24 were not run" in calls[-1]["result"]
    assert sorted(p.name for p in (files / "Notes").iterdir()) == sorted(f"F{i}" for i in range(16))
    assert len([e for e in actions(home) if e["tool"] == "create_folder"]) == 16


def test_a_broken_accounts_file_is_reported(home: Path, tmp_path: Path) -> None:
    (home / "config" / "accounts.json").write_text("[{not json", encoding="utf-8")
    asked = botpsy(home, "ask", "--replay", replay(tmp_path, "Hi."), "hi")
    assert asked.returncode == 0
    assert "calendar and mail are off" in asked.stderr and "accounts file" in asked.stderr
    doctor = botpsy(home, "doctor")
    no_traceback(doctor)
    assert "[FAIL] accounts" in doctor.stdout


def test_a_deeply_nested_config_is_a_clear_error(home: Path, tmp_path: Path) -> None:
    (home / "config" / "config.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    for args in (["doctor"], ["ask", "--replay", replay(tmp_path, "Hi."), "hi"]):
        run = botpsy(home, *args)
        no_traceback(run)
        assert run.returncode == 1
        assert "nested too deeply" in run.stderr and "RecursionError" not in run.stderr


def test_control_characters_in_names_are_shown_escaped(
    home: Path, files: Path, tmp_path: Path
) -> None:
    # "report\u202etxt.exe" looks like "reportexe.txt" on a terminal that obeys the override
    (files / "Notes" / "report\u202etxt.exe").write_text("x", encoding="utf-8")
    (files / "Notes" / "bell\x07.txt").write_text("x", encoding="utf-8")
    turns = replay(tmp_path, xml_call("list_folder", path="Notes"), "Two files.")
    asked = botpsy(home, "ask", "--replay", turns, "what is in Notes?")
    assert asked.returncode == 0, asked.stderr
    shown = asked.stdout + asked.stderr
    assert "\u202e" not in shown and "\x07" not in shown
    assert "report\\u202etxt.exe" in shown and "bell\\u0007.txt" in shown
    listed = botpsy(home, "history", botpsy(home, "history").stdout.split()[0])
    assert "\u202e" not in listed.stdout and "report\\u202etxt.exe" in listed.stdout


def test_a_context_filled_by_tool_results_does_not_blame_the_request(
    home: Path, files: Path, tmp_path: Path
) -> None:
    (files / "big.txt").write_text("word " * 2000, encoding="utf-8")
    config = json.loads((home / "config" / "config.json").read_text("utf-8"))
    config["model"] = {"n_ctx": 9000, "max_tokens": 256}  # every tool: ~7.9k tokens
    # every tool in the prompt (about 7,900 tokens), whatever the selection makes of the words:
    # the request fits, sixteen file reads do not
    config.setdefault("agent", {})["tool_selection"] = False
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    turn = "\n".join(xml_call("read_text_file", path="big.txt") for _ in range(16))
    asked = botpsy(home, "ask", "--replay", replay(tmp_path, turn, "Done."), "read it all")
    no_traceback(asked)
    assert asked.returncode == 1
    assert "Write a shorter request" not in asked.stderr
    assert "The tool calls that ran are done" in asked.stderr, asked.stderr
    assert "do not simply repeat the request" in asked.stderr


# --- the file-change log -------------------------------------------------------------------------


def test_a_torn_line_in_the_file_change_log_never_swallows_the_next_entry(
    home: Path, files: Path, tmp_path: Path
) -> None:
    log = home / "data" / "files-actions.jsonl"
    log.write_text('{"id": "0123456789abcdef", "tool": "write_text_note", "argum', "utf-8")
    asked = _note_run(home, tmp_path, None)
    assert asked.returncode == 0, asked.stderr
    assert (files / "Notes" / "plan.md").exists()
    undo = botpsy(home, "undo", "--json")
    assert undo.returncode == 0, undo.stderr
    assert not (files / "Notes" / "plan.md").exists()  # the entry after the torn line was found


def test_a_full_disk_for_the_file_change_log_takes_the_change_back(
    home: Path, files: Path, tmp_path: Path
) -> None:
    _prepared(home, tmp_path)
    log = home / "data" / "files-actions.jsonl"
    log.write_text("\n" * 300_000, encoding="utf-8")  # the database's files stay far smaller
    before = log.read_bytes()
    asked = _note_run(home, tmp_path, len(before) + 40)  # an entry is cut off after 40 bytes
    no_traceback(asked)
    assert asked.returncode == 0, asked.stderr  # the model is told, and answers
    assert not (files / "Notes" / "plan.md").exists()  # taken back: nothing changed
    assert log.read_bytes() == before  # and no half line left
    [entry] = [e for e in actions(home) if e["tool"] == "write_text_note"]
    assert not entry["ok"] and "taken back" in entry["result"]
    undo = botpsy(home, "undo", "--json")  # the newest reversible action is the timer
    assert undo.returncode == 0 and json.loads(undo.stdout)["undone"]["tool"] == "set_timer"
