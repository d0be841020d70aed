"""Tests for the alarms adapter: natural times, repeat rules, the service and store, the tools."""

from __future__ import annotations

import contextlib
import threading
import time as walltime
from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from botpsy_desktop.adapters.alarms import (
    AlarmFired,
    AlarmKind,
    AlarmService,
    alarms_tools,
)
from botpsy_desktop.adapters.alarms.when import (
    ALL_DAYS,
    WEEKDAYS,
    duration_text,
    format_when,
    next_occurrence,
    parse_duration,
    parse_repeat,
    parse_when,
    repeat_text,
)
from botpsy_desktop.core.config import AlarmSettings, Config
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tier, Tool

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def paris(year: int, month: int, day: int, hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=PARIS)


class FakeClock:
    """A clock the test moves by hand; it keeps UTC so that moving it is exact across DST."""

    def __init__(self, start: datetime) -> None:
        self.current = start.astimezone(UTC)

    def __call__(self) -> datetime:
        return self.current

    def advance(self, **kwargs: float) -> None:
        self.current += timedelta(**kwargs)

    def set(self, moment: datetime) -> None:
        self.current = moment.astimezone(UTC)


# --- natural times ----------------------------------------------------------------------------

# Tuesday 1 December 2026, 01:18 in Paris
DEC1 = paris(2026, 12, 1, 1, 18)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7:30", paris(2026, 12, 1, 7, 30)),
        ("07:30", paris(2026, 12, 1, 7, 30)),
        ("7:30 pm", paris(2026, 12, 1, 19, 30)),
        ("7.30pm", paris(2026, 12, 1, 19, 30)),
        ("7 p.m.", paris(2026, 12, 1, 19, 0)),
        ("19:30", paris(2026, 12, 1, 19, 30)),
        ("1:00", paris(2026, 12, 2, 1, 0)),  # already past today: tomorrow
        ("12am", paris(2026, 12, 2, 0, 0)),
        ("noon", paris(2026, 12, 1, 12, 0)),
        ("midnight", paris(2026, 12, 2, 0, 0)),
        ("tomorrow at 9", paris(2026, 12, 2, 9, 0)),
        ("at 9 tomorrow", paris(2026, 12, 2, 9, 0)),
        ("Tomorrow 6:45 AM", paris(2026, 12, 2, 6, 45)),
        ("tomorrow evening at 8", paris(2026, 12, 2, 20, 0)),
        ("tonight at 11", paris(2026, 12, 1, 23, 0)),
        ("today at 18:00", paris(2026, 12, 1, 18, 0)),
        ("day after tomorrow at 7", paris(2026, 12, 3, 7, 0)),
        ("in 20 minutes", paris(2026, 12, 1, 1, 38)),
        ("in 1h30m", paris(2026, 12, 1, 2, 48)),
        ("in an hour", paris(2026, 12, 1, 2, 18)),
        ("20 minutes from now", paris(2026, 12, 1, 1, 38)),
        ("monday 8am", paris(2026, 12, 7, 8, 0)),
        ("on friday at 17:15", paris(2026, 12, 4, 17, 15)),
        ("tuesday 9:00", paris(2026, 12, 1, 9, 0)),  # today is Tuesday and 9:00 is ahead
        ("next tuesday 9:00", paris(2026, 12, 8, 9, 0)),
        ("tue 1:00", paris(2026, 12, 8, 1, 0)),  # today's 1:00 has passed
        ("24 December at 7:30 pm", paris(2026, 12, 24, 19, 30)),
        ("December 24th 19:30", paris(2026, 12, 24, 19, 30)),
        ("1 March 8:00", paris(2027, 3, 1, 8, 0)),  # no year and already past: next year
        ("2026-12-01T07:30", paris(2026, 12, 1, 7, 30)),
        ("2026-12-01 07:30:15", paris(2026, 12, 1, 7, 30, 15)),
        ("2026-12-01T06:30:00Z", paris(2026, 12, 1, 7, 30)),
        ("2026-12-01T01:30:00-05:00", paris(2026, 12, 1, 7, 30)),
        ("2026-12-25 at 8am", paris(2026, 12, 25, 8, 0)),
        ("half past 7", paris(2026, 12, 1, 7, 30)),
        ("quarter to 8 pm", paris(2026, 12, 1, 19, 45)),
        ("tomorrow at 10 past 6", paris(2026, 12, 2, 6, 10)),
        ("12 noon", paris(2026, 12, 1, 12, 0)),
    ],
)
def test_natural_times_resolve_against_the_local_zone(text: str, expected: datetime) -> None:
    when = parse_when(text, DEC1, PARIS)
    assert when.at == expected
    assert when.at.utcoffset() == expected.utcoffset()
    assert when.note == ""


