"""Sizes ("10 MB") and dates ("last week", "2025-01-01") from the model, resolved in code."""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta
from typing import Final

from botpsy_desktop.adapters.alarms.when import MONTHS, SMALL_NUMBERS
from botpsy_desktop.core.errors import ToolError

_SIZE_UNITS: Final[dict[str, int]] = {
    "": 1,
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "k": 1000,
    "kb": 1000,
    "kilobyte": 1000,
    "kilobytes": 1000,
    "kib": 1024,
    "m": 1000**2,
    "mb": 1000**2,
    "megabyte": 1000**2,
    "megabytes": 1000**2,
    "mib": 1024**2,
    "g": 1000**3,
    "gb": 1000**3,
    "gigabyte": 1000**3,
    "gigabytes": 1000**3,
    "gib": 1024**3,
    "t": 1000**4,
    "tb": 1000**4,
    "terabyte": 1000**4,
    "terabytes": 1000**4,
    "tib": 1024**4,
}

_SIZE_RE: Final = re.compile(r"^(\d+(?:[.,]\d+)*)\s*([a-z]*)$")
_THOUSANDS_RE: Final = re.compile(r"^\d{1,3}(,\d{3})+$")


def parse_size(text: str, field: str) -> int:
    """Bytes from "10 MB", "1.5GB", "500 KiB", "2048" (plain numbers are bytes).

    KB, MB, GB are powers of 1000 (as file managers show them); KiB, MiB, GiB powers of 1024.
    """
    cleaned = text.strip().casefold().replace("_", "")
    match = _SIZE_RE.match(cleaned)
    unit = match.group(2) if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise ToolError(
            f"{field} {text!r} is not a size I understand.",
            'Write a number and a unit, e.g. "10 MB", "500 KB", "1.5 GB", or a number of bytes.',
        )
    number = match.group(1)
    number = number.replace(",", "") if _THOUSANDS_RE.match(number) else number.replace(",", ".")
    try:
        value = float(number)
    except ValueError:
        raise ToolError(
            f"{field} {text!r} is not a size I understand.", 'Write it like "10 MB".'
        ) from None
    return round(value * _SIZE_UNITS[unit])


def format_size(size: int) -> str:
    """A size as people read it: "512 bytes", "1.2 MB" (powers of 1000)."""
    if size < 1000:
        return f"{size} byte" if size == 1 else f"{size} bytes"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1000
        if value < 999.95 or unit == "TB":
            shown = f"{value:.1f}".removesuffix(".0")
            return f"{shown} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


_WEEKDAYS: Final = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


_AGO_RE: Final = re.compile(
    r"^(?P<n>\d+|[a-z]+)\s+(?P<unit>minute|hour|day|week|month|year)s?\s+ago$"
)
_PAST_RE: Final = re.compile(
    r"^(?:last|past|the\s+last|the\s+past|in\s+the\s+last|in\s+the\s+past)\s+"
    r"(?:(?P<n>\d+|[a-z]+)\s+)?(?P<unit>minute|hour|day|week|month|year)s?$"
)
_DMY_RE: Final = re.compile(r"^(?P<d>\d{1,2})(?:st|nd|rd|th)?\s+(?P<m>[a-z]+)\.?,?\s+(?P<y>\d{4})$")
_MDY_RE: Final = re.compile(r"^(?P<m>[a-z]+)\.?\s+(?P<d>\d{1,2})(?:st|nd|rd|th)?,?\s+(?P<y>\d{4})$")
_MY_RE: Final = re.compile(r"^(?P<m>[a-z]+)\.?\s+(?P<y>\d{4})$")

DATE_EXAMPLES: Final = (
    '"2025-01-01", "2025-01-01 14:30", "today", "yesterday", "last week", "3 days ago", '
    '"this month", "monday", "March 2025"'
)


def _midnight(day: date) -> datetime:
    """The start of ``day`` in the computer's local time zone."""
    return datetime(day.year, day.month, day.day).astimezone()


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    month += 1
    for last in (31, 30, 29, 28):
        try:
            return date(year, month, min(day.day, last))
        except ValueError:
            continue
    raise AssertionError("unreachable")  # pragma: no cover


