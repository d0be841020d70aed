"""What the alarm service keeps and reports: kinds, stored alarms, rings, misses, the zone."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, tzinfo
from enum import StrEnum
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from botpsy_desktop.adapters.alarms.when import duration_text, format_time, utc
from botpsy_desktop.core.errors import ConfigError

LATE = timedelta(seconds=60)
"""A ring this much after its time says how late it is (e.g. after the computer slept)."""

Clock = Callable[[], datetime]


class AlarmKind(StrEnum):
    ALARM = "alarm"
    TIMER = "timer"
    REMINDER = "reminder"
    ROUTINE = "routine"
    """A request the assistant runs at the time (``label`` is the request); it never rings."""
    RESTORE = "restore"
    """A change's way back at a set time ("mute for an hour"): ``label`` says it in words,
    ``origin`` is the call id of the change it reverses (agent/restores.py); it never rings."""


Status = Literal["scheduled", "ringing", "snoozed", "missed"]


@dataclass(frozen=True)
class Alarm:
    """One alarm, timer or reminder as stored. Times are aware, in the service's zone.

    ``due`` is the next regular ring (None once a one-off has rung); ``days`` (0 = Monday) is
    empty for one-offs; ``missed_due`` is the last time it should have rung while nothing ran.
    """

    id: int
    kind: AlarmKind
    label: str
    days: frozenset[int]
    time_of_day: time | None
    due: datetime | None
    snoozed_until: datetime | None
    ringing_since: datetime | None
    ringing_due: datetime | None
    missed_due: datetime | None
    missed_count: int
    duration: timedelta | None
    created: datetime
    conversation: str | None = None
    """The conversation a routine runs in (set at its first run)."""
    origin: str | None = None
    """For a routine set while the assistant read content the user did not type: that content,
    named. Its runs are untrusted: every change they ask for waits for the user."""
    catch_up: bool = False
    """For a routine: run it once at the next start when it was due while nothing ran (else
    such a run is skipped; either way the miss is reported once)."""

    @property
    def repeats(self) -> bool:
        return bool(self.days)

    @property
    def next_ring(self) -> datetime | None:
        """When it rings next: the snooze or the regular time, whichever comes first."""
        times = [t for t in (self.due, self.snoozed_until) if t is not None]
        return min(times, key=utc) if times else None

    @property
    def status(self) -> Status:
        if self.ringing_since is not None:
            return "ringing"
        if self.snoozed_until is not None:
            return "snoozed"
        if self.missed_due is not None and self.due is None:
            return "missed"
        return "scheduled"


@dataclass(frozen=True)
class AlarmFired:
    """An alarm, timer or reminder starting to ring: what a notification shows.

    ``due`` is when it was meant to ring and ``fired`` when it did; ``snoozed`` is True when it
    rings again after a snooze.
    """

    id: int
    kind: AlarmKind
    label: str
    due: datetime
    fired: datetime
    snoozed: bool = False
    conversation: str | None = None
    """A routine's conversation from its earlier runs (None before its first run)."""
    origin: str | None = None
    """A routine of untrusted origin (see :attr:`Alarm.origin`); None: the user's own."""

    @property
    def late_by(self) -> timedelta:
        return max(utc(self.fired) - utc(self.due), timedelta(0))

    def line(self) -> str:
        """One line for a terminal or a notification: "ringing: alarm 3 'Wake up' (due ...)"."""
        due = format_time(self.due, self.fired)
        verb = "running" if self.kind is AlarmKind.ROUTINE else "ringing"
        text = f"{verb}: {describe(self.kind, self.id, self.label)} (due {due}"
        if self.snoozed:
            text += ", after a snooze"
        if self.late_by >= LATE:
            text += f", {duration_text(self.late_by)} late"
        return text + ")"

    def as_dict(self) -> dict[str, Any]:
        return {
            "event": "running" if self.kind is AlarmKind.ROUTINE else "ringing",
            "id": self.id,
            "kind": self.kind.value,
            "label": self.label,
            "due": self.due.isoformat(),
            "fired": self.fired.isoformat(),
            "snoozed": self.snoozed,
            "late_s": round(self.late_by.total_seconds(), 3),
        }


@dataclass(frozen=True)
class MissedAlarm:
    """An alarm that should have rung while no service was running, reported at the next start.

    ``due`` is the last time it should have rung, ``count`` how many rings were missed and
    ``next_due`` when a repeating alarm rings next (None for one-offs).
    """

    id: int
    kind: AlarmKind
    label: str
    due: datetime
    count: int
    next_due: datetime | None
    catch_up: bool = False
    """A routine that runs once now for what it missed (else its missed runs are skipped)."""

    def line(self, now: datetime) -> str:
        """One line, e.g. "missed: alarm 3 'Wake up' was due Tue 1 Dec 07:30 (2 times)"; a
        routine also says whether it catches up (runs once now) or skips what it missed."""
        what = describe(self.kind, self.id, self.label)
        text = f"missed: {what} was due {format_time(self.due, now)}"
        extra = []
        if self.count > 1:
            extra.append(f"{self.count} times")
        if self.next_due is not None:
            extra.append(f"next {format_time(self.next_due, now)}")
        text += f" ({', '.join(extra)})" if extra else ""
        if self.kind is AlarmKind.ROUTINE:
            text += "; it catches up: running it once now" if self.catch_up else "; skipped"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "event": "missed",
            "id": self.id,
            "kind": self.kind.value,
            "label": self.label,
            "due": self.due.isoformat(),
            "count": self.count,
            "next_due": self.next_due.isoformat() if self.next_due is not None else None,
            "catch_up": self.catch_up,
        }


Listener = Callable[[AlarmFired], None]


def time_zone(name: str | None) -> tzinfo:
    """The configured IANA zone, or the system's (UTC when the system names none)."""
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ConfigError(
                f"Unknown time zone {name!r} in alarms.time_zone.",
                'Use an IANA name such as "Europe/Paris", or null for the system zone.',
            ) from exc
    import tzlocal

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return tzlocal.get_localzone()
    except Exception:  # a broken system zone setting must not stop the app
        return UTC


def describe(kind: AlarmKind, alarm_id: int, label: str) -> str:
    """The kind, the number and the label if any, as in "alarm 3 'Wake up'"."""
    return f"{kind.value} {alarm_id}" + (f" {label!r}" if label else "")
