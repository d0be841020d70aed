"""Natural times, durations and repeat rules resolved in code against the user's time zone."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from botpsy_desktop.core.errors import ToolError

ALL_DAYS: frozenset[int] = frozenset(range(7))
WEEKDAYS: frozenset[int] = frozenset(range(5))
WEEKENDS: frozenset[int] = frozenset({5, 6})

TIME_EXAMPLES = (
    '"7:30", "7:30 pm", "19:30", "noon", "tomorrow at 9", "monday 8am", "in 20 minutes", '
    '"1 December at 7:30" or "2026-12-01T07:30"'
)
DURATION_EXAMPLES = '"10 minutes", "1h30m", "90 seconds", "2 hours", "half an hour" or "5:00"'
REPEAT_EXAMPLES = '"never", "daily", "weekdays", "weekends", "monday" or "monday,wednesday,friday"'

MAX_DURATION = timedelta(days=3660)
"""Durations beyond ten years are refused as misreadings before any date arithmetic."""

DAY_NAMES = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_DAY_WORDS: dict[str, int] = {}
for _i, _name in enumerate(DAY_NAMES):
    _low = _name.lower()
    _DAY_WORDS[_low] = _DAY_WORDS[_low[:3]] = _i
_DAY_WORDS.update({"tues": 1, "weds": 2, "thur": 3, "thurs": 3})

MONTHS: dict[str, int] = {}
"""Month names and their short forms ("sep", "sept") to 1-12."""
for _i, _name in enumerate(
    (
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ),
    start=1,
):
    MONTHS[_name] = _i
    MONTHS[_name[:3]] = _i
MONTHS["sept"] = 9

SMALL_NUMBERS: dict[str, int] = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
"""Numbers people write as words, "a" to "twelve" ("a week ago", "in two hours")."""

NOON = ("noon", "midday", "12 noon", "12 midday")
MIDNIGHT = ("midnight", "12 midnight")

_UNITS: dict[str, float] = {}
for _unit, _seconds in (
    (("s", "sec", "secs", "second", "seconds"), 1.0),
    (("m", "min", "mins", "minute", "minutes"), 60.0),
    (("h", "hr", "hrs", "hour", "hours"), 3600.0),
    (("d", "day", "days"), 86400.0),
):
    for _u in _unit:
        _UNITS[_u] = _seconds

_DAY_ALT = "|".join(sorted(_DAY_WORDS, key=len, reverse=True))
_FULL_DAY_ALT = "|".join(d.lower() for d in DAY_NAMES)
_MONTH_ALT = "|".join(sorted(MONTHS, key=len, reverse=True))


@dataclass(frozen=True)
class When:
    """A resolved moment: ``at`` is aware, in the user's zone; ``note`` explains any adjustment.

    ``days`` is set when the text itself asked for a repeat ("every monday at 8", "daily at 7").
    """

    at: datetime
    note: str = ""
    days: frozenset[int] | None = None


def utc(at: datetime) -> datetime:
    """The same moment in UTC: compare and add to aware times only this way.

    Python compares and subtracts two datetimes sharing one tzinfo by their wall clocks, which is
    wrong across a DST change; in UTC it is exact.
    """
    return at.astimezone(UTC)


def shift(at: datetime, by: timedelta) -> datetime:
    """``at`` moved by an exact duration (not by wall-clock time), in ``at``'s zone."""
    assert at.tzinfo is not None
    return (utc(at) + by).astimezone(at.tzinfo)


def _normalise(text: str) -> str:
    s = text.strip().lower()
    s = s.replace("a.m.", "am").replace("p.m.", "pm").replace("o'clock", "").replace("oclock", "")
    s = re.sub(r"[\s,;]+", " ", s)
    return s.strip(" .!?")


# --- local wall time --------------------------------------------------------------------------


