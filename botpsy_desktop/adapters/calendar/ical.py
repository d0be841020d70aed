"""iCalendar objects: building events and tasks, reading them back, expanding repeats."""

from __future__ import annotations

import contextlib
import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, Literal

from botpsy_desktop.adapters.untrusted import one_line
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.outside import outside_if

if TYPE_CHECKING:
    # icalendar (~5 MiB, 80 modules) is imported where a calendar is read or built
    import icalendar

PRODID = "-//botpsy-desktop//calendar//EN"
Kind = Literal["VEVENT", "VTODO"]
Component = Any
"""An icalendar component, typed loosely: its property values are a union of ~30 types."""


class CalendarDataError(ToolError):
    """A calendar object is not valid iCalendar."""


@dataclass
class Stored:
    """One calendar object (all of one UID) as kept by a source."""

    uid: str
    ical: icalendar.Calendar
    source: str
    calendar: str
    handle: Any
    """The source's own reference: the file's path, or the object's URL on the server."""
    choices: int = 1
    """For a new object: how many calendars of its source could have held it (several: the
    confirmation says which one it went to)."""

    @property
    def short_id(self) -> str:
        return short_id(self.uid)

    def master(self, kind: Kind) -> Component:
        """The main component (not an overridden occurrence) of ``kind``."""
        found = [c for c in self.ical.walk(kind) if "RECURRENCE-ID" not in c]
        if not found:
            found = list(self.ical.walk(kind))
        if not found:
            raise CalendarDataError(f"The calendar object {self.uid} has no {kind}.")
        return found[0]

    @property
    def where(self) -> str:
        """The source and calendar; outside content when the server named the calendar."""
        if self.calendar in ("", self.source):
            return self.source
        return outside_if(f"{self.source}/{self.calendar}", self.calendar)


def short_id(uid: str) -> str:
    """A short, stable id for a UID, easy for the model to copy."""
    return hashlib.sha1(uid.encode("utf-8")).hexdigest()[:6]


def new_uid() -> str:
    return f"{uuid.uuid4()}@botpsy-desktop"


def parse_ics(data: bytes | str, where: str) -> icalendar.Calendar:
    """Parse one VCALENDAR; a malformed one raises CalendarDataError naming ``where``."""
    import icalendar

    try:
        cal = icalendar.Calendar.from_ical(data)
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise CalendarDataError(
            f"{where} is not valid iCalendar ({str(exc)[:160]}).",
            "Fix or remove it; the other events are still shown.",
        ) from None
    if not isinstance(cal, icalendar.Calendar):
        raise CalendarDataError(f"{where} holds no VCALENDAR.", "Fix or remove it.")
    uids = {str(c.get("UID", "")) for c in cal.walk() if c.name in ("VEVENT", "VTODO")}
    if "" in uids or len(uids) > 1:
        raise CalendarDataError(
            f"{where} has {'an event without a UID' if '' in uids else 'several UIDs'}.",
            "Fix or remove it; each calendar object holds one UID.",
        )
    return cal


def uid_of(cal: icalendar.Calendar) -> str | None:
    for comp in cal.walk():
        if comp.name in ("VEVENT", "VTODO") and comp.get("UID"):
            return str(comp["UID"])
    return None


def kinds_of(cal: icalendar.Calendar) -> set[str]:
    return {c.name for c in cal.walk() if c.name in ("VEVENT", "VTODO")}


def new_calendar(component: Component) -> icalendar.Calendar:
    import icalendar

    cal = icalendar.Calendar()
    cal.add("prodid", PRODID)
    cal.add("version", "2.0")
    cal.add_component(component)
    finish(cal)
    return cal


def finish(cal: icalendar.Calendar) -> None:
    """Add the VTIMEZONE definitions the times refer to (interoperability)."""
    with contextlib.suppress(Exception):  # an odd zone: the times still carry their TZID
        cal.add_missing_timezones()


def ical_time(value: datetime | date) -> datetime | date:
    """A value ready to store: dates as dates, aware times in their IANA zone, else UTC."""
    if not isinstance(value, datetime):
        return value
    if value.tzinfo is None:
        raise ValueError("event times must be timezone-aware")
    if getattr(value.tzinfo, "key", None):
        return value
    return value.astimezone(UTC)


def build_event(
    *,
    uid: str,
    title: str,
    start: datetime | date,
    end: datetime | date,
    location: str = "",
    description: str = "",
    reminder_minutes: int | None = None,
    rrule: dict[str, object] | None = None,
    organizer: str | None = None,
    attendees: Sequence[tuple[str, str]] = (),
) -> icalendar.Calendar:
    import icalendar

    now = datetime.now(UTC).replace(microsecond=0)
    event = icalendar.Event()
    event.add("uid", uid)
    event.add("dtstamp", now)
    event.add("created", now)
    event.add("last-modified", now)
    event.add("sequence", 0)
    event.add("summary", title)
    event.add("dtstart", ical_time(start))
    event.add("dtend", ical_time(end))
    if location:
        event.add("location", location)
    if description:
        event.add("description", description)
    if rrule:
        event.add("rrule", rrule)
    set_attendees(event, organizer, attendees)
    set_reminder(event, reminder_minutes, title)
    return new_calendar(event)