def _count(word: str | None) -> int | None:
    if word is None:
        return 1
    if word.isdigit():
        return int(word)
    return SMALL_NUMBERS.get(word)


def _back(now: datetime, n: int, unit: str) -> datetime:
    """``n`` units before ``now``: exact for minutes and hours, from midnight for days and up."""
    if unit == "minute":
        return now - timedelta(minutes=n)
    if unit == "hour":
        return now - timedelta(hours=n)
    today = now.date()
    if unit == "day":
        return _midnight(today - timedelta(days=n))
    if unit == "week":
        return _midnight(today - timedelta(weeks=n))
    if unit == "month":
        return _midnight(_add_months(today, -n))
    return _midnight(_add_months(today, -12 * n))


def parse_when(text: str, now: datetime, field: str) -> datetime:
    """A moment from a date the model wrote, resolved against ``now`` (local, aware).

    A date without a time means its start (midnight, local time). "last week" is seven days ago,
    "last month" the same day a month ago, "monday" the latest Monday (today if it is Monday),
    "last monday" the one before today.
    """
    now = now.astimezone()
    raw = text.strip()
    cleaned = re.sub(r"\s+", " ", raw.casefold()).strip(" .")
    cleaned = cleaned.removeprefix("since ").removeprefix("from ")
    if not cleaned:
        raise ToolError(f"{field} is empty.", f"Give a date, e.g. {DATE_EXAMPLES}.")
    parsed = _parse_iso(raw.strip())
    if parsed is not None:
        return parsed
    if cleaned == "now":
        return now
    if cleaned == "today":
        return _midnight(now.date())
    if cleaned == "yesterday":
        return _midnight(now.date() - timedelta(days=1))
    if cleaned in ("this week", "start of this week"):
        return _midnight(now.date() - timedelta(days=now.weekday()))
    if cleaned in ("this month", "start of this month"):
        return _midnight(now.date().replace(day=1))
    if cleaned in ("this year", "start of this year"):
        return _midnight(date(now.year, 1, 1))
    for pattern in (_AGO_RE, _PAST_RE):
        match = pattern.match(cleaned)
        if match:
            n = _count(match.group("n"))
            if n is not None and n <= 10_000:
                return _back(now, n, match.group("unit"))
    weekday = cleaned.removeprefix("last ")
    if weekday in _WEEKDAYS:
        back = (now.weekday() - _WEEKDAYS.index(weekday)) % 7
        if cleaned.startswith("last ") and back == 0:
            back = 7
        return _midnight(now.date() - timedelta(days=back))
    found = _parse_named_date(cleaned)
    if found is not None:
        return _midnight(found)
    raise ToolError(
        f"{field} {raw!r} is not a date I understand.", f"Write it like one of {DATE_EXAMPLES}."
    )


def _parse_iso(text: str) -> datetime | None:
    """ISO dates and times ("2025-01-01", "2025-01-01T14:30", with an offset or "Z"), a year."""
    if re.fullmatch(r"\d{4}", text):
        return _midnight(date(int(text), 1, 1))
    if re.fullmatch(r"\d{4}-\d{2}", text):
        year, month = text.split("-")
        try:
            return _midnight(date(int(year), int(month), 1))
        except ValueError:
            return None
    if not re.match(r"^\d{4}-\d{2}-\d{2}", text):
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return None
    if len(text) == 10:
        return _midnight(value.date())
    return value.astimezone() if value.tzinfo is None else value


def _parse_named_date(text: str) -> date | None:
    """ "1 March 2025", "March 1, 2025", "March 2025" (month names in English)."""
    for pattern in (_DMY_RE, _MDY_RE, _MY_RE):
        match = pattern.match(text)
        if not match:
            continue
        month = MONTHS.get(match.group("m"))
        if month is None:
            return None
        day = int(match.groupdict().get("d") or 1)
        try:
            return date(int(match.group("y")), month, day)
        except ValueError:
            return None
    return None
