"""Routines in the alarms store: set, listed, cancelled, repeated, fired (never rung), missed."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from botpsy_desktop.adapters.alarms import AlarmFired, AlarmKind, AlarmService, alarms_tools
from botpsy_desktop.adapters.alarms.store import SCHEMA_VERSION
from botpsy_desktop.agent.routines import catch_up, first_line, routine_conversation, routine_title
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tool
from tests.helpers.clock import Clock

PARIS = ZoneInfo("Europe/Paris")
MONDAY_7 = datetime(2026, 12, 7, 7, 0, tzinfo=PARIS)  # a Monday
REQUEST = "What's on my calendar today and the weather?"


@pytest.fixture
def clock() -> Clock:
    return Clock(MONDAY_7)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "alarms.sqlite3"


@pytest.fixture
def service(db: Path, clock: Clock) -> Iterator[AlarmService]:
    svc = AlarmService(db, tz=PARIS, now=clock)
    yield svc
    svc.shutdown()


@pytest.fixture
def tools(service: AlarmService) -> dict[str, Tool]:
    return {t.name: t for t in alarms_tools(service)}


def call(tools: dict[str, Tool], name: str, **arguments: Any) -> Any:
    tool = tools[name]
    return tool.call(tool.validate(arguments))


def fired_by(service: AlarmService) -> list[AlarmFired]:
    fired: list[AlarmFired] = []
    service.add_listener(fired.append)
    return fired


def test_set_routine_is_a_gated_local_write_and_says_when_it_runs(
    tools: dict[str, Tool], service: AlarmService
) -> None:
    assert tools["set_routine"].effects == {Effect.LOCAL_WRITE}
    schema = tools["set_routine"].parameters_schema()
    assert schema["required"] == ["time", "request"]
    result = call(tools, "set_routine", time="8:00", request=REQUEST, repeat="weekdays")
    assert result["summary"] == (
        f"Routine set ({REQUEST}): runs Mon 7 Dec 08:00 (in 1 h), then weekdays (Mon-Fri)."
    )
    assert result["kind"] == "routine" and result["request"] == REQUEST
    assert "waits for the user's approval" in result["approval_note"]
    assert "runs while BotPsy runs" in result["running_note"]
    [routine] = service.alarms()
    assert routine.kind is AlarmKind.ROUTINE and routine.label == REQUEST
    assert routine.days == frozenset(range(5)) and routine.conversation is None


def test_routines_are_listed_with_alarms_and_cancelled_by_number_or_words(
    tools: dict[str, Tool], service: AlarmService
) -> None:
    call(tools, "set_alarm", time="7:30", label="Wake up")
    routine = call(tools, "set_routine", time="8:00", request=REQUEST, repeat="daily")
    call(tools, "set_routine", time="18:00", request="Summarise my unread mail")
    listed = call(tools, "list_alarms")
    assert listed["count"] == 3
    kinds = [(a["kind"], a.get("request") or a.get("label")) for a in listed["alarms"]]
    assert kinds == [
        ("alarm", "Wake up"),
        ("routine", REQUEST),
        ("routine", "Summarise my unread mail"),
    ]
    assert listed["alarms"][1]["repeat"] == "every day"
    assert listed["alarms"][1]["runs"] == "Mon 7 Dec 08:00 (in 1 h)"
    assert "rings" not in listed["alarms"][1] and "rings" in listed["alarms"][0]

    done = call(tools, "cancel_alarm", alarm=f"routine {routine['id']}")
    assert done["summary"] == f"Cancelled routine {routine['id']} {REQUEST!r}."
    done = call(tools, "cancel_alarm", alarm="unread mail")
    assert "Summarise my unread mail" in done["summary"]
    assert [a.kind for a in service.alarms()] == [AlarmKind.ALARM]


def test_a_bad_routine_is_refused_with_what_to_do(tools: dict[str, Tool]) -> None:
    with pytest.raises(ToolError, match="empty") as info:
        call(tools, "set_routine", time="8:00", request="   ")
    assert "Say what to ask" in str(info.value)
    with pytest.raises(ToolError, match="repeat rule"):
        call(tools, "set_routine", time="8:00", request=REQUEST, repeat="sometimes")
    with pytest.raises(ToolError, match="in the past"):
        call(tools, "set_routine", time="2026-12-07T06:00", request=REQUEST)


def test_a_repeating_routine_fires_without_ringing_and_moves_to_its_next_day(
    service: AlarmService, clock: Clock
) -> None:
    fired = fired_by(service)
    routine = service.add(AlarmKind.ROUTINE, MONDAY_7.replace(hour=8), label=REQUEST, days=range(5))
    clock.advance(minutes=59)
    assert service.fire_due() == []  # not yet
    clock.advance(minutes=1)
    [event] = service.fire_due()
    assert fired == [event]
    assert event.kind is AlarmKind.ROUTINE and event.label == REQUEST and event.id == routine.id
    assert event.line() == f"running: routine {routine.id} {REQUEST!r} (due Mon 7 Dec 08:00)"
    assert event.as_dict()["event"] == "running"
    after = service.get(routine.id)
    assert after is not None and after.status == "scheduled"  # it never rings
    assert service.ringing() == []
    assert after.next_ring == datetime(2026, 12, 8, 8, 0, tzinfo=PARIS)
    with pytest.raises(ToolError, match="not ringing"):
        service.snooze(routine.id)
    # the computer slept from Tuesday to Friday 08:00: one late run (Tuesday's), then Monday's
    clock.current = datetime(2026, 12, 11, 8, 0, tzinfo=PARIS).astimezone(UTC)
    service.fire_due()
    later = service.get(routine.id)
    assert later is not None and later.next_ring == datetime(2026, 12, 14, 8, 0, tzinfo=PARIS)
    assert [e.due.day for e in fired] == [7, 8]


def test_a_one_off_routine_fires_once_and_is_then_gone(service: AlarmService, clock: Clock) -> None:
    fired = fired_by(service)
    service.add(AlarmKind.ROUTINE, MONDAY_7 + timedelta(minutes=5), label=REQUEST)
    clock.advance(minutes=5)
    assert len(service.fire_due()) == 1
    clock.advance(minutes=5)
    assert service.fire_due() == []
    assert service.alarms() == [] and len(fired) == 1


def test_the_routine_keeps_one_conversation_across_runs(
    tmp_path: Path, service: AlarmService, clock: Clock
) -> None:
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    try:
        routine = service.add(
            AlarmKind.ROUTINE, MONDAY_7.replace(hour=8), label=REQUEST, days=range(7)
        )
        clock.advance(hours=1)
        [first] = service.fire_due()
        assert first.conversation is None
        conversation = routine_conversation(store, service, first)
        assert store.title(conversation) == f"Routine: {REQUEST}"
        clock.advance(days=1)
        [second] = service.fire_due()
        assert second.conversation == conversation
        assert routine_conversation(store, service, second) == conversation
        store.delete(conversation)  # the user deleted it: the next run starts a new one
        clock.advance(days=1)
        [third] = service.fire_due()
        fresh = routine_conversation(store, service, third)
        assert fresh != conversation and store.title(fresh) == f"Routine: {REQUEST}"
        assert len(store.conversations()) == 1
        alarm = service.get(routine.id)
        assert alarm is not None and alarm.conversation == fresh
    finally:
        store.close()


def test_a_routine_missed_while_nothing_ran_is_reported_not_run_late(
    db: Path, clock: Clock
) -> None:
    setter = AlarmService(db, tz=PARIS, now=clock)
    repeating = setter.add(AlarmKind.ROUTINE, MONDAY_7.replace(hour=8), label=REQUEST, days=[0])
    once = setter.add(AlarmKind.ROUTINE, MONDAY_7.replace(hour=7, minute=30), label="Mail?")
    setter.shutdown()

    clock.advance(hours=3)  # the app starts at 10:00
    later = AlarmService(db, tz=PARIS, now=clock, missed_after=timedelta(seconds=60))
    try:
        fired = fired_by(later)
        missed = later.start()
        assert [(m.id, m.kind) for m in missed] == [
            (once.id, AlarmKind.ROUTINE),
            (repeating.id, AlarmKind.ROUTINE),
        ]
        now = later.now()
        assert missed[0].line(now) == (
            f"missed: routine {once.id} 'Mail?' was due Mon 7 Dec 07:30; skipped"
        )
        assert missed[1].line(now) == (
            f"missed: routine {repeating.id} {REQUEST!r} was due Mon 7 Dec 08:00 "
            "(next Mon 14 Dec 08:00); skipped"
        )
        assert later.fire_due() == [] and fired == []  # nothing is run late
        assert catch_up(later, missed) == []  # neither was set to catch up
    finally:
        later.shutdown()


def test_a_missed_routine_set_to_catch_up_runs_once_at_the_next_start(
    db: Path, clock: Clock
) -> None:
    setter = AlarmService(db, tz=PARIS, now=clock)
    keen = setter.add(
        AlarmKind.ROUTINE, MONDAY_7.replace(hour=8), label=REQUEST, days=[0], catch_up=True
    )
    setter.shutdown()
    clock.advance(hours=3)  # the app starts at 10:00
    later = AlarmService(db, tz=PARIS, now=clock, missed_after=timedelta(seconds=60))
    try:
        missed = later.start()
        assert missed[0].catch_up
        assert missed[0].line(later.now()) == (
            f"missed: routine {keen.id} {REQUEST!r} was due Mon 7 Dec 08:00 "
            "(next Mon 14 Dec 08:00); it catches up: running it once now"
        )
        [fired] = catch_up(later, missed)
        assert (fired.id, fired.kind, fired.label) == (keen.id, AlarmKind.ROUTINE, REQUEST)
        assert fired.late_by == timedelta(hours=2)
        assert catch_up(later, later.start()) == []  # reported and caught up once
        [alarm] = later.alarms()  # its miss is dismissed; it runs next Monday as set
        assert alarm.missed_due is None and alarm.catch_up and alarm.status == "scheduled"
    finally:
        later.shutdown()


def test_a_routine_only_a_little_late_at_start_still_runs(db: Path, clock: Clock) -> None:
    setter = AlarmService(db, tz=PARIS, now=clock)
    routine = setter.add(AlarmKind.ROUTINE, MONDAY_7 + timedelta(minutes=1), label=REQUEST)
    setter.shutdown()
    clock.advance(minutes=1, seconds=30)  # 30 s late, under alarms.missed_after_s
    later = AlarmService(db, tz=PARIS, now=clock, missed_after=timedelta(seconds=60))
    try:
        fired = fired_by(later)
        assert later.start() == []
        [event] = later.fire_due()
        assert fired == [event] and event.id == routine.id
        assert event.late_by == timedelta(seconds=30)
    finally:
        later.shutdown()


def test_the_real_scheduler_fires_a_routine_on_an_injected_clock(db: Path) -> None:
    offset = MONDAY_7.replace(hour=7, minute=59, second=59) - datetime.now(UTC)
    service = AlarmService(db, tz=PARIS, now=lambda: datetime.now(UTC) + offset)
    got = threading.Event()
    events: list[AlarmFired] = []

    def listener(event: AlarmFired) -> None:
        events.append(event)
        got.set()

    service.add_listener(listener)
    try:
        service.add(AlarmKind.ROUTINE, MONDAY_7.replace(hour=8), label=REQUEST, days=range(5))
        assert service.start() == []
        assert got.wait(4.0), "the routine did not fire"
        [event] = events
        assert event.kind is AlarmKind.ROUTINE and event.due.hour == 8
        assert event.late_by < timedelta(seconds=0.5)
        assert service.ringing() == []
    finally:
        service.shutdown()


def test_version_1_stores_are_backed_up_and_upgraded(db: Path, clock: Clock) -> None:
    db.parent.mkdir(parents=True)
    old = sqlite3.connect(db)
    old.executescript(
        """
        CREATE TABLE alarms (
            id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, label TEXT NOT NULL,
            days TEXT NOT NULL DEFAULT '', time_of_day TEXT, due REAL, snoozed_until REAL,
            ringing_since REAL, ringing_due REAL, missed_due REAL,
            missed_count INTEGER NOT NULL DEFAULT 0, missed_reported INTEGER NOT NULL DEFAULT 1,
            duration_s REAL, created REAL NOT NULL
        );
        PRAGMA user_version = 1;
        """
    )
    due = (MONDAY_7 + timedelta(hours=1)).timestamp()
    old.execute(
        "INSERT INTO alarms (kind, label, due, created) VALUES ('alarm', 'Wake up', ?, ?)",
        (due, MONDAY_7.timestamp()),
    )
    old.commit()
    old.close()

    service = AlarmService(db, tz=PARIS, now=clock)
    try:
        [alarm] = service.alarms()
        assert alarm.label == "Wake up" and alarm.conversation is None
        routine = service.add(AlarmKind.ROUTINE, MONDAY_7 + timedelta(hours=2), label=REQUEST)
        service.set_conversation(routine.id, "c1")
        again = service.get(routine.id)
        assert again is not None and again.conversation == "c1"
    finally:
        service.shutdown()
    [backup] = db.parent.glob("alarms.backup-v1-*.sqlite3")
    with sqlite3.connect(backup) as copy:
        assert copy.execute("SELECT label FROM alarms").fetchall() == [("Wake up",)]
    with sqlite3.connect(db) as upgraded:
        assert upgraded.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_titles_and_first_lines() -> None:
    assert routine_title("  the   weather ") == "Routine: the weather"
    assert len(routine_title("x" * 500)) == 200
    assert first_line("\n\n  Sunny, 21 °C.  \nMore.") == "Sunny, 21 °C."
    assert first_line("") == ""
    assert first_line("y" * 300, limit=20) == "y" * 19 + "…"