def test_the_resolved_time_is_shown_back_with_how_far_it_is() -> None:
    at = parse_when("7:30", DEC1, PARIS).at
    assert format_when(at, DEC1) == "Tue 1 Dec 07:30 (in 6 h 12 min)"
    assert format_when(parse_when("in 90 seconds", DEC1, PARIS).at, DEC1) == (
        "Tue 1 Dec 01:19:30 (in 1 min 30 s)"
    )
    assert format_when(paris(2027, 1, 2, 9, 0), DEC1) == "Sat 2 Jan 2027 09:00 (in 32 days 7 h)"


def test_the_same_words_follow_the_users_zone() -> None:
    now = DEC1.astimezone(NEW_YORK)  # Mon 30 Nov, 19:18 in New York
    assert parse_when("7:30", now, NEW_YORK).at == datetime(2026, 12, 1, 7, 30, tzinfo=NEW_YORK)
    assert parse_when("tomorrow at 9", now, NEW_YORK).at == datetime(
        2026, 12, 1, 9, 0, tzinfo=NEW_YORK
    )


def test_times_that_repeat_are_recognised_in_the_time_itself() -> None:
    every_monday = parse_when("every monday at 8", DEC1, PARIS)
    assert every_monday.days == frozenset({0})
    assert every_monday.at == paris(2026, 12, 7, 8, 0)
    weekdays = parse_when("weekdays at 6:30", DEC1, PARIS)
    assert weekdays.days == WEEKDAYS
    assert weekdays.at == paris(2026, 12, 1, 6, 30)
    assert parse_when("daily at 7", DEC1, PARIS).days == ALL_DAYS
    assert parse_when("8 am on mondays and fridays", DEC1, PARIS).days == frozenset({0, 4})


class TestDaylightSaving:
    """Paris: clocks go forward 2026-03-29 02:00 -> 03:00 and back 2026-10-25 03:00 -> 02:00."""

    def test_across_midnight_and_the_spring_change(self) -> None:
        now = paris(2026, 3, 28, 23, 50)  # CET, +01:00
        wake = parse_when("7:30", now, PARIS).at
        assert wake == paris(2026, 3, 29, 7, 30)
        assert wake.utcoffset() == timedelta(hours=2)
        # 6 h 40 min of real time, not the 7 h 40 min a wall-clock subtraction gives
        assert format_when(wake, now) == "Sun 29 Mar 07:30 (in 6 h 40 min)"
        assert parse_when("tomorrow at 9", paris(2026, 3, 28, 12, 0), PARIS).at == paris(
            2026, 3, 29, 9, 0
        )

    def test_a_relative_time_is_real_elapsed_time(self) -> None:
        now = paris(2026, 3, 29, 1, 50)  # 10 minutes before the change
        at = parse_when("in 20 minutes", now, PARIS).at
        assert at == paris(2026, 3, 29, 3, 10)
        assert at - now.astimezone(UTC) == timedelta(minutes=20)
        autumn = paris(2026, 10, 25, 2, 30)  # the first 02:30, summer time
        later = parse_when("in 1 hour", autumn, PARIS).at
        assert (later.hour, later.minute, later.utcoffset()) == (2, 30, timedelta(hours=1))

    def test_a_time_in_the_spring_gap_moves_forward_and_says_so(self) -> None:
        when = parse_when("tomorrow at 2:30", paris(2026, 3, 28, 20, 0), PARIS)
        assert when.at == paris(2026, 3, 29, 3, 30)
        assert "does not exist" in when.note and "03:30" in when.note
        iso = parse_when("2026-03-29T02:30", paris(2026, 3, 28, 20, 0), PARIS)
        assert iso.at == paris(2026, 3, 29, 3, 30)

    def test_a_time_that_happens_twice_means_the_first(self) -> None:
        when = parse_when("tomorrow at 2:30", paris(2026, 10, 24, 20, 0), PARIS)
        assert when.at.utcoffset() == timedelta(hours=2)
        assert when.at.astimezone(UTC) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
        assert "happens twice" in when.note

    def test_a_daily_alarm_keeps_its_wall_time(self) -> None:
        first = next_occurrence(ALL_DAYS, time(7, 30), paris(2026, 3, 28, 7, 30), PARIS)
        assert first == paris(2026, 3, 29, 7, 30)
        assert first.astimezone(UTC).hour == 5  # 23 real hours after the day before
        autumn = next_occurrence(ALL_DAYS, time(7, 30), paris(2026, 10, 24, 7, 30), PARIS)
        assert autumn.astimezone(UTC) == datetime(2026, 10, 25, 6, 30, tzinfo=UTC)

    def test_a_daily_alarm_in_the_repeated_hour_rings_once(self) -> None:
        first = paris(2026, 10, 25, 2, 30)  # summer-time 02:30
        after = next_occurrence(ALL_DAYS, time(2, 30), first, PARIS)
        assert after == paris(2026, 10, 26, 2, 30)