def build_task(*, uid: str, title: str, due: datetime | date | None) -> icalendar.Calendar:
    import icalendar

    now = datetime.now(UTC).replace(microsecond=0)
    todo = icalendar.Todo()
    todo.add("uid", uid)
    todo.add("dtstamp", now)
    todo.add("created", now)
    todo.add("last-modified", now)
    todo.add("summary", title)
    todo.add("status", "NEEDS-ACTION")
    if due is not None:
        todo.add("due", ical_time(due))
    return new_calendar(todo)


def set_attendees(
    event: Component, organizer: str | None, attendees: Sequence[tuple[str, str]]
) -> None:
    """Replace the ORGANIZER and ATTENDEE lines (``attendees``: (name, address) pairs)."""
    import icalendar

    for key in ("ATTENDEE", "ORGANIZER"):
        while key in event:
            del event[key]
    if not attendees:
        return
    if organizer:
        org = icalendar.vCalAddress(f"mailto:{organizer}")
        event.add("organizer", org)
    for name, address in attendees:
        person = icalendar.vCalAddress(f"mailto:{address}")
        if name:
            person.params["CN"] = name
        person.params["ROLE"] = "REQ-PARTICIPANT"
        person.params["PARTSTAT"] = "NEEDS-ACTION"
        person.params["RSVP"] = "TRUE"
        event.add("attendee", person)


def attendee_pairs(comp: Component) -> list[tuple[str, str]]:
    """The attendees as (name, address) pairs; the name may be empty."""
    raw = comp.get("ATTENDEE")
    if raw is None:
        return []
    out = []
    for item in raw if isinstance(raw, list) else [raw]:
        address = str(item)
        if address.lower().startswith("mailto:"):
            address = address[7:]
        params = getattr(item, "params", None) or {}
        out.append((str(params.get("CN", "")), address))
    return out


def attendees_of(comp: Component) -> list[str]:
    """The attendees for people: "Name <address>" or the address."""
    return [f"{n} <{a}>" if n else a for n, a in attendee_pairs(comp)]


def organizer_of(comp: Component) -> str | None:
    value = comp.get("ORGANIZER")
    if value is None:
        return None
    text = str(value)
    return text[7:] if text.lower().startswith("mailto:") else text


def set_reminder(comp: Component, minutes: int | None, title: str) -> None:
    """Replace the alarms with one shown ``minutes`` before the start (None or <0: none)."""
    import icalendar

    comp.subcomponents = [c for c in comp.subcomponents if c.name != "VALARM"]
    if minutes is None or minutes < 0:
        return
    alarm = icalendar.Alarm()
    alarm.add("action", "DISPLAY")
    alarm.add("description", title or "Reminder")
    alarm.add("trigger", timedelta(minutes=-minutes))
    comp.add_component(alarm)


def reminder_of(comp: Component) -> int | None:
    for alarm in comp.walk("VALARM"):
        trigger = alarm.get("TRIGGER")
        value = getattr(trigger, "dt", None)
        if isinstance(value, timedelta):
            return max(0, int(-value.total_seconds() // 60))
    return None


def touch(comp: Component) -> None:
    """Mark a component changed: new DTSTAMP and LAST-MODIFIED, SEQUENCE + 1."""
    now = datetime.now(UTC).replace(microsecond=0)
    for key in ("DTSTAMP", "LAST-MODIFIED"):
        if key in comp:
            del comp[key]
        comp.add(key.lower(), now)
    sequence = int(comp.get("SEQUENCE", 0) or 0) + 1
    if "SEQUENCE" in comp:
        del comp["SEQUENCE"]
    comp.add("sequence", sequence)


def replace_prop(comp: Component, key: str, value: Any) -> None:
    if key.upper() in comp:
        del comp[key.upper()]
    if value not in (None, ""):
        comp.add(key.lower(), value)


def aware(value: datetime | date, tz: tzinfo) -> datetime | date:
    """Floating times are the user's local time; dates stay dates."""
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=tz)
    return value


def times_of(comp: Component, tz: tzinfo) -> tuple[datetime | date, datetime | date]:
    """A component's start and exclusive end (DTEND, DTSTART + DURATION, or the default)."""
    if "DTSTART" not in comp:
        raise CalendarDataError(f"The event {comp.get('UID', '?')} has no start time.")
    start: datetime | date = aware(comp["DTSTART"].dt, tz)
    if "DTEND" in comp:
        end: datetime | date = aware(comp["DTEND"].dt, tz)
    elif "DURATION" in comp:
        end = start + comp["DURATION"].dt
    elif isinstance(start, datetime):
        end = start
    else:
        end = start + timedelta(days=1)
    if isinstance(start, datetime) != isinstance(end, datetime):
        end = start + (timedelta(days=1) if not isinstance(start, datetime) else timedelta(0))
    return start, end


def zone_name(value: datetime | date) -> str | None:
    if isinstance(value, datetime) and value.tzinfo is not None:
        return getattr(value.tzinfo, "key", None)
    return None


MAX_REPEAT_STEPS = 200_000
"""Steps a repeat rule may take from its first date to the end of a range (about a second of
work): an event repeating every second since last year would take 30 million."""
MAX_OCCURRENCES = 2_000
"""Occurrences of one calendar object expanded for one range, at most (each is a copy)."""

_PERIOD_S = {
    "SECONDLY": 1,
    "MINUTELY": 60,
    "HOURLY": 3600,
    "DAILY": 86400,
    "WEEKLY": 7 * 86400,
    "MONTHLY": 28 * 86400,
    "YEARLY": 365 * 86400,
}
_BY_PARTS = ("BYSECOND", "BYMINUTE", "BYHOUR", "BYDAY", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO")


def _first(value: Any) -> Any:
    return value[0] if isinstance(value, list) and value else value


def _as_datetime(value: Any, tz: tzinfo | None) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=tz)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=tz)
    return None


