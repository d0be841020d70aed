"""The alarm service: alarms kept in the app's SQLite file, rung on time by an APScheduler thread.

Why our own table rather than APScheduler's SQLAlchemyJobStore as the source of truth: a job store
keeps pickled callables and trigger state, and at start APScheduler either runs overdue jobs late
or drops them past ``misfire_grace_time`` with only a log line; it reads the wall clock itself, so
"missed while closed" cannot be decided against an injected clock, and it has no place for what
the user sees (label, ringing, snoozed, missed since when). Here the ``alarms`` table says what
each alarm is and when it rings next; APScheduler (3.x, in-memory jobs) only wakes the service at
those moments. At ``start()`` anything overdue by more than ``missed_after`` is marked missed and
reported (with when it was due), never rung silently late; a recurring alarm moves on to its next
occurrence. The table is shared by processes (the window, ``botpsy daemon``, ``botpsy ask``):
changes made elsewhere are noticed through ``PRAGMA data_version``, and every transition is a
conditional update, so an alarm rings once even with two running services.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta, tzinfo
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from botpsy_desktop.adapters.alarms.when import (
    duration_text,
    format_time,
    next_occurrence,
    repeat_from_key,
    repeat_key,
    shift,
    utc,
)
from botpsy_desktop.core.config import AlarmSettings
from botpsy_desktop.core.dbsafety import backup_before_migration
from botpsy_desktop.core.errors import ConfigError, StoreError, ToolError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
"""2: ``conversation`` (the conversation a routine runs in) added to ``alarms``; 3: ``origin``
(a routine set from content the user did not type: it runs as untrusted content)."""
MAX_AHEAD = timedelta(days=366)
"""Alarms further ahead than this are refused (almost always a misread date)."""
KEEP_MISSED = timedelta(days=7)
"""A one-off alarm reported as missed stays listed this long unless dismissed."""
LATE = timedelta(seconds=60)
"""A ring this much after its time says how late it is (e.g. after the computer slept)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS alarms (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    label TEXT NOT NULL,
    days TEXT NOT NULL DEFAULT '',
    time_of_day TEXT,
    due REAL,
    snoozed_until REAL,
    ringing_since REAL,
    ringing_due REAL,
    missed_due REAL,
    missed_count INTEGER NOT NULL DEFAULT 0,
    missed_reported INTEGER NOT NULL DEFAULT 1,
    duration_s REAL,
    created REAL NOT NULL,
    conversation TEXT,
    origin TEXT
);
"""

Clock = Callable[[], datetime]


class AlarmKind(StrEnum):
    ALARM = "alarm"
    TIMER = "timer"
    REMINDER = "reminder"
    ROUTINE = "routine"
    """A request the assistant runs at the time (``label`` is the request); it never rings."""


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
        text = f"{verb}: {_what(self.kind, self.id, self.label)} (due {due}"
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

    def line(self, now: datetime) -> str:
        """One line, e.g. "missed: alarm 3 'Wake up' was due Tue 1 Dec 07:30 (2 times)"."""
        text = (
            f"missed: {_what(self.kind, self.id, self.label)} was due {format_time(self.due, now)}"
        )
        extra = []
        if self.count > 1:
            extra.append(f"{self.count} times")
        if self.next_due is not None:
            extra.append(f"next {format_time(self.next_due, now)}")
        return text + (f" ({', '.join(extra)})" if extra else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "event": "missed",
            "id": self.id,
            "kind": self.kind.value,
            "label": self.label,
            "due": self.due.isoformat(),
            "count": self.count,
            "next_due": self.next_due.isoformat() if self.next_due is not None else None,
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


class AlarmService:
    """Alarms, timers and reminders: stored in SQLite, rung by a background scheduler.

    Without ``start()`` it is a plain store (what ``botpsy ask`` needs: no thread is started).
    ``start()`` reports alarms missed while nothing ran and starts the scheduler thread; listeners
    then receive an ``AlarmFired`` on that thread when something rings. ``now`` (aware) and ``tz``
    can be injected; ``fire_due()`` rings whatever is due by ``now()`` and is what the scheduler
    calls.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        tz: tzinfo | None = None,
        now: Clock | None = None,
        snooze: timedelta = timedelta(minutes=9),
        ring_for: timedelta = timedelta(minutes=10),
        missed_after: timedelta = timedelta(seconds=60),
        max_timer: timedelta = timedelta(hours=24),
        max_alarms: int = 100,
        poll_interval_s: float = 2.0,
    ) -> None:
        self.path = Path(path)
        self.tz: tzinfo = tz if tz is not None else time_zone(None)
        self._clock: Clock = now if now is not None else (lambda: datetime.now(UTC))
        self.snooze_default = snooze
        self.ring_for = ring_for
        self.missed_after = missed_after
        self.max_timer = max_timer
        self.max_alarms = max_alarms
        self.poll_interval_s = poll_interval_s
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._seen_version: int | None = None
        self._scheduler: BackgroundScheduler | None = None
        self._listeners: list[Listener] = []
        self._closed = False

    @classmethod
    def from_settings(
        cls, path: Path | str, settings: AlarmSettings, *, now: Clock | None = None
    ) -> AlarmService:
        return cls(
            path,
            tz=time_zone(settings.time_zone),
            now=now,
            snooze=timedelta(minutes=settings.snooze_minutes),
            ring_for=timedelta(minutes=settings.ring_minutes),
            missed_after=timedelta(seconds=settings.missed_after_s),
            max_timer=timedelta(hours=settings.max_timer_hours),
            max_alarms=settings.max_alarms,
        )

    # --- clock, listeners, lifecycle ----------------------------------------------------------

    def now(self) -> datetime:
        current = self._clock()
        if current.tzinfo is None:
            raise ValueError("the alarm clock must return timezone-aware datetimes")
        return current.astimezone(self.tz)

    @property
    def time_zone_name(self) -> str:
        return str(getattr(self.tz, "key", None) or self.tz)

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener`` (on the scheduler's thread) each time something starts ringing."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Listener) -> None:
        with self._lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    @property
    def running(self) -> bool:
        return self._scheduler is not None

    def start(self) -> list[MissedAlarm]:
        """Report what was missed while nothing ran, then ring alarms on time until shutdown."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this AlarmService was shut down")
            if self._scheduler is not None:
                return []
            now = self.now()
            with self._transaction() as db:
                self._mark_missed(db, now)
                self._expire(db, now)
                missed = self._take_unreported(db)
            scheduler = BackgroundScheduler(
                timezone=UTC,
                executors={"default": ThreadPoolExecutor(2)},
                job_defaults={"misfire_grace_time": None, "coalesce": True, "max_instances": 1},
            )
            scheduler.add_jobstore("memory", alias="alarms")
            scheduler.add_job(
                self._poll,
                IntervalTrigger(seconds=self.poll_interval_s, timezone=UTC),
                id="poll",
            )
            scheduler.start()
            self._scheduler = scheduler
            self._seen_version = self._data_version()
            self._sync_jobs()
        return missed

    def shutdown(self) -> None:
        """Stop the scheduler (waiting for a ring in progress) and close the database."""
        with self._lock:
            scheduler, self._scheduler = self._scheduler, None
            self._closed = True
        if scheduler is not None:
            scheduler.shutdown(wait=True)
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # --- operations ---------------------------------------------------------------------------

    def add(
        self,
        kind: AlarmKind,
        at: datetime,
        *,
        label: str = "",
        days: Iterable[int] = (),
        duration: timedelta | None = None,
        origin: str | None = None,
    ) -> Alarm:
        """Store a new alarm ringing at ``at`` (aware); with ``days`` it repeats at that wall time.

        A repeating alarm first rings on the first of ``days`` on or after ``at`` that is still
        to come.
        """
        if at.tzinfo is None:
            raise ValueError("alarm times must be timezone-aware")
        days_set = frozenset(days)
        if not days_set <= frozenset(range(7)):
            raise ValueError("days are 0 (Monday) to 6 (Sunday)")
        now = self.now()
        at = at.astimezone(self.tz)
        tod: time | None = None
        if days_set:
            tod = at.time().replace(tzinfo=None)
            start = max(shift(at, -timedelta(microseconds=1)), now, key=utc)
            at = next_occurrence(days_set, tod, start, self.tz)
        if utc(at) <= utc(now):
            raise ToolError(
                f"{format_time(at, now)} is already past (it is now {format_time(now, now)}).",
                "Give a time in the future.",
            )
        if utc(at) - utc(now) > MAX_AHEAD:
            raise ToolError(
                f"{format_time(at, now)} is more than a year ahead.",
                "Give a time within the next year.",
            )
        if duration is not None and duration > self.max_timer:
            raise ToolError(
                f"Timers can run for at most {self.max_timer.total_seconds() / 3600:g} hours.",
                "Use set_alarm with a time of day for anything longer.",
            )
        with self._lock, self._transaction() as db:
            (count,) = db.execute("SELECT COUNT(*) FROM alarms").fetchone()
            if count >= self.max_alarms:
                raise ToolError(
                    f"There are already {count} alarms, timers and reminders (the limit).",
                    "Cancel some with cancel_alarm first.",
                )
            cur = db.execute(
                "INSERT INTO alarms (kind, label, days, time_of_day, due, duration_s, created, "
                "origin) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    kind.value,
                    label.strip(),
                    repeat_key(days_set),
                    tod.isoformat() if tod else None,
                    at.timestamp(),
                    duration.total_seconds() if duration is not None else None,
                    now.timestamp(),
                    origin,
                ),
            )
            alarm_id = int(cur.lastrowid or 0)
        self._after_change()
        alarm = self.get(alarm_id)
        assert alarm is not None
        return alarm

    def get(self, alarm_id: int) -> Alarm | None:
        with self._lock:
            row = self._conn().execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,)).fetchone()
        return self._alarm(row) if row is not None else None

    def alarms(self) -> list[Alarm]:
        """Every alarm, ringing ones first, then by when they ring next.

        When no service runs, overdue alarms are marked missed first (and reported at the next
        start), so a list never shows a time in the past as still to come.
        """
        with self._lock:
            now = self.now()
            with self._transaction() as db:
                if self._scheduler is None:
                    self._mark_missed(db, now)
                self._expire(db, now)
                rows = db.execute("SELECT * FROM alarms").fetchall()
        items = [self._alarm(r) for r in rows]
        far = datetime.max.replace(tzinfo=UTC)
        return sorted(
            items,
            key=lambda a: (
                a.status != "ringing",
                a.status == "missed",
                utc(a.next_ring or a.missed_due or far),
                a.id,
            ),
        )

    def ringing(self) -> list[Alarm]:
        return [a for a in self.alarms() if a.status == "ringing"]

    def cancel(self, alarm_id: int) -> Alarm:
        """Delete an alarm (every future ring of a repeating one)."""
        return self.cancel_many([alarm_id])[0]

    def cancel_many(self, alarm_ids: Sequence[int]) -> list[Alarm]:
        """Delete several alarms in one transaction: all of them, or none if one is unknown."""
        with self._lock, self._transaction() as db:
            alarms = [self._require(db, i) for i in alarm_ids]
            db.executemany("DELETE FROM alarms WHERE id = ?", [(i,) for i in alarm_ids])
        self._after_change()
        return alarms

    def snooze(self, alarm_id: int, length: timedelta | None = None) -> Alarm:
        """Silence a ringing alarm and ring it again after ``length`` (default: the setting)."""
        return self.snooze_many([alarm_id], length)[0]

    def snooze_many(self, alarm_ids: Sequence[int], length: timedelta | None = None) -> list[Alarm]:
        """Snooze several ringing alarms at once: all of them, or none if one is not ringing."""
        length = length if length is not None else self.snooze_default
        if length <= timedelta(0):
            raise ToolError("The snooze length must be positive.", "Give minutes, e.g. 9.")
        with self._lock:
            now = self.now()
            with self._transaction() as db:
                self._expire(db, now)
                for alarm_id in alarm_ids:
                    alarm = self._require(db, alarm_id)
                    if alarm.status != "ringing":
                        raise ToolError(
                            f"{_name(alarm)} is not ringing, so it cannot be snoozed.",
                            _not_ringing_hint(alarm, now),
                        )
                    db.execute(
                        "UPDATE alarms SET snoozed_until = ?, ringing_since = NULL, "
                        "ringing_due = NULL WHERE id = ?",
                        ((utc(now) + length).timestamp(), alarm_id),
                    )
                rows = [self._require(db, i) for i in alarm_ids]
        self._after_change()
        return rows

    def dismiss(self, alarm_id: int) -> Alarm | None:
        """Stop a ringing (or snoozed, or missed) alarm; a one-off is then done and removed.

        Returns the alarm as it is afterwards, or None when nothing is left of it. A repeating
        alarm keeps its next occurrence.
        """
        return self.dismiss_many([alarm_id])[0]

    def dismiss_many(self, alarm_ids: Sequence[int]) -> list[Alarm | None]:
        """Dismiss several alarms in one transaction: all of them, or none if one cannot be."""
        with self._lock:
            now = self.now()
            with self._transaction() as db:
                self._expire(db, now)
                for alarm_id in alarm_ids:
                    alarm = self._require(db, alarm_id)
                    if alarm.status == "scheduled" and alarm.missed_due is None:
                        raise ToolError(
                            f"{_name(alarm)} is not ringing, snoozed or missed; "
                            "nothing to dismiss.",
                            _not_ringing_hint(alarm, now),
                        )
                    db.execute(
                        "UPDATE alarms SET ringing_since = NULL, ringing_due = NULL, "
                        "snoozed_until = NULL, missed_due = NULL, missed_count = 0, "
                        "missed_reported = 1 WHERE id = ?",
                        (alarm_id,),
                    )
                self._delete_finished(db)
                rows = [
                    db.execute("SELECT * FROM alarms WHERE id = ?", (i,)).fetchone()
                    for i in alarm_ids
                ]
        self._after_change()
        return [self._alarm(r) if r is not None else None for r in rows]

    def set_conversation(self, alarm_id: int, conversation_id: str) -> None:
        """Remember the conversation routine ``alarm_id`` runs in (reused by its next runs)."""
        with self._lock, self._transaction() as db:
            db.execute(
                "UPDATE alarms SET conversation = ? WHERE id = ?", (conversation_id, alarm_id)
            )

    def missed(self) -> list[Alarm]:
        """Alarms that missed a ring and were not dismissed yet."""
        return [a for a in self.alarms() if a.missed_due is not None]

    def fire_due(self) -> list[AlarmFired]:
        """Ring everything due by ``now()``: update the store, then tell the listeners."""
        fired: list[AlarmFired] = []
        with self._lock:
            if self._closed:
                return []
            now = self.now()
            stamp = now.timestamp()
            with self._transaction() as db:
                rows = db.execute(
                    "SELECT * FROM alarms WHERE due <= ? OR snoozed_until <= ?", (stamp, stamp)
                ).fetchall()
                for row in rows:
                    event = self._ring(db, self._alarm(row), now)
                    if event is not None:
                        fired.append(event)
            listeners = list(self._listeners)
        if fired:
            self._after_change()
        for event in fired:
            for listener in listeners:
                try:
                    listener(event)
                except Exception:
                    # the id and kind only: a reminder's or routine's text is the user's words
                    log.exception("an alarm listener failed on %s %s", event.kind.value, event.id)
        return fired

    # --- internals ----------------------------------------------------------------------------

    def _ring(self, db: sqlite3.Connection, alarm: Alarm, now: datetime) -> AlarmFired | None:
        regular = alarm.due is not None and utc(alarm.due) <= utc(now)
        snoozed = alarm.snoozed_until is not None and utc(alarm.snoozed_until) <= utc(now)
        due = min(
            (
                t
                for t, now_due in ((alarm.due, regular), (alarm.snoozed_until, snoozed))
                if now_due and t is not None
            ),
            key=utc,
        )
        new_due = alarm.due
        missed_due, missed_count = alarm.missed_due, alarm.missed_count
        if regular:
            assert alarm.due is not None
            if alarm.days and alarm.time_of_day is not None:
                new_due = next_occurrence(
                    alarm.days, alarm.time_of_day, max(alarm.due, now, key=utc), self.tz
                )
                missed_due, missed_count = None, 0
            else:
                new_due = None
        rings = alarm.kind is not AlarmKind.ROUTINE  # a routine runs its request, never rings
        cur = db.execute(
            "UPDATE alarms SET due = ?, snoozed_until = NULL, ringing_since = ?, ringing_due = ?, "
            "missed_due = ?, missed_count = ? WHERE id = ? AND due IS ? AND snoozed_until IS ?",
            (
                _ts(new_due),
                now.timestamp() if rings else None,
                due.timestamp() if rings else None,
                _ts(missed_due),
                missed_count,
                alarm.id,
                _ts(alarm.due),
                _ts(alarm.snoozed_until),
            ),
        )
        if cur.rowcount != 1:
            return None  # another service rang it first
        return AlarmFired(
            alarm.id,
            alarm.kind,
            alarm.label,
            due,
            now,
            snoozed=snoozed and not regular,
            conversation=alarm.conversation,
            origin=alarm.origin,
        )

    def _mark_missed(self, db: sqlite3.Connection, now: datetime) -> None:
        """Turn rings overdue by more than ``missed_after`` into missed ones, to be reported."""
        cutoff = utc(now) - self.missed_after
        stamp = cutoff.timestamp()
        rows = db.execute(
            "SELECT * FROM alarms WHERE due < ? OR snoozed_until < ?", (stamp, stamp)
        ).fetchall()
        for row in rows:
            alarm = self._alarm(row)
            last = alarm.missed_due
            count = alarm.missed_count
            snoozed_until = alarm.snoozed_until
            due = alarm.due
            if snoozed_until is not None and utc(snoozed_until) < cutoff:
                last = max(last, snoozed_until, key=utc) if last else snoozed_until
                count += 1
                snoozed_until = None
            if due is not None and utc(due) < cutoff:
                if alarm.days and alarm.time_of_day is not None:
                    while utc(due) < cutoff:
                        last = max(last, due, key=utc) if last else due
                        count += 1
                        due = next_occurrence(alarm.days, alarm.time_of_day, due, self.tz)
                else:
                    last = max(last, due, key=utc) if last else due
                    count += 1
                    due = None
            db.execute(
                "UPDATE alarms SET due = ?, snoozed_until = ?, missed_due = ?, missed_count = ?, "
                "missed_reported = 0 WHERE id = ? AND due IS ? AND snoozed_until IS ?",
                (
                    _ts(due),
                    _ts(snoozed_until),
                    _ts(last),
                    count,
                    alarm.id,
                    _ts(alarm.due),
                    _ts(alarm.snoozed_until),
                ),
            )

    def _take_unreported(self, db: sqlite3.Connection) -> list[MissedAlarm]:
        rows = db.execute(
            "SELECT * FROM alarms WHERE missed_reported = 0 AND missed_due IS NOT NULL "
            "ORDER BY missed_due, id"
        ).fetchall()
        db.execute("UPDATE alarms SET missed_reported = 1 WHERE missed_reported = 0")
        missed = []
        for row in rows:
            alarm = self._alarm(row)
            assert alarm.missed_due is not None
            missed.append(
                MissedAlarm(
                    alarm.id,
                    alarm.kind,
                    alarm.label,
                    alarm.missed_due,
                    alarm.missed_count,
                    alarm.due if alarm.repeats else None,
                )
            )
        return missed

    def _expire(self, db: sqlite3.Connection, now: datetime) -> None:
        """Stop rings older than ``ring_for``; forget old reported misses; drop finished rows."""
        db.execute(
            "UPDATE alarms SET ringing_since = NULL, ringing_due = NULL WHERE ringing_since < ?",
            ((utc(now) - self.ring_for).timestamp(),),
        )
        db.execute(
            "UPDATE alarms SET missed_due = NULL, missed_count = 0 "
            "WHERE due IS NULL AND missed_reported = 1 AND missed_due < ?",
            ((utc(now) - KEEP_MISSED).timestamp(),),
        )
        self._delete_finished(db)

    @staticmethod
    def _delete_finished(db: sqlite3.Connection) -> None:
        db.execute(
            "DELETE FROM alarms WHERE due IS NULL AND snoozed_until IS NULL "
            "AND ringing_since IS NULL AND missed_due IS NULL"
        )

    def _require(self, db: sqlite3.Connection, alarm_id: int) -> Alarm:
        row = db.execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,)).fetchone()
        if row is None:
            raise ToolError(
                f"There is no alarm, timer or reminder number {alarm_id}.",
                "Use list_alarms to see them and their numbers.",
            )
        return self._alarm(row)

    def _alarm(self, row: sqlite3.Row) -> Alarm:
        def at(value: float | None) -> datetime | None:
            return datetime.fromtimestamp(value, self.tz) if value is not None else None

        created = at(row["created"])
        assert created is not None
        return Alarm(
            id=int(row["id"]),
            kind=AlarmKind(row["kind"]),
            label=str(row["label"]),
            days=repeat_from_key(row["days"]),
            time_of_day=time.fromisoformat(row["time_of_day"]) if row["time_of_day"] else None,
            due=at(row["due"]),
            snoozed_until=at(row["snoozed_until"]),
            ringing_since=at(row["ringing_since"]),
            ringing_due=at(row["ringing_due"]),
            missed_due=at(row["missed_due"]),
            missed_count=int(row["missed_count"]),
            duration=timedelta(seconds=row["duration_s"]) if row["duration_s"] else None,
            created=created,
            conversation=row["conversation"],
            origin=row["origin"],
        )

    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError("The alarm service was shut down.", "Restart BotPsy.")
        if self._db is not None:
            return self._db
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA busy_timeout=5000")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                db.close()
                raise StoreError(
                    f"The alarms database {self.path} was written by a newer version.",
                    "Update botpsy-desktop, or move the file away to start fresh.",
                )
            if 0 < version < SCHEMA_VERSION:  # an upgrade: integrity check and backup first
                try:
                    backup_before_migration(db, self.path, version)
                except StoreError:
                    db.close()
                    raise
            db.executescript(_SCHEMA)
            columns = {r["name"] for r in db.execute("PRAGMA table_info(alarms)")}
            if "conversation" not in columns:  # version 1: routines' conversations
                db.execute("ALTER TABLE alarms ADD COLUMN conversation TEXT")
            if "origin" not in columns:  # version 2: where a routine's request came from
                db.execute("ALTER TABLE alarms ADD COLUMN origin TEXT")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StoreError(
                f"Cannot open the alarms database {self.path}: {exc}.",
                "Check the disk and permissions; a damaged file can be moved away to start fresh.",
            ) from exc
        self._db = db
        return db

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn(), self.path)

    def _data_version(self) -> int:
        with self._lock:
            return int(self._conn().execute("PRAGMA data_version").fetchone()[0])

    def _after_change(self) -> None:
        """Make the scheduler's wake-ups match the table after a change made here."""
        if self._scheduler is not None:
            self._sync_jobs()

    def _sync_jobs(self) -> None:
        with self._lock:
            scheduler = self._scheduler
            if scheduler is None:
                return
            rows = (
                self._conn()
                .execute(
                    "SELECT id, MIN(COALESCE(due, snoozed_until), "
                    "COALESCE(snoozed_until, due)) AS ring FROM alarms "
                    "WHERE due IS NOT NULL OR snoozed_until IS NOT NULL"
                )
                .fetchall()
            )
            # Jobs run on the real clock; an injected clock is followed by its offset from it.
            offset = datetime.now(UTC) - self.now()
            margin = timedelta(milliseconds=5)
            scheduler.remove_all_jobs(jobstore="alarms")
            for row in rows:
                run_at = datetime.fromtimestamp(row["ring"], UTC) + offset + margin
                scheduler.add_job(
                    self.fire_due,
                    DateTrigger(run_at, timezone=UTC),
                    id=f"alarm-{row['id']}",
                    jobstore="alarms",
                )

    def _poll(self) -> None:
        """Every few seconds: notice changes from other processes, end old rings, ring late ones."""
        try:
            with self._lock:
                if self._scheduler is None:
                    return
                version = self._data_version()
                changed = version != self._seen_version
                self._seen_version = version
                with self._transaction() as db:
                    self._expire(db, self.now())
            if changed:
                self._sync_jobs()
            self.fire_due()
        except Exception:
            log.exception("checking the alarms failed")


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK``), with SQLite errors as StoreError."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db, self.path = db, path

    def __enter__(self) -> sqlite3.Connection:
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(
                f"Cannot write the alarms database {self.path}: {exc}.",
                "Check free disk space and permissions.",
            ) from exc
        return self.db

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
                return
            except sqlite3.Error as error:
                self.db.execute("ROLLBACK")
                raise StoreError(
                    f"Cannot save to the alarms database {self.path}: {error}.",
                    "Check free disk space and permissions.",
                ) from error
        self.db.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(
                f"The alarms database {self.path} failed: {exc}.",
                "Check the disk and permissions.",
            ) from exc


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _what(kind: AlarmKind, alarm_id: int, label: str) -> str:
    return f"{kind.value} {alarm_id}" + (f" {label!r}" if label else "")


def _name(alarm: Alarm) -> str:
    return _what(alarm.kind, alarm.id, alarm.label).capitalize()


def _not_ringing_hint(alarm: Alarm, now: datetime) -> str:
    if alarm.next_ring is not None:
        return (
            f"It rings {format_time(alarm.next_ring, now)}; "
            "use cancel_alarm to remove it before then."
        )
    return "Use list_alarms to see what is ringing."