@pytest.mark.parametrize(
    ("text", "hour", "minute"),
    [
        # as a speech recogniser writes what was said ("six forty-five" -> "645")
        ("645", 6, 45),
        ("at 645 tomorrow", 6, 45),
        ("0730", 7, 30),
        ("1030 pm", 22, 30),
        ("7 30", 7, 30),
        # as people say it
        ("seven thirty", 7, 30),
        ("six forty-five pm", 18, 45),
        ("six forty five", 6, 45),
        ("ten oh five", 10, 5),
        ("seven o'clock", 7, 0),
        ("tomorrow at seven", 7, 0),
        ("half past six", 6, 30),
        ("a quarter to seven", 6, 45),
        ("ten past nine in the evening", 21, 10),
        ("twelve thirty", 12, 30),
    ],
)
def test_a_time_said_in_words_or_run_together_is_read(text: str, hour: int, minute: int) -> None:
    at = parse_when(text, DEC1, PARIS).at  # 1 December, 01:18
    day = 1 if (hour, minute) > (1, 18) and "tomorrow" not in text else 2
    assert at == paris(2026, 12, day, hour, minute)


@pytest.mark.parametrize(
    ("text", "minutes"),
    [
        ("twenty-five minutes", 25),
        ("thirty five minutes", 35),
        ("seventeen minutes", 17),
        ("two and a half hours", 150),
        ("one and a half hours", 90),
        ("an hour and a half", 90),
        ("a quarter of an hour", 15),
        ("one hour thirty minutes", 90),
    ],
)
def test_a_duration_said_in_words_is_read(text: str, minutes: int) -> None:
    assert parse_duration(text) == timedelta(minutes=minutes)


@pytest.mark.parametrize("text", ["2530", "760", "7:75", "7 75", "twenty-five to"])
def test_run_together_digits_that_are_no_time_are_not_read_as_one(text: str) -> None:
    with pytest.raises(ToolError, match="Cannot read"):
        parse_when(text, DEC1, PARIS)


def test_an_event_end_said_in_words_is_the_first_such_time_after_its_start() -> None:
    from botpsy_desktop.adapters.calendar.dates import parse_end, parse_start

    start = parse_start("next friday at nine", DEC1, PARIS)
    assert start.at == paris(2026, 12, 4, 9, 0)
    assert parse_end(start, "eleven thirty", None, DEC1, PARIS) == paris(2026, 12, 4, 11, 30)
    assert parse_end(start, "11:30", None, DEC1, PARIS) == paris(2026, 12, 4, 11, 30)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("soonish", "Cannot read"),
        ("25:00", "Cannot read"),
        ("7:75", "Cannot read"),
        ("", "empty"),
        ("tomorrow", "no time of day"),
        ("today at 1:00", "already passed"),
        ("2026-11-30T07:30", "in the past"),
        ("31 February at 8", "does not exist"),
        ("tomorrow monday 8am", "more than one day"),
    ],
)
def test_unreadable_times_say_what_is_accepted(text: str, message: str) -> None:
    with pytest.raises(ToolError) as info:
        parse_when(text, DEC1, PARIS)
    assert message in str(info.value)
    if message == "Cannot read":
        assert '"7:30"' in str(info.value) and '"tomorrow at 9"' in str(info.value)


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=40),
        st.lists(
            st.sampled_from(
                [
                    "at",
                    "7",
                    ":30",
                    "pm",
                    "tomorrow",
                    "in",
                    "10",
                    "minutes",
                    "monday",
                    "every",
                    "noon",
                    "half",
                    "past",
                    "2026-03-29",
                    "T02:30",
                    "the",
                    "and",
                    "-",
                    "1h",
                    "dec",
                ]
            ),
            max_size=6,
        ).map(" ".join),
    ),
    minutes=st.integers(0, 60 * 24 * 400),
)
def test_any_text_gives_a_future_time_or_a_tool_error(text: str, minutes: int) -> None:
    now = paris(2026, 1, 1, 0, 0).astimezone(UTC) + timedelta(minutes=minutes)
    for parse in (parse_duration, parse_repeat):
        with contextlib.suppress(ToolError):
            parse(text)
    try:
        when = parse_when(text, now, PARIS)
    except ToolError as exc:
        assert str(exc)
        return
    assert when.at > now and when.at.tzinfo is PARIS


@pytest.mark.parametrize(
    ("text", "seconds", "shown"),
    [
        ("10 minutes", 600, "10 min"),
        ("10 min", 600, "10 min"),
        ("1h30m", 5400, "1 h 30 min"),
        ("1h30", 5400, "1 h 30 min"),
        ("1 hour 30 minutes", 5400, "1 h 30 min"),
        ("2 hours and 15 minutes", 8100, "2 h 15 min"),
        ("90 seconds", 90, "90 s"),
        ("1.5 hours", 5400, "1 h 30 min"),
        ("half an hour", 1800, "30 min"),
        ("an hour and a half", 5400, "1 h 30 min"),
        ("forty-five minutes", 2700, "45 min"),
        ("5:00", 300, "5 min"),
        ("1:02:03", 3723, "1 h 2 min"),
        ("PT10M", 600, "10 min"),
        ("10", 600, "10 min"),
        ("in 3 minutes", 180, "3 min"),
    ],
)
def test_durations(text: str, seconds: int, shown: str) -> None:
    d = parse_duration(text)
    assert d == timedelta(seconds=seconds)
    assert duration_text(d) == shown


