"""Parked routines survive their process: `botpsy daemon` killed and started again, the stored
approval answered from `botpsy approvals` or a notification's button, run exactly once; an
approval whose deadline passed never runs; missed routines catch up or are skipped."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any
from zoneinfo import ZoneInfo

import pytest

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.agent.store import ConversationStore
from tests.helpers.notification_server import ServerProcess, notification_server
from tests.helpers.replay import xml_call
from tests.helpers.services import needs, programs

needs_dbus = needs(programs("dbus-daemon"), "dbus-daemon (a private D-Bus)", "apt install dbus")

PARIS = ZoneInfo("Europe/Paris")
ROOT = Path(__file__).resolve().parents[2]
REQUEST = "Cancel all my alarms"
CANCEL_ALL = xml_call("cancel_alarm", alarm="all")


def make_profile(tmp_path: Path, timeout_s: float) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {
        "files": {"roots": [str(tmp_path)]},
        "alarms": {"time_zone": "Europe/Paris"},
        "agent": {"background_approval_timeout_s": timeout_s},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


class Lines:
    """Reads a pipe on a thread so a test can wait for the next line with a timeout."""

    def __init__(self, pipe: IO[str]) -> None:
        self._q: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self._pipe = pipe
        self._thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        """After the process ended: the rest is read, and the pipe closed."""
        self._thread.join(10)
        self._pipe.close()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self._q.put(line.rstrip("\n"))

    def next(self, timeout: float) -> str:
        line = self._q.get(timeout=timeout)
        self.seen.append(line)
        return line

    def drain(self) -> list[str]:
        """Everything read and not yet taken (call after the process ended)."""
        while True:
            try:
                self.seen.append(self._q.get(timeout=0.5))
            except queue.Empty:
                return self.seen

    def until(self, match: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        """The next JSON event that ``match`` accepts (the ones before it are kept in seen)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching event; saw {self.seen}")
            event: dict[str, Any] = json.loads(self.next(left))
            if match(event):
                return event