def localize(naive: datetime, tz: tzinfo) -> tuple[datetime, str]:
    """Attach ``tz`` to a wall-clock time, moving out of DST gaps; return it and a note.

    A time that does not exist (clocks go forward) moves forward by the gap; a time that happens
    twice (clocks go back) means the first of the two.
    """
    first = naive.replace(tzinfo=tz, fold=0)
    back = first.astimezone(UTC).astimezone(tz)
    if back.replace(tzinfo=None) != naive:
        return back, (
            f"{naive:%H:%M} does not exist on {_day_text(naive.date())} because the clocks go "
            f"forward; it is set for {back:%H:%M} instead."
        )
    if naive.replace(tzinfo=tz, fold=1).utcoffset() != first.utcoffset():
        return back, (
            f"{naive:%H:%M} happens twice on {_day_text(naive.date())} because the clocks go "
            f"back; it is set for the first one (UTC{_offset_text(back)})."
        )
    return back, ""


def _offset_text(dt: datetime) -> str:
    offset = dt.utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"{sign}{hours:02d}:{mins:02d}"


def next_occurrence(days: frozenset[int], at: time, after: datetime, tz: tzinfo) -> datetime:
    """The first moment after ``after`` on one of ``days`` (0 = Monday) at wall time ``at``.

    Computed on the calendar in ``tz``, so a daily 07:30 stays 07:30 across DST changes.
    """
    if not days:
        raise ValueError("next_occurrence needs at least one day")
    start = after.astimezone(tz).date()
    for offset in range(9):
        day = start + timedelta(days=offset)
        if day.weekday() not in days:
            continue
        candidate, _ = localize(datetime.combine(day, at), tz)
        if utc(candidate) > utc(after):
            return candidate
    raise AssertionError("a weekly rule always has an occurrence within 9 days")


# --- durations --------------------------------------------------------------------------------


def parse_duration(text: str) -> timedelta:
    """A positive duration from "10 minutes", "1h30m", "90 seconds", "5:00", "PT10M"...

    A bare number means minutes. Raises ToolError with examples when it cannot be read.
    """
    d = _duration_or_none(text)
    if d is None:
        raise ToolError(
            f"Cannot read {text.strip()!r} as a duration.",
            f"Give it like {DURATION_EXAMPLES}.",
        )
    if d <= timedelta(0):
        raise ToolError(
            f"The duration {text.strip()!r} is zero.",
            f"Give a positive one, e.g. {DURATION_EXAMPLES}.",
        )
    return d