@pytest.mark.parametrize("text", ["soon", "0 minutes", "10 parsecs", "5:99", ""])
def test_bad_durations_give_examples(text: str) -> None:
    with pytest.raises(ToolError) as info:
        parse_duration(text)
    assert "10 minutes" in str(info.value)


@pytest.mark.parametrize(
    ("text", "days", "shown"),
    [
        ("never", set(), "once"),
        ("", set(), "once"),
        ("daily", set(range(7)), "every day"),
        ("every day", set(range(7)), "every day"),
        ("weekdays", {0, 1, 2, 3, 4}, "weekdays (Mon-Fri)"),
        ("Mon-Fri", {0, 1, 2, 3, 4}, "weekdays (Mon-Fri)"),
        ("weekends", {5, 6}, "weekends (Sat, Sun)"),
        ("monday", {0}, "every Monday"),
        ("every Monday", {0}, "every Monday"),
        ("mondays", {0}, "every Monday"),
        ("monday,wednesday,friday", {0, 2, 4}, "every Mon, Wed, Fri"),
        ("tue and thu", {1, 3}, "every Tue, Thu"),
        ("friday to sunday", {4, 5, 6}, "every Fri, Sat, Sun"),
    ],
)
def test_repeat_rules(text: str, days: set[int], shown: str) -> None:
    parsed = parse_repeat(text)
    assert parsed == frozenset(days)
    assert repeat_text(parsed) == shown


def test_a_bad_repeat_rule_lists_the_accepted_ones() -> None:
    with pytest.raises(ToolError) as info:
        parse_repeat("fortnightly")
    assert '"weekdays"' in str(info.value) and '"monday,wednesday,friday"' in str(info.value)


# --- the service ------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "data" / "alarms.sqlite3"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(DEC1)


@pytest.fixture
def make_service(db: Path, clock: FakeClock) -> Iterator[Any]:
    """Services on one SQLite file with the fake clock; all shut down after the test."""
    made: list[AlarmService] = []

    def make(**kwargs: Any) -> AlarmService:
        kwargs.setdefault("tz", PARIS)
        kwargs.setdefault("now", clock)
        service = AlarmService(db, **kwargs)
        made.append(service)
        return service

    yield make
    for service in made:
        service.shutdown()


@pytest.fixture
def service(make_service: Any) -> AlarmService:
    svc: AlarmService = make_service()
    return svc


def collect(service: AlarmService) -> list[AlarmFired]:
    fired: list[AlarmFired] = []
    service.add_listener(fired.append)
    return fired


def test_an_alarm_rings_when_due_and_is_then_done(service: AlarmService, clock: FakeClock) -> None:
    fired = collect(service)
    alarm = service.add(AlarmKind.ALARM, paris(2026, 12, 1, 7, 30), label="Wake up")
    assert alarm.status == "scheduled" and alarm.next_ring == paris(2026, 12, 1, 7, 30)
    clock.set(paris(2026, 12, 1, 7, 29, 59))
    assert service.fire_due() == []
    clock.set(paris(2026, 12, 1, 7, 30, 0))
    [event] = service.fire_due()
    assert fired == [event]
    assert (event.id, event.kind, event.label) == (alarm.id, AlarmKind.ALARM, "Wake up")
    assert event.due == paris(2026, 12, 1, 7, 30) and event.late_by == timedelta(0)
    assert event.line() == "ringing: alarm 1 'Wake up' (due Tue 1 Dec 07:30)"
    assert service.fire_due() == []  # rings once
    ringing = service.get(alarm.id)
    assert ringing is not None and ringing.status == "ringing" and ringing.next_ring is None
    assert service.dismiss(alarm.id) is None
    assert service.alarms() == []


def test_weekday_alarms_skip_the_weekend(service: AlarmService, clock: FakeClock) -> None:
    clock.set(paris(2026, 12, 4, 20, 0))  # Friday evening
    alarm = service.add(AlarmKind.ALARM, paris(2026, 12, 4, 7, 0), days=WEEKDAYS)
    assert alarm.next_ring == paris(2026, 12, 7, 7, 0)  # Monday
    assert alarm.time_of_day == time(7, 0)
    clock.set(paris(2026, 12, 7, 7, 0))
    [event] = service.fire_due()
    assert event.due == paris(2026, 12, 7, 7, 0)
    after = service.get(alarm.id)
    assert after is not None and after.next_ring == paris(2026, 12, 8, 7, 0)
    service.dismiss(alarm.id)
    kept = service.get(alarm.id)
    assert kept is not None and kept.status == "scheduled"  # still rings on Tuesday