def check_repeats(cal: icalendar.Calendar, start: datetime, end: datetime, kind: Kind) -> None:
    """Raise CalendarDataError for a repeat rule too costly to expand between ``start`` and
    ``end`` (an estimate from its frequency, interval, BY parts, COUNT and UNTIL): too many
    steps from its first date, or too many occurrences in the range."""
    for comp in cal.walk(kind):
        rule = comp.get("RRULE")
        begin = comp.get("DTSTART")
        if rule is None or begin is None:
            continue
        freq = str(_first(rule.get("FREQ")) or "").upper()
        period = _PERIOD_S.get(freq)
        first = _as_datetime(getattr(begin, "dt", None), end.tzinfo)
        if period is None or first is None:
            continue
        try:
            interval = max(int(_first(rule.get("INTERVAL")) or 1), 1)
        except (TypeError, ValueError):
            interval = 1
        last = end
        until = _as_datetime(_first(rule.get("UNTIL")), end.tzinfo)
        if until is not None:
            last = min(last, until)
        per_step = 1
        for part in _BY_PARTS:
            values = rule.get(part)
            if values:
                per_step *= len(values) if isinstance(values, list) else 1
        step_s = period * interval
        steps = max((last - first).total_seconds(), 0) / step_s + 1
        in_range = max((last - max(first, start)).total_seconds(), 0) / step_s * per_step + 1
        count = _first(rule.get("COUNT"))
        if isinstance(count, int):
            steps, in_range = min(steps, count), min(in_range, count)
        if steps > MAX_REPEAT_STEPS or in_range > MAX_OCCURRENCES:
            title = one_line(str(comp.get("SUMMARY", "")) or "(no title)", 80)
            every = f"every {interval} {freq.lower()}" if interval > 1 else freq.lower()
            raise CalendarDataError(
                f"The event {title!r} ({uid_of(cal)}) repeats {every} (RRULE FREQ={freq}): "
                f"about {int(max(steps, in_range)):,} repeats up to this range, too many to "
                "list, so it was left out.",
                "Fix its repeat rule or remove it in your calendar app.",
            )


def occurrences(
    cal: icalendar.Calendar, start: datetime, end: datetime, kind: Kind = "VEVENT"
) -> list[Component]:
    """The occurrences of the object's events between two aware times, repeats expanded.

    Bounded in work and memory: a rule that repeats too often for the range is refused
    (:func:`check_repeats`) before it is expanded.
    """
    import recurring_ical_events  # type: ignore[import-untyped]

    check_repeats(cal, start, end, kind)
    try:
        found: list[Component] = list(
            recurring_ical_events.of(cal, components=[kind]).between(start, end)
        )
    except Exception as exc:  # the library raises its own types for broken rules and dates
        raise CalendarDataError(
            f"The calendar object {uid_of(cal)} cannot be expanded ({type(exc).__name__}: "
            f"{str(exc)[:160]}).",
            "Fix or remove it in your calendar app.",
        ) from None
    return found


def repeat_text(comp: Component) -> str | None:
    rule = comp.get("RRULE")
    if rule is None:
        return None
    freq = rule.get("FREQ", "?")
    text = str(freq[0] if isinstance(freq, list) else freq).lower()
    days = rule.get("BYDAY")
    if days:
        text += " on " + ",".join(str(d) for d in (days if isinstance(days, list) else [days]))
    return text
