"""Argument and value checks of the case format: exact, any-of, text, dates, numbers, paths."""

from __future__ import annotations

import math
import os
import posixpath
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, tzinfo
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.alarms.when import parse_day, parse_duration, parse_when
from botpsy_desktop.core.errors import BotpsyError

KINDS = (
    "exact",
    "any_of",
    "text",
    "contains",
    "contains_any",
    "time",
    "date",
    "duration",
    "number",
    "path",
    "email",
    "any",
    "absent",
)
"""Every check a case may use (one per check object, plus ``optional`` and ``tolerance``)."""

_ISO_DURATION = re.compile(
    r"P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)
_ADDRESS = re.compile(r"[\w.+'-]+@[\w-]+(?:\.[\w-]+)+", re.UNICODE)


class CheckError(ValueError):
    """A check object in a case is not valid; the message names what is wrong."""


@dataclass(frozen=True)
class Context:
    """What a check needs to resolve the model's values: the case's clock and the sandbox home."""

    now: datetime
    tz: tzinfo
    home: Path


@dataclass(frozen=True)
class Check:
    """One parsed check: ``kind`` from KINDS and its ``value``; ``optional`` allows absence."""

    kind: str
    value: Any = None
    tolerance: float = 0.0
    optional: bool = False

    def passes(self, value: Any, ctx: Context) -> bool:
        """Whether the model's ``value`` (present) passes this check."""
        try:
            return _passes(self, value, ctx)
        except (BotpsyError, ValueError, TypeError, OverflowError):
            return False


def parse_check(spec: Any, where: str) -> Check:
    """A check from its JSON object; ``where`` names it in the error (case and argument)."""
    if not isinstance(spec, Mapping):
        raise CheckError(f'{where}: a check must be an object such as {{"exact": ...}}')
    optional = spec.get("optional", False)
    if not isinstance(optional, bool):
        raise CheckError(f"{where}: optional must be true or false")
    kinds = [k for k in spec if k not in ("optional", "tolerance")]
    if len(kinds) != 1 or kinds[0] not in KINDS:
        raise CheckError(
            f"{where}: a check needs exactly one of {', '.join(KINDS)} (got {sorted(spec)})"
        )
    kind = kinds[0]
    value = spec[kind]
    tolerance = spec.get("tolerance", 0)
    if "tolerance" in spec and kind != "number":
        raise CheckError(f"{where}: tolerance goes only with number")
    if kind == "any_of" and (not isinstance(value, list) or not value):
        raise CheckError(f"{where}: any_of needs a non-empty list of values")
    if kind in ("contains", "contains_any"):
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise CheckError(f"{where}: {kind} needs a string or a list of strings")
    if kind in ("text", "path") and not isinstance(value, str):
        raise CheckError(f"{where}: {kind} needs a string")
    if kind == "time":
        _local(value, where)
    if kind == "date":
        _day(value, where)
    if kind == "duration":
        value = duration_of(value, where)
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CheckError(f"{where}: number needs a number")
        if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance < 0:
            raise CheckError(f"{where}: tolerance must be a number >= 0")
    if kind == "email":
        value = [value] if isinstance(value, str) else value
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise CheckError(f"{where}: email needs an address or a list of addresses")
        value = sorted(a.lower() for a in value)
    if kind in ("any", "absent") and value is not True:
        raise CheckError(f'{where}: write {{"{kind}": true}}')
    return Check(kind, value, float(tolerance), optional)


def default_check(canonical: Any) -> Check:
    """The check of an argument with only a canonical value: exact equality."""
    return Check("exact", canonical)


def _local(text: Any, where: str) -> datetime:
    if not isinstance(text, str):
        raise CheckError(f"{where}: a time is a string YYYY-MM-DDTHH:MM")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CheckError(f"{where}: {text!r} is not a local time YYYY-MM-DDTHH:MM") from None
    if moment.tzinfo is not None:
        raise CheckError(f"{where}: {text!r}: write local wall time, without an offset")
    return moment


def _day(text: Any, where: str) -> date:
    if not isinstance(text, str):
        raise CheckError(f"{where}: a day is a string YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise CheckError(f"{where}: {text!r} is not a day YYYY-MM-DD") from None


def duration_of(value: Any, where: str) -> float:
    """Seconds from an ISO 8601 duration ("PT10M") or words ("10 minutes")."""
    if isinstance(value, str):
        iso = _ISO_DURATION.fullmatch(value.strip())
        if iso and any(iso.groupdict().values()):
            parts = {k: float(v) if v else 0.0 for k, v in iso.groupdict().items()}
            return parts["d"] * 86400 + parts["h"] * 3600 + parts["m"] * 60 + parts["s"]
        try:
            return parse_duration(value).total_seconds()
        except BotpsyError:
            pass
    raise CheckError(f"{where}: {value!r} is not a duration (PT10M or 10 minutes)")


def fold(text: str) -> str:
    """Text for loose comparison: NFC, lower case, runs of white space as one space."""
    return re.sub(r"\s+", " ", unicodedata.normalize("NFC", text)).strip().casefold()


def same(a: Any, b: Any) -> bool:
    """Exact equality of JSON values: strings trimmed, 7 == 7.0, booleans never numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=0, abs_tol=1e-9)
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


def resolve_time(value: Any, ctx: Context) -> datetime | None:
    """The moment the model's time text means, as the alarms and calendar tools read it."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=ctx.tz)
    if not isinstance(value, str):
        return None
    try:
        return parse_when(value, ctx.now, ctx.tz).at
    except BotpsyError:
        return None


def resolve_day(value: Any, ctx: Context) -> date | None:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    if not isinstance(value, str):
        return None
    try:
        return parse_day(value, ctx.now, ctx.tz)
    except BotpsyError:
        moment = resolve_time(value, ctx)
        return moment.astimezone(ctx.tz).date() if moment else None


def normal_path(value: str, home: Path) -> str:
    """A path as one string: ``~`` and the home's absolute path alike, no trailing ``/``."""
    text = value.strip()
    home_text = os.fspath(home)
    if text == "~" or text.startswith("~/"):
        text = home_text + text[1:]
    elif not posixpath.isabs(text):
        text = posixpath.join(home_text, text)
    return posixpath.normpath(text)


def addresses(value: Any) -> list[str] | None:
    if isinstance(value, list):
        value = ", ".join(str(v) for v in value)
    if not isinstance(value, str):
        return None
    return sorted(a.lower() for a in _ADDRESS.findall(value))


def _passes(check: Check, value: Any, ctx: Context) -> bool:
    kind, expected = check.kind, check.value
    if kind == "any":
        return True
    if kind == "absent":
        return value is None
    if kind == "exact":
        return same(value, expected)
    if kind == "any_of":
        return any(same(value, v) for v in expected)
    if kind == "text":
        return isinstance(value, str) and fold(value) == fold(expected)
    if kind == "contains":
        return isinstance(value, str) and all(fold(p) in fold(value) for p in expected)
    if kind == "contains_any":
        return isinstance(value, str) and any(fold(p) in fold(value) for p in expected)
    if kind == "time":
        moment = resolve_time(value, ctx)
        want = datetime.fromisoformat(expected).replace(tzinfo=ctx.tz)
        return moment is not None and moment.astimezone(ctx.tz).replace(tzinfo=None) == (
            want.replace(tzinfo=None)
        )
    if kind == "date":
        return resolve_day(value, ctx) == date.fromisoformat(expected)
    if kind == "duration":
        if isinstance(value, int | float) and not isinstance(value, bool):
            return math.isclose(float(value), expected)
        seconds = duration_of(value, "the model's value")
        return math.isclose(seconds, expected, abs_tol=0.5)
    if kind == "number":
        if isinstance(value, str):
            value = float(value.strip())
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return bool(abs(float(value) - float(expected)) <= check.tolerance + 1e-9)
    if kind == "path":
        return isinstance(value, str) and normal_path(value, ctx.home) == normal_path(
            expected, ctx.home
        )
    if kind == "email":
        return bool(addresses(value) == expected)
    raise AssertionError(kind)