def test_every_monday_and_daily_across_dst(service: AlarmService, clock: FakeClock) -> None:
    clock.set(paris(2026, 3, 27, 12, 0))  # Friday before the spring change
    monday = service.add(AlarmKind.ALARM, paris(2026, 3, 30, 8, 0), days={0})
    daily = service.add(AlarmKind.REMINDER, paris(2026, 3, 28, 7, 30), label="Pills", days=ALL_DAYS)
    clock.set(paris(2026, 3, 28, 7, 30))
    assert [e.id for e in service.fire_due()] == [daily.id]
    nxt = service.get(daily.id)
    assert nxt is not None and nxt.next_ring == paris(2026, 3, 29, 7, 30)
    assert nxt.next_ring is not None and nxt.next_ring.utcoffset() == timedelta(hours=2)
    clock.set(paris(2026, 3, 30, 8, 0))
    fired = {e.id for e in service.fire_due()}
    assert fired == {monday.id, daily.id}
    again = service.get(monday.id)
    assert again is not None and again.next_ring == paris(2026, 4, 6, 8, 0)


def test_alarms_survive_a_restart(make_service: Any, clock: FakeClock) -> None:
    first: AlarmService = make_service()
    a = first.add(AlarmKind.ALARM, paris(2026, 12, 1, 7, 30), label="Wake up")
    t = first.add(
        AlarmKind.TIMER, paris(2026, 12, 1, 1, 28), label="tea", duration=timedelta(minutes=10)
    )
    r = first.add(AlarmKind.REMINDER, paris(2026, 12, 7, 9, 0), label="Call Ann", days={0})
    before = first.alarms()
    first.shutdown()
    second: AlarmService = make_service()
    after = second.alarms()
    assert after == before
    assert [x.id for x in after] == [t.id, a.id, r.id]  # by when they ring
    timer = second.get(t.id)
    assert timer is not None and timer.duration == timedelta(minutes=10)
    reminder = second.get(r.id)
    assert reminder is not None and reminder.days == frozenset({0}) and reminder.label == "Call Ann"


def test_missed_alarms_are_reported_once_at_the_next_start(
    make_service: Any, clock: FakeClock
) -> None:
    first: AlarmService = make_service()
    once = first.add(AlarmKind.ALARM, paris(2026, 12, 1, 7, 30), label="Wake up")
    daily = first.add(AlarmKind.ALARM, paris(2026, 12, 1, 8, 0), label="Walk", days=ALL_DAYS)
    soon = first.add(AlarmKind.TIMER, paris(2026, 12, 3, 23, 59, 30), duration=timedelta(hours=1))
    first.shutdown()

    clock.set(paris(2026, 12, 4, 0, 0))  # the app was closed for three days
    second: AlarmService = make_service()
    fired = collect(second)
    missed = second.start()
    assert [(m.id, m.due, m.count, m.next_due) for m in missed] == [
        (once.id, paris(2026, 12, 1, 7, 30), 1, None),
        (daily.id, paris(2026, 12, 3, 8, 0), 3, paris(2026, 12, 4, 8, 0)),
    ]
    assert missed[0].line(second.now()) == "missed: alarm 1 'Wake up' was due Tue 1 Dec 07:30"
    assert "(3 times, next Fri 4 Dec 08:00)" in missed[1].line(second.now())
    statuses = {a.id: a.status for a in second.alarms()}
    assert statuses[once.id] == "missed" and statuses[daily.id] == "scheduled"
    # the timer was only 30 s overdue: it rings now, with its due time, instead of being missed
    assert soon.id not in {m.id for m in missed}
    second.fire_due()  # the scheduler's thread may have rung it already; either way, once
    deadline = walltime.monotonic() + 2
    while not fired and walltime.monotonic() < deadline:
        walltime.sleep(0.01)
    [late] = fired
    assert late.id == soon.id and late.late_by == timedelta(seconds=30)
    second.shutdown()

    third: AlarmService = make_service()
    assert third.start() == []  # reported once
    dismissed = third.dismiss(once.id)
    assert dismissed is None and third.get(once.id) is None


def test_a_list_without_a_running_service_never_shows_past_times_as_coming(
    make_service: Any, clock: FakeClock
) -> None:
    store: AlarmService = make_service()
    alarm = store.add(AlarmKind.ALARM, paris(2026, 12, 1, 7, 30))
    clock.set(paris(2026, 12, 1, 9, 0))
    [listed] = store.alarms()
    assert listed.status == "missed" and listed.missed_due == paris(2026, 12, 1, 7, 30)
    store.shutdown()
    later: AlarmService = make_service()
    assert [m.id for m in later.start()] == [alarm.id]  # still reported at the next start