def _duration_or_none(text: str, *, bare_number: bool = True) -> timedelta | None:
    s = _normalise(text)
    s = re.sub(r"^(in|for|after)\s+", "", s)
    s = re.sub(r"\s+(from now|later)$", "", s)
    iso = re.fullmatch(
        r"p(?:(\d+(?:\.\d+)?)d)?(?:t(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?)?",
        s,
    )
    if iso and any(iso.groups()):
        d, h, m, sec = (float(g) if g else 0.0 for g in iso.groups())
        return _length(((d * 24 + h) * 60 + m) * 60 + sec)
    clock = re.fullmatch(r"(\d{1,3}):(\d{2})(?::(\d{2}))?", s)
    if clock:
        a, b, c = clock.groups()
        if c is None:  # mm:ss, as a kitchen timer shows it
            if int(b) > 59:
                return None
            return timedelta(minutes=int(a), seconds=int(b))
        if int(b) > 59 or int(c) > 59:
            return None
        return timedelta(hours=int(a), minutes=int(b), seconds=int(c))
    s = re.sub(r"\bhalf an? hour\b", "30 minutes", s)
    s = re.sub(r"\ba quarter of an hour\b|\ba quarter hour\b", "15 minutes", s)
    # numbers in words ("twenty-five", "seventeen"), then "and a half" on digits
    # ("two and a half hours"), then "a"/"an" as one ("an hour")
    s = _COUNT_WORD.sub(lambda m: str(_COUNT_WORDS[m.group(0)]), s)
    s = re.sub(r"\b(an?|1) (hour|minute|day) and a half\b", r"1.5 \2", s)
    s = re.sub(r"\b(\d+) (\w+) and a half\b", r"\1.5 \2", s)
    s = re.sub(r"\b(\d+) and a half (\w+)\b", r"\1.5 \2", s)
    s = re.sub(r"\ban?\b", "1", s)
    s = re.sub(r"(\d)([a-z])", r"\1 \2", s)
    s = re.sub(r"([a-z])(\d)", r"\1 \2", s)
    tokens = [t for t in re.split(r"[\s,]+|\band\b|\+", s) if t]
    if not tokens:
        return None
    if len(tokens) == 1 and re.fullmatch(r"\d+(?:[.,]\d+)?", tokens[0]):
        return _length(60 * float(tokens[0].replace(",", "."))) if bare_number else None
    total = 0.0
    last_unit: float | None = None
    i = 0
    while i < len(tokens):
        number = tokens[i]
        if not re.fullmatch(r"\d+(?:[.,]\d+)?", number):
            return None
        value = float(number.replace(",", "."))
        unit = _UNITS.get(tokens[i + 1]) if i + 1 < len(tokens) else None
        if unit is None:
            # "1h30": a trailing number counts in the next smaller unit
            if i + 1 == len(tokens) and last_unit in (3600.0, 60.0):
                total += value * last_unit / 60.0
                return _length(total)
            return None
        total += value * unit
        last_unit = unit
        i += 2
    return _length(total)


def _length(total: float) -> timedelta:
    if not total <= MAX_DURATION.total_seconds():  # also refuses NaN
        raise ToolError("That duration is far too long.", f"Give one like {DURATION_EXAMPLES}.")
    return timedelta(seconds=total)


def duration_text(d: timedelta) -> str:
    """A duration in short words, e.g. "1 h 30 min", "90 s" under two minutes."""
    seconds = round(d.total_seconds())
    if seconds < 120:
        return f"{seconds} s"
    return _span(seconds)


# --- repeat rules -----------------------------------------------------------------------------


def parse_repeat(text: str) -> frozenset[int]:
    """Weekdays (0 = Monday) from "daily", "weekdays", "weekends", "monday,wednesday"...

    An empty set means it does not repeat. Raises ToolError with examples otherwise.
    """
    s = _normalise(text)
    if s in ("", "never", "none", "no", "once", "one time", "one-off", "not", "false", "0"):
        return frozenset()
    days = _days_or_none(s)
    if days is None:
        raise ToolError(
            f"Cannot read {text.strip()!r} as a repeat rule.", f"Use one of {REPEAT_EXAMPLES}."
        )
    return days


def _days_or_none(s: str) -> frozenset[int] | None:
    s = re.sub(r"\b(every|each|on|all|repeat|repeats|repeating)\b", " ", s)
    s = re.sub(r"\s+", " ", s).strip()
    if s in ("day", "days", "daily", "everyday", "every day", "7 days"):
        return ALL_DAYS
    if s in ("weekday", "weekdays", "workday", "workdays", "work day", "work days", "week days"):
        return WEEKDAYS
    if s in ("weekend", "weekends", "weekend days", "saturday and sunday"):
        return WEEKENDS
    s = re.sub(r"\s*(?:-|\u2013|\bto\b|\bthrough\b|\bthru\b|\buntil\b)\s*", "-", s)
    tokens = [t for t in re.split(r"[\s,/&+]+|\band\b", s) if t]
    if not tokens:
        return None
    days: set[int] = set()
    for token in tokens:
        if "-" in token:
            ends = token.split("-")
            if len(ends) != 2:
                return None
            a, b = _day_word(ends[0]), _day_word(ends[1])
            if a is None or b is None:
                return None
            day = a
            days.add(day)
            while day != b:
                day = (day + 1) % 7
                days.add(day)
            continue
        single = _day_word(token)
        if single is None:
            return None
        days.add(single)
    return frozenset(days)