class Daemon:
    def __init__(self, profile: Path, replay: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "botpsy_desktop",
                "--home",
                str(profile),
                "daemon",
                "--replay",
                str(replay),
                "--json",
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # no notifications on the session of whoever runs the tests, unless a test's own
            env={
                **os.environ,
                "PYTHONUNBUFFERED": "1",
                "DBUS_SESSION_BUS_ADDRESS": "",
                **(env or {}),
            },
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.lines = Lines(self.proc.stdout)
        self.errors = Lines(self.proc.stderr)

    def ready(self, timeout: float = 60) -> None:
        """Wait until it listens for SIGTERM (its "Ctrl-C stops" line)."""
        deadline = time.monotonic() + timeout
        while not any("Ctrl-C stops" in line for line in self.errors.seen):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return
            with contextlib.suppress(queue.Empty):
                self.errors.next(0.2)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(15)
        self._close()

    def _close(self) -> None:
        self.lines.close()
        self.errors.close()

    def stop(self) -> tuple[int, str]:
        self.ready()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        finally:
            self._close()
        return self.proc.returncode, "\n".join(self.errors.drain())


def botpsy(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def replay(tmp_path: Path, name: str, turns: list[str]) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(turns), encoding="utf-8")
    return path


def seed(profile: Path, *, due_in: float = 2.0, request: str = REQUEST) -> tuple[int, int]:
    """An alarm tomorrow morning and a routine due in ``due_in`` seconds; their ids."""
    service = AlarmService(profile / "data" / "alarms.sqlite3", tz=PARIS)
    try:
        soon = datetime.now(UTC) + timedelta(seconds=due_in)
        wake = service.add(AlarmKind.ALARM, soon + timedelta(hours=8), label="Wake up")
        routine = service.add(AlarmKind.ROUTINE, soon, label=request)
    finally:
        service.shutdown()
    return wake.id, routine.id


def alarm_ids(profile: Path) -> list[int]:
    service = AlarmService(profile / "data" / "alarms.sqlite3", tz=PARIS)
    try:
        return [a.id for a in service.alarms()]
    finally:
        service.shutdown()


@pytest.fixture
def stores() -> Iterator[list[ConversationStore]]:
    opened: list[ConversationStore] = []
    yield opened
    for store in opened:
        store.close()


def open_store(profile: Path, opened: list[ConversationStore]) -> ConversationStore:
    store = ConversationStore(profile / "data" / "conversations.sqlite3")
    opened.append(store)
    return store


def waiting(profile: Path) -> list[dict[str, Any]]:
    listed = botpsy(profile, "approvals", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows: list[dict[str, Any]] = json.loads(listed.stdout)
    return rows


def park_and_kill(profile: Path, tmp_path: Path, routine_id: int) -> dict[str, Any]:
    """Run the daemon until its routine parks on cancel_alarm, then SIGKILL it."""
    first = Daemon(profile, replay(tmp_path, "first.json", [CANCEL_ALL, "not reached"]))
    try:
        asked = first.lines.until(lambda e: e["event"] == "routine_approval")
    finally:
        first.kill()
    assert asked["id"] == routine_id and asked["tool"] == "cancel_alarm"
    assert asked["arguments"] == {"alarm": "all"}
    return asked


def test_a_parked_routine_survives_a_kill_and_runs_once_when_approved_from_the_terminal(
    tmp_path: Path, stores: list[ConversationStore]
) -> None:
    profile = make_profile(tmp_path, timeout_s=120)
    wake_id, routine_id = seed(profile)
    asked = park_and_kill(profile, tmp_path, routine_id)

    # killed: the approval is still in the stored queue, with the same receipt
    [row] = waiting(profile)
    assert row["id"] == asked["approval"] and row["state"] == "waiting"
    assert row["tool"] == "cancel_alarm" and row["arguments"] == {"alarm": "all"}
    assert row["receipt"] == asked["receipt"] and row["receipt"]
    assert row["routine"]["id"] == routine_id and row["routine"]["request"] == REQUEST
    shown = botpsy(profile, "approvals")
    assert shown.returncode == 0 and asked["receipt"].splitlines()[0] in shown.stdout
    assert f"routine {routine_id} “{REQUEST}”" in shown.stdout
    assert alarm_ids(profile) == [wake_id]  # nothing ran

    # started again: it takes the parked run over, then the terminal approves it
    second = Daemon(profile, replay(tmp_path, "second.json", ["Cancelled all your alarms."]))
    try:
        adopted = second.lines.until(lambda e: e["event"] == "routine_approval")
        assert adopted["approval"] == row["id"]
        answered = botpsy(profile, "approvals", "approve", str(row["id"]))
        assert answered.returncode == 0, answered.stderr
        assert "Approved" in answered.stdout
        resumed = second.lines.until(lambda e: e["event"] == "routine_resumed")
        finished = second.lines.until(lambda e: e["event"] == "routine_finished")
        again = botpsy(profile, "approvals", "approve", str(row["id"]))  # decided already
    finally:
        code, err = second.stop()
    assert code == 0, err
    assert "Traceback" not in err
    assert resumed["decision"] == "approved" and resumed["by"] == "user (terminal)"
    assert finished["state"] == "done" and finished["answer"] == "Cancelled all your alarms."
    assert again.returncode == 1 and "already" in again.stderr

    # exactly that call ran, once: the alarm is gone, and the audit log has one entry
    assert alarm_ids(profile) == []
    store = open_store(profile, stores)
    actions = [a for a in store.actions() if a["tool"] == "cancel_alarm"]
    assert len(actions) == 1 and actions[0]["approved_by"] == "user (terminal)"
    messages = store.messages(finished["conversation"])
    tool_rows = [m for m in messages if m["role"] == "tool"]
    assert len(tool_rows) == 1 and "Cancelled" in str(tool_rows[0]["content"])
    assert messages[-1]["content"] == "Cancelled all your alarms."
    assert store.title(finished["conversation"]) == f"Routine: {REQUEST}"
    assert waiting(profile) == []


def test_an_approval_whose_deadline_passed_while_nothing_ran_never_runs(
    tmp_path: Path, stores: list[ConversationStore]
) -> None:
    profile = make_profile(tmp_path, timeout_s=3)
    wake_id, routine_id = seed(profile)
    asked = park_and_kill(profile, tmp_path, routine_id)
    while time.time() < asked["deadline"] + 0.5:  # the deadline passes while nothing runs
        time.sleep(0.2)
    late = botpsy(profile, "approvals", "approve", str(asked["approval"]))
    assert late.returncode == 1 and "deadline" in late.stderr

    # the model would cancel everything if asked again: it is never asked
    second = Daemon(profile, replay(tmp_path, "second.json", [CANCEL_ALL, "Done."]))
    try:
        finished = second.lines.until(lambda e: e["event"] == "routine_finished")
    finally:
        code, err = second.stop()
    assert code == 0, err
    assert finished["answer"].startswith("I did not do it: cancel_alarm waited 3 s")
    assert finished["denied"] == ["cancel_alarm"]
    assert alarm_ids(profile) == [wake_id]
    store = open_store(profile, stores)
    assert store.actions() == []
    messages = store.messages(finished["conversation"])
    assert messages[-1]["content"] == finished["answer"]
    [tool_row] = [m for m in messages if m["role"] == "tool"]
    assert "was not run" in str(tool_row["content"]) and not tool_row.get("interrupted")
    assert waiting(profile) == []


def test_an_approval_nobody_answers_in_a_running_daemon_ends_without_the_model(
    tmp_path: Path, stores: list[ConversationStore]
) -> None:
    profile = make_profile(tmp_path, timeout_s=1)
    wake_id, routine_id = seed(profile)
    # a second model turn that would try again is never asked for
    daemon = Daemon(profile, replay(tmp_path, "turns.json", [CANCEL_ALL, CANCEL_ALL, "Done."]))
    try:
        finished = daemon.lines.until(lambda e: e["event"] == "routine_finished")
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    assert finished["id"] == routine_id and finished["denied"] == ["cancel_alarm"]
    assert finished["answer"].startswith("I did not do it: cancel_alarm waited 1 s")
    assert alarm_ids(profile) == [wake_id]
    assert open_store(profile, stores).actions() == []


def notified(server: ServerProcess, approval: int) -> dict[str, Any]:
    event = server.wait_for(
        lambda e: e["event"] == "notify" and f"Approval {approval}." in e["body"], 20
    )
    assert event is not None, server.events
    return event


@needs_dbus
@pytest.mark.parametrize("button", ["approve", "deny"])
def test_a_notification_button_approves_or_denies_the_stored_approval(
    tmp_path: Path, stores: list[ConversationStore], button: str
) -> None:
    profile = make_profile(tmp_path, timeout_s=120)
    wake_id, routine_id = seed(profile)
    turns = [CANCEL_ALL, "Cancelled." if button == "approve" else "Not cancelled."]
    with notification_server() as server:
        env = {"DBUS_SESSION_BUS_ADDRESS": server.address}
        daemon = Daemon(profile, replay(tmp_path, "turns.json", turns), env)
        try:
            asked = daemon.lines.until(lambda e: e["event"] == "routine_approval")
            note = notified(server, asked["approval"])
            server.invoke(note["id"], button)
            finished = daemon.lines.until(lambda e: e["event"] == "routine_finished")
            closed = server.wait_for(lambda e: e["event"] == "close" and e["id"] == note["id"], 10)
        finally:
            code, err = daemon.stop()
    assert code == 0, err
    # the receipt's plain words, who asked; a short always-ask receipt fits: all buttons
    assert asked["receipt"].splitlines()[0] in note["body"]
    assert f"routine {routine_id} “{REQUEST}”" in note["body"]
    assert note["actions"] == [
        "default",
        "Open BotPsy",
        "approve",
        "Approve",
        "deny",
        "Deny",
        "open",
        "Open",
    ]
    assert note["hints"]["category"] == "x-botpsy.approval"
    assert closed is not None  # decided: its notification goes away
    store = open_store(profile, stores)
    actions = [a for a in store.actions() if a["tool"] == "cancel_alarm"]
    if button == "approve":
        assert finished["answer"] == "Cancelled." and finished["denied"] == []
        assert len(actions) == 1 and actions[0]["approved_by"] == "user (notification)"
        assert alarm_ids(profile) == []
    else:
        assert finished["answer"] == "Not cancelled." and finished["denied"] == ["cancel_alarm"]
        assert actions == [] and alarm_ids(profile) == [wake_id]
    rows = json.loads(botpsy(profile, "approvals", "list", "--all", "--json").stdout)
    assert [(r["decision"], r["decided_by"]) for r in rows] == [
        ("approved" if button == "approve" else "denied", "user (notification)")
    ]


@needs_dbus
def test_an_always_ask_receipt_too_long_for_a_notification_offers_only_open(
    tmp_path: Path,
) -> None:
    profile = make_profile(tmp_path, timeout_s=120)
    long_request = "Read me the news headlines, " + "then the weather for every city, " * 12
    _, routine_id = seed(profile, request="Set up my mornings")
    turns = [xml_call("set_routine", time="tomorrow 7:00", request=long_request.strip())]
    with notification_server() as server:
        env = {"DBUS_SESSION_BUS_ADDRESS": server.address}
        daemon = Daemon(profile, replay(tmp_path, "turns.json", turns), env)
        try:
            asked = daemon.lines.until(lambda e: e["event"] == "routine_approval")
            note = notified(server, asked["approval"])
            server.invoke(note["id"], "approve")  # not offered: ignored
            time.sleep(1.5)
            still = waiting(profile)
        finally:
            code, err = daemon.stop()
    assert code == 0, err
    assert asked["id"] == routine_id and asked["tool"] == "set_routine"
    assert note["actions"] == ["default", "Open BotPsy", "open", "Open"]
    assert "open BotPsy to read it all" in note["body"]
    assert [r["id"] for r in still] == [asked["approval"]]  # still waiting: nothing approved
    # stopped while it waits: it stays stored for the next start, and the daemon says so
    events = [json.loads(line) for line in daemon.lines.drain()]
    [suspended] = [e for e in events if e["event"] == "routine_suspended"]
    assert suspended["approvals"] == [asked["approval"]]
    assert [r["id"] for r in waiting(profile)] == [asked["approval"]]


def test_missed_routines_catch_up_once_or_are_skipped_as_each_was_set(tmp_path: Path) -> None:
    profile = make_profile(tmp_path, timeout_s=120)
    db = profile / "data" / "alarms.sqlite3"
    past = datetime.now(UTC) - timedelta(hours=2)
    then = AlarmService(db, tz=PARIS, now=lambda: past)
    keen = then.add(AlarmKind.ROUTINE, past + timedelta(minutes=1), label="Weather", catch_up=True)
    lazy = then.add(AlarmKind.ROUTINE, past + timedelta(minutes=2), label="News")
    then.shutdown()
    turns = ["Sunny all day."]
    first = Daemon(profile, replay(tmp_path, "turns.json", turns))
    try:
        missed = [first.lines.until(lambda e: e["event"] == "missed") for _ in range(2)]
        finished = first.lines.until(lambda e: e["event"] == "routine_finished")
    finally:
        code, err = first.stop()
    assert code == 0, err
    assert {(m["id"], m["catch_up"]) for m in missed} == {(keen.id, True), (lazy.id, False)}
    assert finished["id"] == keen.id and finished["answer"] == "Sunny all day."
    ran = [json.loads(s) for s in first.lines.seen]
    assert [e["id"] for e in ran if e["event"] == "running"] == [keen.id]  # News skipped

    second = Daemon(profile, replay(tmp_path, "turns.json", turns))  # reported once only
    try:
        time.sleep(3)
    finally:
        code, err = second.stop()
    assert code == 0, err
    assert second.lines.drain() == []
    listed = botpsy(profile, "approvals")  # and nothing waits
    assert listed.stdout.strip() == "Nothing waits for your approval."


def test_two_daemons_on_one_profile_run_a_routine_once(tmp_path: Path) -> None:
    profile = make_profile(tmp_path, timeout_s=120)
    _, routine_id = seed(profile, due_in=4.0)
    turns = replay(tmp_path, "turns.json", ["Your alarms are as they were."])
    one, two = Daemon(profile, turns), Daemon(profile, turns)
    try:
        one.ready()
        two.ready()
        time.sleep(6)  # due in 4 s: both are running when it is due
    finally:
        code_one, err_one = one.stop()
        code_two, err_two = two.stop()
    assert code_one == 0 and code_two == 0, err_one + err_two
    events = [json.loads(line) for d in (one, two) for line in d.lines.drain()]
    assert [e["event"] for e in events] == ["running", "routine_finished"]
    assert events[0]["id"] == routine_id