def test_snooze_then_dismiss(service: AlarmService, clock: FakeClock) -> None:
    fired = collect(service)
    alarm = service.add(AlarmKind.ALARM, paris(2026, 12, 1, 7, 30))
    with pytest.raises(ToolError, match="not ringing"):
        service.snooze(alarm.id)
    clock.set(paris(2026, 12, 1, 7, 30, 5))
    service.fire_due()
    snoozed = service.snooze(alarm.id)
    assert snoozed.status == "snoozed"
    assert snoozed.next_ring == paris(2026, 12, 1, 7, 39, 5)  # 9 minutes by default
    clock.advance(minutes=8)
    assert service.fire_due() == []
    clock.advance(minutes=1)
    [again] = service.fire_due()
    assert again.snoozed and again.due == paris(2026, 12, 1, 7, 39, 5)
    assert "after a snooze" in again.line()
    short = service.snooze(alarm.id, timedelta(minutes=2))
    assert short.next_ring == paris(2026, 12, 1, 7, 41, 5)
    assert service.dismiss(alarm.id) is None  # dismissing the snooze ends a one-off alarm
    assert len(fired) == 2 and service.alarms() == []
    with pytest.raises(ToolError, match="no alarm, timer or reminder number"):
        service.dismiss(alarm.id)


def test_a_ring_nobody_stops_goes_quiet(service: AlarmService, clock: FakeClock) -> None:
    service.add(AlarmKind.TIMER, paris(2026, 12, 1, 1, 20), duration=timedelta(minutes=2))
    clock.set(paris(2026, 12, 1, 1, 20))
    service.fire_due()
    assert [a.status for a in service.alarms()] == ["ringing"]
    clock.advance(minutes=10, seconds=1)
    assert service.alarms() == []


def test_two_services_on_one_file_ring_an_alarm_once(make_service: Any, clock: FakeClock) -> None:
    a: AlarmService = make_service()
    b: AlarmService = make_service()
    a.add(AlarmKind.ALARM, paris(2026, 12, 1, 7, 30))
    clock.set(paris(2026, 12, 1, 7, 30))
    assert len(b.fire_due()) + len(a.fire_due()) == 1


def test_limits_and_bad_times(make_service: Any) -> None:
    service: AlarmService = make_service(max_alarms=2, max_timer=timedelta(hours=1))
    with pytest.raises(ToolError, match="already past"):
        service.add(AlarmKind.ALARM, paris(2026, 12, 1, 1, 0))
    with pytest.raises(ToolError, match="more than a year"):
        service.add(AlarmKind.ALARM, paris(2028, 1, 1, 7, 0))
    with pytest.raises(ToolError, match="at most 1 hours"):
        service.add(AlarmKind.TIMER, paris(2026, 12, 1, 3, 18), duration=timedelta(hours=2))
    service.add(AlarmKind.ALARM, paris(2026, 12, 1, 7, 0))
    service.add(AlarmKind.ALARM, paris(2026, 12, 1, 8, 0))
    with pytest.raises(ToolError, match="limit"):
        service.add(AlarmKind.ALARM, paris(2026, 12, 1, 9, 0))
    with pytest.raises(ValueError, match="aware"):
        service.add(AlarmKind.ALARM, datetime(2026, 12, 1, 9, 0))


def test_settings_build_the_service(db: Path) -> None:
    settings = AlarmSettings(time_zone="America/New_York", snooze_minutes=5, max_timer_hours=2)
    service = AlarmService.from_settings(db, settings)
    try:
        assert service.time_zone_name == "America/New_York"
        assert service.snooze_default == timedelta(minutes=5)
        assert service.max_timer == timedelta(hours=2)
    finally:
        service.shutdown()
    with pytest.raises(ValueError, match="unknown time zone"):
        AlarmSettings(time_zone="Mars/Olympus_Mons")
    assert Config().alarms.snooze_minutes == 9


def test_a_real_timer_rings_through_the_real_scheduler(db: Path) -> None:
    before = set(threading.enumerate())
    service = AlarmService(db, tz=PARIS)
    rang = threading.Event()
    events: list[AlarmFired] = []

    def listener(event: AlarmFired) -> None:
        events.append(event)
        rang.set()

    service.add_listener(listener)
    try:
        assert service.start() == []
        assert service.running
        [tool] = [t for t in alarms_tools(service) if t.name == "set_timer"]
        result = tool.call(tool.validate({"duration": "1 second", "label": "tea"}))
        assert "running_note" not in result
        started = walltime.monotonic()
        assert rang.wait(5.0), "the timer did not ring within 5 s"
        waited = walltime.monotonic() - started
        assert 0.5 < waited < 2.5  # not early; late only by what a loaded machine adds
        [event] = events
        assert event.kind is AlarmKind.TIMER and event.label == "tea"
        assert event.late_by < timedelta(seconds=0.5)
        listed = service.alarms()
        assert [a.status for a in listed] == ["ringing"]
    finally:
        service.shutdown()
    assert not service.running
    leftover = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    assert leftover == []