def _day_word(word: str) -> int | None:
    word = word.strip(".")
    if word in _DAY_WORDS:
        return _DAY_WORDS[word]
    if word.endswith("s") and word[:-1] in _DAY_WORDS and len(word) > 3:
        return _DAY_WORDS[word[:-1]]
    return None


def repeat_text(days: frozenset[int]) -> str:
    """A repeat rule in words: "once", "every day", "weekdays", "every Monday", "Mon, Wed"."""
    if not days:
        return "once"
    if days == ALL_DAYS:
        return "every day"
    if days == WEEKDAYS:
        return "weekdays (Mon-Fri)"
    if days == WEEKENDS:
        return "weekends (Sat, Sun)"
    if len(days) == 1:
        return f"every {DAY_NAMES[next(iter(days))]}"
    return "every " + ", ".join(DAY_NAMES[d][:3] for d in sorted(days))


def repeat_key(days: frozenset[int]) -> str:
    """A repeat rule as stored: the weekday digits, e.g. "01234"; "" for once."""
    return "".join(str(d) for d in sorted(days))


def repeat_from_key(key: str) -> frozenset[int]:
    return frozenset(int(c) for c in key)


# --- times ------------------------------------------------------------------------------------

_ISO = re.compile(
    r"\d{4}-\d{2}-\d{2}[t ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?",
)
_CLOCK = re.compile(r"(\d{1,2})(?:[:.h](\d{2}))?(?::(\d{2}))?\s*(am|pm)?")


@dataclass
class _Parts:
    day_offset: int | None = None  # today = 0, tomorrow = 1
    weekday: int | None = None
    skip_this_week: bool = False  # "next monday" said on a Monday
    on_date: date | None = None
    year_given: bool = True
    half: str | None = None  # "am" / "pm" preference from "tonight", "evening", "morning"
    days: frozenset[int] | None = None


