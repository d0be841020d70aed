"""Event times, day ranges and repeat rules in words, resolved in code in the user's time zone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo

from botpsy_desktop.adapters.alarms.when import (
    ALL_DAYS,
    DAY_EXAMPLES,
    DAY_NAMES,
    TIME_EXAMPLES,
    format_time,
    is_clock_only,
    localize,
    parse_day,
    parse_duration,
    parse_repeat,
    parse_when,
    utc,
)
from botpsy_desktop.core.errors import ToolError

RANGE_EXAMPLES = (
    '"today", "tomorrow", "friday", "this week", "next week", "this month", "next 14 days", '
    '"2026-06-01" or "2026-06-01 to 2026-06-07"'
)
REPEAT_EXAMPLES = '"never", "daily", "weekly", "weekdays", "monthly", "yearly" or "monday,thursday"'
_ICAL_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")


@dataclass(frozen=True)
class Start:
    """A resolved start: ``at`` for a timed event, or ``day`` for an all-day one."""

    at: datetime | None = None
    day: date | None = None
    note: str = ""
    days: frozenset[int] | None = None
    """Weekdays when the words asked for a repeat ("every monday at 9")."""

    @property
    def all_day(self) -> bool:
        return self.day is not None


def day_start(day: date, tz: tzinfo) -> datetime:
    """Midnight at the start of ``day`` in ``tz`` (moved out of a DST gap if needed)."""
    return localize(datetime.combine(day, time(0)), tz)[0]


def parse_start(text: str, now: datetime, tz: tzinfo) -> Start:
    """A time ("tomorrow 9am", "next tuesday 10:00", ISO) or a day alone (an all-day event)."""
    try:
        when = parse_when(text, now, tz)
    except ToolError as first:
        try:
            return Start(day=parse_day(text, now, tz))
        except ToolError:
            raise ToolError(
                first.message,
                f"Give a time like {TIME_EXAMPLES}, or a day alone for an all-day event.",
            ) from None
    return Start(at=when.at, note=when.note, days=when.days)


def parse_end(
    start: Start, end: str | None, duration: str | None, now: datetime, tz: tzinfo
) -> datetime | date:
    """The exclusive end of an event: from ``end`` ("11am", "friday") or ``duration``.

    With neither, a timed event lasts an hour and an all-day event one day. For an all-day
    event ``end`` is its last day (included), as people say it.
    """
    if end and duration:
        raise ToolError("Both an end and a duration were given.", "Give only one of them.")
    if start.day is not None:
        if duration:
            days = parse_duration(duration).total_seconds() / 86400
            if days != int(days) or days < 1:
                raise ToolError(
                    f"An all-day event lasts whole days, not {duration!r}.",
                    'Give a duration like "2 days", or a time of day in start.',
                )
            return start.day + timedelta(days=int(days))
        if not end:
            return start.day + timedelta(days=1)
        last = parse_day(end, now, tz)
        if last < start.day:
            raise ToolError(
                f"The last day {last:%a %d %b %Y} is before the first {start.day:%a %d %b %Y}.",
                "Give a last day on or after the first.",
            )
        return last + timedelta(days=1)
    assert start.at is not None
    if duration:
        return (utc(start.at) + parse_duration(duration)).astimezone(start.at.tzinfo)
    if not end:
        return (utc(start.at) + timedelta(hours=1)).astimezone(start.at.tzinfo)
    # "11am" (or "eleven") about a later day means the first 11:00 after the start
    at = parse_when(end, start.at if is_clock_only(end) else now, tz).at
    if utc(at) <= utc(start.at):
        raise ToolError("The end is not after the start.", "Give a later end or a duration.")
    return at


def parse_range(text: str | None, now: datetime, tz: tzinfo) -> tuple[datetime, datetime, str]:
    """A span of whole days from words: its start, its exclusive end and a label.

    Empty means the next 7 days from today.
    """
    today = now.astimezone(tz).date()
    s = " ".join((text or "").strip().lower().split())
    first: date
    last: date
    if s in ("", "upcoming", "soon", "coming days", "next days"):
        first, last = today, today + timedelta(days=6)
    elif m := re.fullmatch(r"(?:the )?(?:next|coming|following) (\d{1,3}) days?", s):
        first, last = today, today + timedelta(days=max(1, int(m.group(1))) - 1)
    elif m := re.fullmatch(r"(this|next|last|past) week", s):
        monday = today - timedelta(days=today.weekday())
        shift = {"this": 0, "next": 7, "last": -7, "past": -7}[m.group(1)]
        first = monday + timedelta(days=shift)
        last = first + timedelta(days=6)
    elif m := re.fullmatch(r"(this|next) weekend", s):
        saturday = today + timedelta(days=(5 - today.weekday()) % 7)
        if today.weekday() == 6:
            saturday = today - timedelta(days=1)
        first = saturday + timedelta(days=7 if m.group(1) == "next" else 0)
        last = first + timedelta(days=1)
    elif m := re.fullmatch(r"(this|next|last) month", s):
        year, month = today.year, today.month + {"this": 0, "next": 1, "last": -1}[m.group(1)]
        year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
        first = date(year, month, 1)
        last = date(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)
    else:
        m = re.fullmatch(
            r"(?:from |between )?(.+?)(?: to | until | till | and | - | \u2013 )(.+)", s
        )
        if m and not re.fullmatch(r"\d{4}-\d{1,2}-\d{1,2}", s):
            first = _day(m.group(1), now, tz, s)
            last = _day(m.group(2), now, tz, s)
            if last < first:
                raise ToolError(
                    f"{text!r} ends before it starts.", f"Give a range like {RANGE_EXAMPLES}."
                )
        else:
            first = last = _day(s, now, tz, s)
    if (last - first).days > 366:
        raise ToolError("That range is longer than a year.", "Ask for a shorter range.")
    label = day_label(first) if first == last else f"{day_label(first)} to {day_label(last)}"
    return day_start(first, tz), day_start(last + timedelta(days=1), tz), label


def _day(part: str, now: datetime, tz: tzinfo, whole: str) -> date:
    try:
        return parse_day(part, now, tz)
    except ToolError:
        raise ToolError(
            f"Cannot read {whole!r} as days.",
            f"Give a range like {RANGE_EXAMPLES}, or a day like {DAY_EXAMPLES}.",
        ) from None


def day_label(day: date) -> str:
    return f"{DAY_NAMES[day.weekday()][:3]} {day.day} {day:%b %Y}"


def rrule_for(repeat: str, start: Start) -> dict[str, object] | None:
    """An RRULE (as icalendar takes it) from words, or None for a one-off event."""
    s = " ".join(repeat.strip().lower().split())
    days = start.days
    if s in ("", "never", "none", "no", "once"):
        if days is None:
            return None
    elif s in ("weekly", "every week"):
        return {"FREQ": "WEEKLY"}
    elif s in ("monthly", "every month"):
        return {"FREQ": "MONTHLY"}
    elif s in ("yearly", "annually", "every year"):
        return {"FREQ": "YEARLY"}
    else:
        try:
            days = parse_repeat(s)
        except ToolError:
            raise ToolError(
                f"Cannot read {repeat!r} as a repeat rule.", f"Use one of {REPEAT_EXAMPLES}."
            ) from None
    if not days:
        return None
    if days == ALL_DAYS:
        return {"FREQ": "DAILY"}
    first = start.day if start.day is not None else start.at.date() if start.at else None
    if first is not None and first.weekday() not in days:
        names = ", ".join(DAY_NAMES[d] for d in sorted(days))
        raise ToolError(
            f"The event starts on a {DAY_NAMES[first.weekday()]} but repeats on {names}.",
            "Give a start on one of those days.",
        )
    return {"FREQ": "WEEKLY", "BYDAY": [_ICAL_DAYS[d] for d in sorted(days)]}


def span_text(start: datetime | date, end: datetime | date, now: datetime) -> str:
    """An event's time for people, in ``now``'s zone: "Tue 3 Jun 09:00-10:00", "Fri 6 Jun (all
    day)", "Fri 6 Jun - Sun 8 Jun (all day)"."""
    if not isinstance(start, datetime):
        last = (end if not isinstance(end, datetime) else end.date()) - timedelta(days=1)
        if last <= start:
            return f"{day_text(start, now)} (all day)"
        return f"{day_text(start, now)} - {day_text(last, now)} (all day)"
    assert isinstance(end, datetime)
    a, b = start.astimezone(now.tzinfo), end.astimezone(now.tzinfo)
    head = format_time(a, now)
    if b.date() == a.date():
        return f"{head}-{b:%H:%M}"
    return f"{head} - {format_time(b, now)}"


def day_text(day: date, now: datetime) -> str:
    text = f"{DAY_NAMES[day.weekday()][:3]} {day.day} {day:%b}"
    return text if day.year == now.year else f"{text} {day.year}"