def test_a_running_service_picks_up_alarms_set_by_another_process(db: Path) -> None:
    running = AlarmService(db, tz=PARIS, poll_interval_s=0.2)
    other = AlarmService(db, tz=PARIS)  # another process, e.g. `botpsy ask`, on the same file
    rang = threading.Event()
    running.add_listener(lambda event: rang.set())
    try:
        running.start()
        other.add(
            AlarmKind.TIMER,
            datetime.now(UTC) + timedelta(seconds=0.5),
            duration=timedelta(seconds=0.5),
        )
        assert rang.wait(2.0)
    finally:
        running.shutdown()
        other.shutdown()


# --- the tools --------------------------------------------------------------------------------


@pytest.fixture
def tools(service: AlarmService) -> dict[str, Tool]:
    return {t.name: t for t in alarms_tools(service)}


def call(tools: dict[str, Tool], name: str, **arguments: Any) -> Any:
    tool = tools[name]
    return tool.call(tool.validate(arguments))


def test_effects_and_descriptions(tools: dict[str, Tool]) -> None:
    assert set(tools) == {
        "set_alarm",
        "set_timer",
        "set_reminder",
        "set_routine",
        "list_alarms",
        "cancel_alarm",
        "snooze_alarm",
        "dismiss_alarm",
    }
    assert tools["list_alarms"].effects == {Effect.READ}
    assert tools["cancel_alarm"].effects == {Effect.LOCAL_WRITE, Effect.DESTRUCTIVE}
    for name in set(tools) - {"list_alarms", "cancel_alarm"}:
        assert tools[name].effects == {Effect.LOCAL_WRITE}, name
    # the gate's tiers: setting one is reversible (Undo cancels it); routines and cancelling ask
    for name in ("set_alarm", "set_timer", "set_reminder"):
        assert tools[name].tier is Tier.REVERSIBLE and tools[name].inverse is not None
    assert tools["set_routine"].tier is Tier.ASK and tools["cancel_alarm"].tier is Tier.ASK
    assert tools["snooze_alarm"].tier_for({"alarm": "all"}) is Tier.REVERSIBLE  # selects none
    time_field = tools["set_alarm"].parameters_schema()["properties"]["time"]
    assert "tomorrow at 9" in time_field["description"]
    assert tools["set_alarm"].parameters_schema()["required"] == ["time"]
    duration = tools["set_timer"].parameters_schema()["properties"]["duration"]
    assert "10 minutes" in duration["description"]


def test_set_alarm_shows_the_resolved_local_time(tools: dict[str, Tool]) -> None:
    result = call(tools, "set_alarm", time="7:30", label="Wake up")
    assert result["summary"] == "Alarm set (Wake up): rings Tue 1 Dec 07:30 (in 6 h 12 min)."
    assert result["at"] == "2026-12-01T07:30:00+01:00"
    assert result["repeat"] == "once" and result["id"] == 1
    assert "botpsy daemon" in result["running_note"]


def test_set_alarm_with_repeats(tools: dict[str, Tool]) -> None:
    weekdays = call(tools, "set_alarm", time="6:45", repeat="weekdays")
    assert weekdays["summary"] == (
        "Alarm set: rings Tue 1 Dec 06:45 (in 5 h 27 min), then weekdays (Mon-Fri)."
    )
    monday = call(tools, "set_alarm", time="every monday at 8")
    assert monday["repeat"] == "every Monday" and monday["rings"].startswith("Mon 7 Dec 08:00")
    with pytest.raises(ToolError, match="repeat rule"):
        call(tools, "set_alarm", time="8:00", repeat="sometimes")


def test_timers_and_reminders(tools: dict[str, Tool]) -> None:
    timer = call(tools, "set_timer", duration="1h30m", label="Oven")
    assert (
        timer["summary"]
        == "Timer set for 1 h 30 min (Oven): rings Tue 1 Dec 02:48 (in 1 h 30 min)."
    )
    reminder = call(tools, "set_reminder", time="tomorrow at 9", text="Call the dentist")
    assert reminder["text"] == "Call the dentist" and reminder["kind"] == "reminder"
    assert reminder["rings"] == "Wed 2 Dec 09:00 (in 1 day 7 h)"
    with pytest.raises(ToolError, match="at most 24 hours"):
        call(tools, "set_timer", duration="2 days")
    with pytest.raises(ToolError) as info:
        call(tools, "set_reminder", time="whenever", text="x")
    assert '"in 20 minutes"' in str(info.value)


def test_list_cancel_by_number_label_and_time(tools: dict[str, Tool]) -> None:
    assert call(tools, "list_alarms")["note"] == "No alarms, timers or reminders are set."
    call(tools, "set_alarm", time="7:30", label="Wake up")
    call(tools, "set_alarm", time="8:15", label="Bus")
    call(tools, "set_timer", duration="10 minutes", label="Tea")
    listed = call(tools, "list_alarms")
    assert listed["count"] == 3 and listed["time_zone"] == "Europe/Paris"
    assert [a["label"] for a in listed["alarms"]] == ["Tea", "Wake up", "Bus"]
    assert listed["alarms"][1]["rings"] == "Tue 1 Dec 07:30 (in 6 h 12 min)"
    assert call(tools, "cancel_alarm", alarm="bus")["summary"] == "Cancelled alarm 2 'Bus'."
    assert call(tools, "cancel_alarm", alarm="the 7:30 alarm")["cancelled"][0]["id"] == 1
    assert call(tools, "cancel_alarm", alarm="#3")["cancelled"][0]["label"] == "Tea"
    with pytest.raises(ToolError, match="nothing to cancel"):
        call(tools, "cancel_alarm", alarm="all")