def parse_when(text: str, now: datetime, tz: tzinfo) -> When:
    """Resolve a time the user or the model gave into an aware moment after ``now``, in ``tz``.

    Accepts times of day ("7:30", "7:30 pm", "noon"), days ("today", "tomorrow", "monday",
    "1 December", "2026-12-01"), relative times ("in 20 minutes") and ISO 8601. A time of day
    alone means its next occurrence. Raises ToolError with examples when it cannot be read, or
    when an explicit time is already past.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    now = now.astimezone(tz)
    raw = text.strip()
    s = _normalise(raw)
    if not s:
        raise ToolError("The time is empty.", f"Give one like {TIME_EXAMPLES}.")

    if _ISO.fullmatch(s):
        return _from_iso(raw, now, tz)

    relative = re.fullmatch(r"(?:in|after)\s+(.+)|(.+?)\s+(?:from now|later)", s)
    if relative:
        d = _duration_or_none(relative.group(1) or relative.group(2), bare_number=False)
        if d is not None and d > timedelta(0):
            return When(shift(now, d))

    parts = _Parts()
    s = _take_repeat(s, parts)
    s = _take_day(s, parts, now, raw)
    s = _take_half(s, parts)
    s = re.sub(r"\b(at|on|for|the)\b|@", " ", s)
    s = re.sub(r"\s+", " ", s).strip()

    plus_days = 0
    if s in NOON:
        clock = time(12, 0)
    elif s in MIDNIGHT:
        clock, plus_days = time(0, 0), 1
    elif not s:
        if (
            parts.days is None
            and parts.day_offset is None
            and parts.weekday is None
            and (parts.on_date is None)
        ):
            raise _cannot_read(raw)
        raise ToolError(
            f"{raw!r} has a day but no time of day.",
            'Add one, e.g. "tomorrow at 7:30" or "monday 8am".',
        )
    else:
        parsed = _clock_or_none(s, parts.half)
        if parsed is None:
            if parts == _Parts() and re.search(r"[a-z]", s):  # "20 minutes", not "25:00"
                d = _duration_or_none(s, bare_number=False)
                if d is not None and d > timedelta(0):
                    return When(shift(now, d))
            raise _cannot_read(raw)
        clock = parsed
    return _resolve(parts, clock, plus_days, now, tz, raw)


def is_clock_only(text: str) -> bool:
    """Whether ``text`` is a time of day and nothing else ("11am", "at 9:30", "eleven thirty",
    "noon"): no day, no relative time."""
    s = re.sub(r"^at ", "", _normalise(text))
    return s in NOON or s in MIDNIGHT or (_clock_or_none(s, None) is not None)


def _cannot_read(raw: str) -> ToolError:
    return ToolError(f"Cannot read {raw!r} as a time.", f"Give it like {TIME_EXAMPLES}.")


def _from_iso(raw: str, now: datetime, tz: tzinfo) -> When:
    iso = raw.strip().upper().replace(" ", "T")
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError:
        raise _cannot_read(raw) from None
    note = ""
    if parsed.tzinfo is None:
        at, note = localize(parsed, tz)
    else:
        at = parsed.astimezone(tz)
    if utc(at) <= utc(now):
        raise ToolError(
            f"{raw} is in the past (it is now {format_time(now, now)}).",
            "Give a time in the future.",
        )
    return When(at, note)


def _take_repeat(s: str, parts: _Parts) -> str:
    day = rf"(?:{_DAY_ALT})"
    full = rf"(?:{_FULL_DAY_ALT})"
    patterns = (
        r"\b(?:every ?day|each day|daily)\b",
        r"\b(?:every|on|each) (?:weekday|workday)s?\b|\bweekdays\b",
        r"\b(?:every|on|each) weekends?\b|\bweekends\b",
        rf"\b(?:every|each) {day}s?(?:(?: ?, ?| and | ?& ?){day}s?)*\b",
        rf"\b(?:on )?{full}s(?:(?: ?, ?| and | ?& ?){full}s)*\b",
    )
    for pattern in patterns:
        m = re.search(pattern, s)
        if m:
            days = _days_or_none(m.group(0))
            if days:
                parts.days = days
                return (s[: m.start()] + " " + s[m.end() :]).strip()
    return s


def _take_day(s: str, parts: _Parts, now: datetime, raw: str) -> str:
    found: list[tuple[int, int]] = []

    def take(pattern: str) -> re.Match[str] | None:
        m = re.search(pattern, s)
        if m:
            found.append((m.start(), m.end()))
        return m

    if take(r"\b(?:the )?day after tomorrow\b"):
        parts.day_offset = 2
    elif take(r"\b(?:tomorrow|tmrw|tmr)\b"):
        parts.day_offset = 1
    elif take(r"\btoday\b"):
        parts.day_offset = 0
    elif take(r"\btonight\b"):
        parts.day_offset, parts.half = 0, "pm"
    if m := take(rf"\b(?:(next|this|on|coming) )?({_DAY_ALT})\b(?!-)"):
        parts.weekday = _DAY_WORDS[m.group(2)]
        parts.skip_this_week = m.group(1) == "next"
    if m := take(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"):
        parts.on_date = _make_date(int(m.group(1)), int(m.group(2)), int(m.group(3)), raw)
    elif m := take(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTH_ALT})\.?(?: (\d{{4}}))?\b"):
        parts.year_given = m.group(3) is not None
        year = int(m.group(3)) if m.group(3) else now.year
        parts.on_date = _make_date(year, MONTHS[m.group(2)], int(m.group(1)), raw)
    elif m := take(rf"\b({_MONTH_ALT})\.? (\d{{1,2}})(?:st|nd|rd|th)?(?: (\d{{4}}))?\b"):
        parts.year_given = m.group(3) is not None
        year = int(m.group(3)) if m.group(3) else now.year
        parts.on_date = _make_date(year, MONTHS[m.group(1)], int(m.group(2)), raw)
    kinds = sum(x is not None for x in (parts.day_offset, parts.weekday, parts.on_date))
    if kinds > 1 or (kinds and parts.days is not None):
        raise ToolError(
            f"{raw!r} names more than one day.",
            'Give one day and a time, e.g. "tomorrow at 9" or "monday 8am".',
        )
    for start, end in sorted(found, reverse=True):
        s = s[:start] + " " + s[end:]
    return s.strip()


def _take_half(s: str, parts: _Parts) -> str:
    m = re.search(r"\b(?:in the |this )?(morning|afternoon|evening|night)\b", s)
    if not m:
        return s
    parts.half = "am" if m.group(1) == "morning" else "pm"
    if m.group(0).startswith("this ") and parts.day_offset is None:
        parts.day_offset = 0
    return (s[: m.start()] + " " + s[m.end() :]).strip()


def _make_date(year: int, month: int, day: int, raw: str) -> date:
    try:
        return date(year, month, day)
    except ValueError:
        raise ToolError(
            f"{raw!r} names a day that does not exist.", "Check the day and month."
        ) from None


_UNIT_WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_CLOCK_WORDS: dict[str, int] = {w: i for i, w in enumerate(_UNIT_WORDS, start=1)}
_TEEN_WORDS = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
for _i, _word in enumerate(_TEEN_WORDS.split(), start=10):
    _CLOCK_WORDS[_word] = _i
for _tens, _word in ((20, "twenty"), (30, "thirty"), (40, "forty"), (50, "fifty")):
    _CLOCK_WORDS[_word] = _tens
    for _i, _one in enumerate(_UNIT_WORDS, start=1):
        _CLOCK_WORDS[f"{_word}-{_one}"] = _CLOCK_WORDS[f"{_word} {_one}"] = _tens + _i
_CLOCK_WORD_ALT = "|".join(sorted(_CLOCK_WORDS, key=len, reverse=True))
_COUNT_WORDS = {**_CLOCK_WORDS, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
"""Numbers in words from one to ninety, as durations say them ("twenty-five minutes")."""
_COUNT_WORD = re.compile(rf"\b(?:{'|'.join(sorted(_COUNT_WORDS, key=len, reverse=True))})\b")
_AGO_WORDS = {"a": 1, "an": 1, **_COUNT_WORDS}
"""Counts of days or weeks back in words ("a week ago", "twenty days ago")."""
_OH_UNIT = re.compile(rf"\b(?:oh|o) ({'|'.join(_UNIT_WORDS)})\b")
_CLOCK_WORD = re.compile(rf"\b(?:{_CLOCK_WORD_ALT})\b")


def _clock_digits(s: str) -> str:
    """A time of day said in words or run together, in the digits _CLOCK reads, as speech
    recognisers and people write them: "seven thirty" and "six forty-five pm" (-> "7:30",
    "6:45 pm"), "ten oh five" ("10:05"), "half past six" ("half past 6"), "645" and "0730 am"
    ("6:45", "07:30 am"), "7 30" ("7:30"). Anything else comes back as it was."""
    s = re.sub(r"^an? (?=(?:half|quarter)\b)", "", s)  # "a quarter to seven"
    s = _OH_UNIT.sub(lambda m: f"0{_CLOCK_WORDS[m.group(1)]}", s)
    s = _CLOCK_WORD.sub(lambda m: str(_CLOCK_WORDS[m.group(0)]), s)
    together = re.fullmatch(r"(\d{1,2}) (\d{2})( ?(?:am|pm))?", s)  # "7 30", "6 45 pm"
    if together is None:
        together = re.fullmatch(r"(\d{1,2})(\d{2})( ?(?:am|pm))?", s)  # "645", "0730 am"
    if together is not None:
        hour, minute, suffix = together.groups()
        return f"{hour}:{minute}{suffix or ''}"
    return s


def _clock_or_none(s: str, half: str | None) -> time | None:
    s = _clock_digits(s)
    spoken = re.fullmatch(
        r"(half|quarter|\d{1,2})(?: minutes?)? (past|after|to) (\d{1,2})(?: ?(am|pm))?", s
    )
    if spoken:  # "half past 7", "quarter to 8 pm", "10 past 9"
        amount, way, of, suffix = spoken.groups()
        minutes = {"half": 30, "quarter": 15}.get(amount) or int(amount)
        base = _clock_or_none(f"{of} {suffix}" if suffix else of, half)
        if base is None or minutes >= 60:
            return None
        total = base.hour * 60 + (minutes if way != "to" else -minutes)
        return time(total // 60 % 24, total % 60)
    m = _CLOCK.fullmatch(s)
    if not m:
        return None
    hour, minute = int(m.group(1)), int(m.group(2) or 0)
    second = int(m.group(3) or 0)
    suffix = m.group(4)
    if minute > 59 or second > 59:
        return None
    if suffix:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if suffix == "pm" else 0)
    elif hour > 23:
        return None
    elif half == "pm" and 1 <= hour <= 11:
        hour += 12
    return time(hour, minute, second)


def _resolve(
    parts: _Parts, clock: time, plus_days: int, now: datetime, tz: tzinfo, raw: str
) -> When:
    today = now.date()

    def at_day(day: date) -> tuple[datetime, str]:
        return localize(datetime.combine(day + timedelta(days=plus_days), clock), tz)

    if parts.days is not None:
        at = next_occurrence(parts.days, clock, now, tz)
        _, note = localize(datetime.combine(at.date(), clock), tz)
        return When(at, note, parts.days)
    if parts.on_date is not None:
        at, note = at_day(parts.on_date)
        if utc(at) <= utc(now) and not parts.year_given:
            at, note = at_day(parts.on_date.replace(year=parts.on_date.year + 1))
        if utc(at) <= utc(now):
            raise ToolError(
                f"{raw!r} is in the past (it is now {format_time(now, now)}).",
                "Give a time in the future.",
            )
        return When(at, note)
    if parts.weekday is not None:
        ahead = (parts.weekday - today.weekday()) % 7
        if ahead == 0 and parts.skip_this_week:
            ahead = 7
        at, note = at_day(today + timedelta(days=ahead))
        if utc(at) <= utc(now):
            at, note = at_day(today + timedelta(days=ahead + 7))
        return When(at, note)
    if parts.day_offset is not None:
        at, note = at_day(today + timedelta(days=parts.day_offset))
        if utc(at) <= utc(now):
            raise ToolError(
                f"{raw!r} has already passed (it is now {format_time(now, now)}).",
                f'Give a later time, or say "tomorrow at {clock:%H:%M}".',
            )
        return When(at, note)
    at, note = at_day(today)
    if utc(at) <= utc(now):
        at, note = at_day(today + timedelta(days=1))
    return When(at, note)


# --- days (no time of day) ---------------------------------------------------------------------

DAY_EXAMPLES = (
    '"today", "tomorrow", "yesterday", "friday", "next tuesday", "last monday", "3 days ago", '
    '"1 December" or "2026-12-01"'
)


def parse_day(text: str, now: datetime, tz: tzinfo, *, past: bool = False) -> date:
    """Resolve a day the user or the model gave (no time of day) to a date in ``tz``.

    Accepts what :func:`parse_when` reads as a day ("today", "tomorrow", "friday", "next
    tuesday", "1 December", "2026-12-01") plus "yesterday", "N days ago", "N weeks ago" and
    "last friday". A weekday or a day and month without a year mean the next such day, today
    included; with ``past`` the latest one, today included. Raises ToolError with examples.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    now = now.astimezone(tz)
    today = now.date()
    raw = text.strip()
    s = re.sub(r"^(?:on|the)\s+", "", _normalise(raw))
    if not s:
        raise ToolError("The day is empty.", f"Give one like {DAY_EXAMPLES}.")
    if s == "yesterday":
        return today - timedelta(days=1)
    words = "|".join(sorted(_AGO_WORDS, key=len, reverse=True))
    if m := re.fullmatch(rf"(\d+|{words}) (day|week)s? ago", s):
        count = int(m.group(1)) if m.group(1).isdigit() else _AGO_WORDS[m.group(1)]
        if count > 3660:
            raise ToolError(f"{raw!r} is too far back.", f"Give a day like {DAY_EXAMPLES}.")
        return today - timedelta(days=count * (7 if m.group(2) == "week" else 1))
    if m := re.fullmatch(rf"last ({_DAY_ALT})", s):
        back = (today.weekday() - _DAY_WORDS[m.group(1)]) % 7 or 7
        return today - timedelta(days=back)
    parts = _Parts()
    rest = re.sub(r"\b(?:on|the|of)\b", " ", _take_day(s, parts, now, raw)).strip()
    if rest or parts.days is not None:
        if parts.days is None and _clock_or_none(rest, None) is not None:
            raise ToolError(
                f"{raw!r} has a time of day; a day alone is needed here.",
                f"Give a day like {DAY_EXAMPLES}.",
            )
        raise ToolError(f"Cannot read {raw!r} as a day.", f"Give one like {DAY_EXAMPLES}.")
    if parts.day_offset is not None:
        return today + timedelta(days=parts.day_offset)
    if parts.weekday is not None:
        if past:
            return today - timedelta(days=(today.weekday() - parts.weekday) % 7)
        ahead = (parts.weekday - today.weekday()) % 7
        if ahead == 0 and parts.skip_this_week:
            ahead = 7
        return today + timedelta(days=ahead)
    if parts.on_date is not None:
        day = parts.on_date
        if not parts.year_given and (day > today if past else day < today):
            day = _make_date(day.year + (-1 if past else 1), day.month, day.day, raw)
        return day
    raise ToolError(f"Cannot read {raw!r} as a day.", f"Give one like {DAY_EXAMPLES}.")


# --- showing times ----------------------------------------------------------------------------


def _day_text(day: date) -> str:
    return f"{DAY_NAMES[day.weekday()][:3]} {day.day} {day:%b}"


def format_time(at: datetime, now: datetime) -> str:
    """A moment for people, e.g. "Tue 1 Dec 07:30"; seconds when set, the year if not now's."""
    local = at.astimezone(now.tzinfo)
    text = _day_text(local.date())
    if local.year != now.year:
        text += f" {local.year}"
    clock = f"{local:%H:%M:%S}" if local.second else f"{local:%H:%M}"
    return f"{text} {clock}"


def format_when(at: datetime, now: datetime) -> str:
    """A moment and how far it is, e.g. "Tue 1 Dec 07:30 (in 6 h 12 min)"."""
    return f"{format_time(at, now)} ({relative_text(at, now)})"


def relative_text(at: datetime, now: datetime) -> str:
    """ "in 6 h 12 min", "in 45 s", "3 min ago", "now"."""
    seconds = round((utc(at) - utc(now)).total_seconds())
    if seconds == 0:
        return "now"
    span = _span(abs(seconds))
    return f"in {span}" if seconds > 0 else f"{span} ago"


def _span(seconds: int) -> str:
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        minutes, secs = divmod(seconds, 60)
        return f"{minutes} min {secs} s" if secs and minutes < 10 else f"{minutes} min"
    if seconds < 86400:
        hours, rest = divmod(seconds, 3600)
        minutes = rest // 60
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, rest = divmod(seconds, 86400)
    hours = rest // 3600
    unit = "day" if days == 1 else "days"
    return f"{days} {unit} {hours} h" if hours else f"{days} {unit}"
