"""Calendar and task tools on the local .ics calendar and on a real Radicale CalDAV server."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import icalendar
import pytest

from botpsy_desktop.adapters.calendar import (
    CalDAVSource,
    CalendarService,
    LocalSource,
    calendar_tools,
)
from botpsy_desktop.core.accounts import CalDAVAccount
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tool
from tests.helpers.radicale_server import Radicale, free_port
from tests.helpers.services import radicale  # noqa: F401

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
NOW = datetime(2030, 6, 3, 10, 0, tzinfo=PARIS)  # a Monday morning


def tools(svc: CalendarService) -> dict[str, Tool]:
    return {t.name: t for t in calendar_tools(svc)}


def call(svc: CalendarService, name: str, **args: Any) -> dict[str, Any]:
    tool = tools(svc)[name]
    result = tool.call(tool.validate(args))
    json.dumps(result)
    assert isinstance(result, dict)
    return result


def local(folder: Path, tz: ZoneInfo = PARIS, now: datetime = NOW) -> CalendarService:
    return CalendarService([LocalSource(folder)], tz=tz, now=lambda: now)


def titles(result: dict[str, Any]) -> list[str]:
    return [e["title"] for e in result["events"]]


def test_effects_are_declared_for_the_gate(tmp_path: Path) -> None:
    effects = {t.name: t.effects for t in calendar_tools(local(tmp_path))}
    read, local_write = {Effect.READ}, {Effect.LOCAL_WRITE}
    shared = {Effect.LOCAL_WRITE, Effect.OUTBOUND, Effect.PERSONAL_DATA}
    assert effects == {
        "list_events": read,
        "find_events": read,
        "free_busy": read,
        "create_event": local_write,
        "create_meeting": shared,
        "update_event": local_write,
        "update_meeting": shared,
        "delete_event": {Effect.DESTRUCTIVE},
        "add_task": local_write,
        "list_tasks": read,
        "complete_task": local_write,
    }


def test_local_round_trip_with_relative_dates(tmp_path: Path) -> None:
    svc = local(tmp_path / "cal")
    made = call(svc, "create_event", title="Dentist", start="tomorrow 9am", reminder_minutes=15)
    event = made["created"]
    assert event["when"] == "Tue 4 Jun 09:00-10:00"
    assert event["start"] == "2030-06-04T09:00:00+02:00"
    assert event["reminder"] == "15 min before"
    expect = made["inverse"].pop("expect")  # what an undo checks is still there
    assert made["inverse"] == {
        "tool": "delete_event",
        "arguments": {"event": event["id"], "all_occurrences": True},
    }
    assert expect["attendees"] == [] and expect["sequence"] == 0
    assert svc.state_of(event["id"]) == expect  # read back: unchanged
    [file] = list((tmp_path / "cal").glob("*.ics"))
    stored = icalendar.Calendar.from_ical(file.read_bytes())
    vevent = next(iter(stored.walk("VEVENT")))
    assert vevent["DTSTART"].params["TZID"] == "Europe/Paris"
    assert list(stored.walk("VTIMEZONE")), "the zone is described for other apps"
    assert titles(call(svc, "list_events", when="tomorrow")) == ["Dentist"]

    moved = call(svc, "update_event", event="dentist", start="thursday 14:30")
    assert moved["updated"]["when"] == "Thu 6 Jun 14:30-15:30"  # same length
    assert moved["inverse"]["arguments"] == {
        "event": event["id"],
        "start": "2030-06-04T09:00:00+02:00",
        "end": "2030-06-04T10:00:00+02:00",
    }
    assert call(svc, "list_events", when="tomorrow")["events"] == []
    found = call(svc, "find_events", text="dentist")["events"]
    assert [e["when"] for e in found] == ["Thu 6 Jun 14:30-15:30"]

    renamed = call(
        svc, "update_event", event=event["id"], title="Dentist (Dr Li)", location="Rue X"
    )
    assert renamed["changed"] == ["title", "location"]
    deleted = call(svc, "delete_event", event=event["id"])
    assert deleted["deleted"]["title"] == "Dentist (Dr Li)"
    assert list((tmp_path / "cal").glob("*.ics")) == []


def test_paris_event_shows_at_the_right_hour_in_new_york(tmp_path: Path) -> None:
    call(local(tmp_path), "create_event", title="Call Paris", start="2030-06-05T09:00")
    seen = call(
        local(tmp_path, NEW_YORK, NOW.astimezone(NEW_YORK)), "list_events", when="2030-06-05"
    )
    [event] = seen["events"]
    assert seen["time_zone"] == "America/New_York"
    assert event["when"] == "Wed 5 Jun 03:00-04:00"
    assert event["in_event_zone"] == "Wed 5 Jun 09:00-10:00 Europe/Paris"


def test_all_day_events(tmp_path: Path) -> None:
    svc = local(tmp_path)
    made = call(svc, "create_event", title="Holiday", start="2030-07-01", end="2030-07-03")
    assert made["created"]["when"] == "Mon 1 Jul - Wed 3 Jul (all day)"
    assert made["created"]["start"] == "2030-07-01"
    assert titles(call(svc, "list_events", when="2030-07-02")) == ["Holiday"]
    assert call(svc, "list_events", when="2030-07-04")["events"] == []
    birthday = call(svc, "create_event", title="Birthday", start="friday")
    assert birthday["created"]["when"] == "Fri 7 Jun (all day)"
    day = call(svc, "free_busy", day="friday")
    assert day["busy"] == [] and day["all_day_events"] == ["Birthday"]
    assert day["free"] == ["08:00-20:00"]


def test_repeats_are_expanded(tmp_path: Path) -> None:
    svc = local(tmp_path)
    made = call(
        svc,
        "create_event",
        title="Standup",
        start="tomorrow 9:30",
        duration="15 minutes",
        repeat="weekdays",
    )
    assert made["created"]["repeats"] == "weekly on MO,TU,WE,TH,FR"
    week = call(svc, "list_events", when="next week")
    assert [e["when"] for e in week["events"]] == [
        "Mon 10 Jun 09:30-09:45",
        "Tue 11 Jun 09:30-09:45",
        "Wed 12 Jun 09:30-09:45",
        "Thu 13 Jun 09:30-09:45",
        "Fri 14 Jun 09:30-09:45",
    ]
    with pytest.raises(ToolError, match="all_occurrences=true"):
        call(svc, "delete_event", event="Standup")
    with pytest.raises(ToolError, match="moving a repeating event is not supported"):
        call(svc, "update_event", event="Standup", start="wednesday 10:00")
    call(svc, "delete_event", event="Standup", all_occurrences=True)
    assert call(svc, "list_events", when="next week")["events"] == []


def test_an_ics_written_by_another_app_with_exceptions(tmp_path: Path) -> None:
    (tmp_path / "yoga.ics").write_text(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Other//EN\r\n"
        "BEGIN:VEVENT\r\nUID:yoga-1@other\r\nDTSTAMP:20300101T000000Z\r\n"
        "DTSTART;TZID=America/New_York:20300603T180000\r\n"
        "DTEND;TZID=America/New_York:20300603T190000\r\n"
        "RRULE:FREQ=WEEKLY;COUNT=4\r\nEXDATE;TZID=America/New_York:20300610T180000\r\n"
        "SUMMARY:Yoga\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
        encoding="utf-8",
    )
    month = call(local(tmp_path), "list_events", when="this month")
    # 18:00 in New York is midnight in Paris: the next day there; the 10th is skipped
    assert [e["when"] for e in month["events"]] == [
        "Tue 4 Jun 00:00-01:00",
        "Tue 18 Jun 00:00-01:00",
        "Tue 25 Jun 00:00-01:00",
    ]


def test_a_malformed_ics_is_reported_and_the_rest_still_shown(tmp_path: Path) -> None:
    svc = local(tmp_path)
    call(svc, "create_event", title="Lunch", start="tomorrow 12:00")
    (tmp_path / "broken.ics").write_text("BEGIN:VCALENDAR\nBEGIN:VEVENT\nDTSTART:nonsense\n")
    result = call(svc, "list_events", when="tomorrow")
    assert titles(result) == ["Lunch"]
    [problem] = result["problems"]
    assert "broken.ics" in problem and "not valid iCalendar" in problem


def test_free_busy_merges_and_finds_gaps(tmp_path: Path) -> None:
    svc = local(tmp_path)
    call(svc, "create_event", title="A", start="tomorrow 9:00", duration="1 hour")
    call(svc, "create_event", title="B", start="tomorrow 9:30", duration="1 hour")
    call(svc, "create_event", title="C", start="tomorrow 14:00", end="15:00")
    day = call(svc, "free_busy", day="tomorrow")
    assert day["busy"] == [
        {"time": "09:00-10:00", "title": "A"},
        {"time": "09:30-10:30", "title": "B"},
        {"time": "14:00-15:00", "title": "C"},
    ]
    assert day["free"] == ["08:00-09:00", "10:30-14:00", "15:00-20:00"]


def test_meetings_need_the_meeting_tools(tmp_path: Path) -> None:
    svc = local(tmp_path)
    made = call(
        svc,
        "create_meeting",
        title="Review",
        start="wednesday 14:00",
        attendees="Ana <ana@example.com>, bob@example.com",
    )
    assert made["created"]["attendees"] == ["Ana <ana@example.com>", "bob@example.com"]
    assert made["invitations"].startswith("Not sent: the local calendar only records")
    with pytest.raises(ToolError, match=r"has attendees .* Use update_meeting"):
        call(svc, "update_event", event="Review", start="thursday 14:00")
    changed = call(
        svc,
        "update_meeting",
        event="Review",
        start="thursday 14:00",
        add_attendees="carl@example.com",
        remove_attendees="bob@example.com",
    )
    assert changed["updated"]["attendees"] == ["Ana <ana@example.com>", "carl@example.com"]
    assert changed["inverse"]["tool"] == "update_meeting"
    assert changed["inverse"]["arguments"]["add_attendees"] == "bob@example.com"
    assert changed["inverse"]["arguments"]["remove_attendees"] == "carl@example.com"
    with pytest.raises(ToolError, match="'ana' in attendees is not an email address"):
        call(svc, "create_meeting", title="X", start="friday 9:00", attendees="ana")


def test_ambiguous_and_unknown_events(tmp_path: Path) -> None:
    svc = local(tmp_path)
    call(svc, "create_event", title="Gym", start="tomorrow 7:00")
    call(svc, "create_event", title="Gym", start="wednesday 7:00")
    with pytest.raises(ToolError, match=r"'gym' matches 2 events: id \w+ 'Gym' Tue 4 Jun 07:00"):
        call(svc, "delete_event", event="gym")
    with pytest.raises(ToolError, match="No event matches 'swimming'"):
        call(svc, "delete_event", event="swimming")


def test_times_that_cannot_be_read_or_are_past(tmp_path: Path) -> None:
    svc = local(tmp_path)
    with pytest.raises(ToolError, match="Cannot read 'soonish' as a time"):
        call(svc, "create_event", title="X", start="soonish")
    with pytest.raises(ToolError, match="in the past"):
        call(svc, "create_event", title="X", start="2020-01-01T10:00")
    with pytest.raises(ToolError, match="The end is not after the start"):
        call(svc, "create_event", title="X", start="tomorrow 10:00", end="tomorrow 9:00")
    dst = call(svc, "create_event", title="Night", start="2031-03-30T02:30")
    assert "does not exist" in dst["time_note"]


def test_tasks(tmp_path: Path) -> None:
    svc = local(tmp_path)
    call(svc, "add_task", title="Renew passport", due="friday")
    call(svc, "add_task", title="Buy milk")
    call(svc, "add_task", title="File taxes", due="2030-06-01")
    tasks = call(svc, "list_tasks")["tasks"]
    assert [(t["title"], t.get("due"), t.get("overdue")) for t in tasks] == [
        ("File taxes", "Sat 1 Jun", True),
        ("Renew passport", "Fri 7 Jun", None),
        ("Buy milk", None, None),
    ]
    done = call(svc, "complete_task", task="milk")
    assert done["completed"]["done"] is True
    assert [t["title"] for t in call(svc, "list_tasks")["tasks"]] == [
        "File taxes",
        "Renew passport",
    ]
    everything = call(svc, "list_tasks", include_done=True)["tasks"]
    assert [t["title"] for t in everything][-1] == "Buy milk"


# --- CalDAV on a real Radicale ------------------------------------------------------------------


def caldav_service(
    server: Radicale, user: str, password: str, *, local_folder: Path | None = None, **extra: Any
) -> CalendarService:
    account = CalDAVAccount(name="home", url=server.url, username=user, **extra)
    sources: list[Any] = [LocalSource(local_folder)] if local_folder else []
    sources.append(CalDAVSource(account, lambda: password, timeout_s=10))
    organizers = {"home": account.organizer}
    return CalendarService(sources, tz=PARIS, now=lambda: NOW, organizers=organizers)


def new_calendar(server: Radicale) -> tuple[str, str, Any]:
    user, password = server.new_user()
    calendar = server.client(user).principal().make_calendar(name="Personal")
    return user, password, calendar


def test_caldav_round_trip_seen_by_a_second_client(radicale: Radicale) -> None:  # noqa: F811
    user, password, theirs = new_calendar(radicale)
    svc = caldav_service(radicale, user, password)
    made = call(svc, "create_event", title="Dentist", start="tomorrow 9am", location="Rue X")
    # one calendar: the confirmation does not echo its name (set on the server: outside text)
    assert "calendar" not in made
    [event] = theirs.search(event=True)
    vevent = event.icalendar_component
    assert str(vevent["SUMMARY"]) == "Dentist"
    assert vevent["DTSTART"].dt == datetime(2030, 6, 4, 9, 0, tzinfo=PARIS)
    assert vevent["DTSTART"].params["TZID"] == "Europe/Paris"

    call(svc, "update_event", event="Dentist", start="thursday 16:00")
    [event] = theirs.search(event=True)
    vevent = event.icalendar_component
    assert vevent["DTSTART"].dt == datetime(2030, 6, 6, 16, 0, tzinfo=PARIS)
    assert vevent["DTEND"].dt == datetime(2030, 6, 6, 17, 0, tzinfo=PARIS)
    assert int(vevent["SEQUENCE"]) == 1

    listed = call(svc, "list_events", when="this week")
    assert [(e["title"], e["when"]) for e in listed["events"]] == [
        ("Dentist", "Thu 6 Jun 16:00-17:00")
    ]
    call(svc, "delete_event", event="Dentist")
    assert theirs.search(event=True) == []


def test_caldav_lists_what_other_clients_wrote(radicale: Radicale) -> None:  # noqa: F811
    user, password, theirs = new_calendar(radicale)
    theirs.add_event(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Other//EN\r\n"
        "BEGIN:VEVENT\r\nUID:ny-standup@other\r\nDTSTAMP:20300101T000000Z\r\n"
        "DTSTART;TZID=America/New_York:20300603T090000\r\n"
        "DTEND;TZID=America/New_York:20300603T093000\r\n"
        "RRULE:FREQ=DAILY;COUNT=3\r\nSUMMARY:NY standup\r\nEND:VEVENT\r\n"
        "BEGIN:VEVENT\r\nUID:ny-standup@other\r\nDTSTAMP:20300101T000000Z\r\n"
        "RECURRENCE-ID;TZID=America/New_York:20300604T090000\r\n"
        "DTSTART;TZID=America/New_York:20300604T110000\r\n"
        "DTEND;TZID=America/New_York:20300604T113000\r\n"
        "SUMMARY:NY standup (moved)\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    theirs.add_event(
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//Other//EN\r\n"
        "BEGIN:VEVENT\r\nUID:trip@other\r\nDTSTAMP:20300101T000000Z\r\n"
        "DTSTART;VALUE=DATE:20300604\r\nDTEND;VALUE=DATE:20300606\r\n"
        "SUMMARY:Trip to Lyon\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    week = call(caldav_service(radicale, user, password), "list_events", when="this week")
    assert [(e["title"], e["when"]) for e in week["events"]] == [
        ("NY standup", "Mon 3 Jun 15:00-15:30"),
        ("Trip to Lyon", "Tue 4 Jun - Wed 5 Jun (all day)"),
        ("NY standup (moved)", "Tue 4 Jun 17:00-17:30"),
        ("NY standup", "Wed 5 Jun 15:00-15:30"),
    ]


def test_caldav_tasks_and_meetings(radicale: Radicale) -> None:  # noqa: F811
    user, password, theirs = new_calendar(radicale)
    svc = caldav_service(radicale, user, password, email="me@example.org")
    call(svc, "add_task", title="Send invoice", due="friday 17:00")
    call(svc, "complete_task", task="invoice")
    [todo] = theirs.search(todo=True, include_completed=True)
    assert str(todo.icalendar_component["STATUS"]) == "COMPLETED"
    made = call(
        svc, "create_meeting", title="Review", start="tomorrow 15:00", attendees="ana@example.com"
    )
    assert "from me@example.org" in made["invitations"]
    [event] = theirs.search(event=True)
    component = event.icalendar_component
    assert str(component["ORGANIZER"]) == "mailto:me@example.org"
    assert str(component["ATTENDEE"]) == "mailto:ana@example.com"


def test_caldav_errors_are_clear(radicale: Radicale, tmp_path: Path) -> None:  # noqa: F811
    user, password, _ = new_calendar(radicale)
    wrong = caldav_service(radicale, user, "not-the-password")
    with pytest.raises(ToolError) as exc:
        call(wrong, "list_events")
    assert "refused the user name or password" in str(exc.value)
    assert "not-the-password" not in str(exc.value)

    down = CalDAVAccount(name="home", url=f"http://127.0.0.1:{free_port()}/", username=user)
    svc = CalendarService(
        [LocalSource(tmp_path), CalDAVSource(down, lambda: password, timeout_s=5)],
        tz=PARIS,
        now=lambda: NOW,
    )
    call(svc, "create_event", title="Local one", start="tomorrow 8:00", calendar="local")
    listed = call(svc, "list_events", when="tomorrow")
    assert titles(listed) == ["Local one"]  # the local calendar still answers
    assert "Cannot reach the CalDAV server of account 'home'" in listed["problems"][0]
    with pytest.raises(ToolError, match="Cannot reach the CalDAV server"):
        call(svc, "create_event", title="Remote", start="tomorrow 9:00")
    with pytest.raises(ToolError, match="There is no calendar 'nowhere'"):
        call(svc, "list_events", calendar="nowhere/Personal")


def test_caldav_malformed_object_on_the_server(radicale: Radicale) -> None:  # noqa: F811
    user, password, _ = new_calendar(radicale)
    svc = caldav_service(radicale, user, password)
    call(svc, "create_event", title="Good", start="tomorrow 10:00")
    folder = Path(radicale.storage, "collection-root", user)
    [collection] = [p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    (collection / "broken.ics").write_text(
        "BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nUID:broken\r\nDTSTART:garbage\r\n"
        "END:VEVENT\r\nEND:VCALENDAR\r\n"
    )
    # Radicale leaves out what it cannot read; the listing still works (the client-side check
    # of every object, as for local files, is in test_a_malformed_ics_is_reported...)
    assert titles(call(svc, "list_events", when="tomorrow")) == ["Good"]


def test_day_ranges() -> None:
    from botpsy_desktop.adapters.calendar.dates import parse_range

    def label(text: str) -> str:
        return parse_range(text, NOW, PARIS)[2]

    assert label("") == "Mon 3 Jun 2030 to Sun 9 Jun 2030"
    assert label("today") == "Mon 3 Jun 2030"
    assert label("next week") == "Mon 10 Jun 2030 to Sun 16 Jun 2030"
    assert label("this weekend") == "Sat 8 Jun 2030 to Sun 9 Jun 2030"
    assert label("next month") == "Mon 1 Jul 2030 to Wed 31 Jul 2030"
    assert label("next 3 days") == "Mon 3 Jun 2030 to Wed 5 Jun 2030"
    assert label("yesterday") == "Sun 2 Jun 2030"
    assert label("2030-06-10 to 2030-06-12") == "Mon 10 Jun 2030 to Wed 12 Jun 2030"
    start, end, _ = parse_range("friday", NOW, PARIS)
    assert (start, end - start) == (datetime(2030, 6, 7, tzinfo=PARIS), timedelta(days=1))
    with pytest.raises(ToolError, match="Cannot read 'sometime' as days"):
        parse_range("sometime", NOW, PARIS)
    assert date(2030, 6, 3).weekday() == 0