def test_ambiguous_or_unknown_references_list_the_choices(tools: dict[str, Tool]) -> None:
    call(tools, "set_alarm", time="7:30", label="Gym")
    call(tools, "set_alarm", time="monday 7:30", label="Gym bag")
    with pytest.raises(ToolError) as info:
        call(tools, "cancel_alarm", alarm="7:30")
    assert "2 match" in str(info.value) and "1 = alarm 1 'Gym'" in str(info.value)
    with pytest.raises(ToolError, match="no alarm, timer or reminder number 9"):
        call(tools, "cancel_alarm", alarm="9")
    with pytest.raises(ToolError, match="Nothing matches 'dentist'"):
        call(tools, "cancel_alarm", alarm="dentist")
    assert call(tools, "cancel_alarm", alarm="Gym")["cancelled"][0]["id"] == 1  # exact label
    assert call(tools, "cancel_alarm", alarm="all")["summary"] == "Cancelled alarm 2 'Gym bag'."


def test_snooze_and_dismiss_the_ringing_alarm(
    tools: dict[str, Tool], service: AlarmService, clock: FakeClock
) -> None:
    call(tools, "set_alarm", time="7:30", label="Wake up")
    with pytest.raises(ToolError, match="Nothing is ringing"):
        call(tools, "snooze_alarm")
    clock.set(paris(2026, 12, 1, 7, 30))
    service.fire_due()
    snoozed = call(tools, "snooze_alarm", minutes=5)
    assert snoozed["summary"] == "Snoozed alarm 1 'Wake up' until Tue 1 Dec 07:35 (in 5 min)."
    clock.advance(minutes=5)
    service.fire_due()
    assert call(tools, "list_alarms")["alarms"][0]["status"] == "ringing"
    assert call(tools, "dismiss_alarm")["summary"] == "Dismissed alarm 1 'Wake up'."
    assert call(tools, "list_alarms")["count"] == 0


def test_dismissing_a_repeating_alarm_keeps_the_next_one(
    tools: dict[str, Tool], service: AlarmService, clock: FakeClock
) -> None:
    call(tools, "set_alarm", time="7:00", repeat="daily", label="Up")
    clock.set(paris(2026, 12, 1, 7, 0))
    service.fire_due()
    result = call(tools, "dismiss_alarm", alarm="up")
    assert result["summary"] == (
        "Dismissed alarm 1 'Up'; it rings next Wed 2 Dec 07:00 (in 1 day)."
    )
    assert result["still_set"][0]["status"] == "scheduled"


def test_several_at_once_is_all_or_nothing(
    tools: dict[str, Tool], service: AlarmService, clock: FakeClock
) -> None:
    first = service.add(AlarmKind.ALARM, paris(2026, 12, 1, 7, 30))
    second = service.add(AlarmKind.TIMER, paris(2026, 12, 1, 7, 30), duration=timedelta(hours=6))
    with pytest.raises(ToolError, match="number 99"):
        service.cancel_many([first.id, 99])
    assert len(service.alarms()) == 2  # the first was not cancelled either
    clock.set(paris(2026, 12, 1, 7, 30))
    assert len(service.fire_due()) == 2
    # the tier comes from what a call selects, whatever its words: two alarms ask
    for words in ("", "all", "everything", "all of them!", "ALL."):
        assert tools["snooze_alarm"].tier_for({"alarm": words}) is Tier.ASK, words
        assert tools["dismiss_alarm"].tier_for({"alarm": words}) is Tier.ASK, words
    assert tools["snooze_alarm"].tier_for({"alarm": "2"}) is Tier.REVERSIBLE
    assert tools["dismiss_alarm"].tier_for({"alarm": "2"}) is Tier.ASK  # one-off: deleted
    assert tools["dismiss_alarm"].summarize({"alarm": "everything"}) == (
        "Stop 2 alarms: alarm 1 (alarm); alarm 2 (timer) (one that does not repeat is deleted "
        "for good)"
    )
    snoozed = call(tools, "snooze_alarm")
    assert [a["id"] for a in snoozed["snoozed"]] == [first.id, second.id]
    assert all(a["status"] == "snoozed" for a in snoozed["snoozed"])
    assert call(tools, "dismiss_alarm", alarm="all")["summary"] == (
        "Dismissed alarm 1. Dismissed timer 2."
    )
    assert service.alarms() == []
