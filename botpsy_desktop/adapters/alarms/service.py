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

The service composes its parts and holds the operations (add, list, cancel, snooze, dismiss,
fire): ``store`` (the table, its schema and backups), ``states`` (ringing, missed, expired),
``wakeups`` (APScheduler), ``listeners`` (who hears a ring) and ``records`` (what is reported).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, time, timedelta, tzinfo
from pathlib import Path

from botpsy_desktop.adapters.alarms.listeners import Listeners
from botpsy_desktop.adapters.alarms.records import (
    Alarm,
    AlarmFired,
    AlarmKind,
    Clock,
    Listener,
    MissedAlarm,
    describe,
    time_zone,
)
from botpsy_desktop.adapters.alarms.states import AlarmStates
from botpsy_desktop.adapters.alarms.store import AlarmStore, UnreadableRow
from botpsy_desktop.adapters.alarms.wakeups import WakeUps
from botpsy_desktop.adapters.alarms.when import (
    format_time,
    next_occurrence,
    repeat_key,
    shift,
    utc,
)
from botpsy_desktop.core.config import AlarmSettings
from botpsy_desktop.core.errors import ToolError

log = logging.getLogger(__name__)

MAX_AHEAD = timedelta(days=366)
"""Alarms further ahead than this are refused (almost always a misread date)."""


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
        self.ring_for = ring_for
        self.missed_after = missed_after
        self._store = AlarmStore(self.path, self.tz)
        self._states = AlarmStates(
            self._store, self.tz, ring_for=ring_for, missed_after=missed_after
        )
        self._listeners = Listeners()
        self._clock: Clock = now if now is not None else (lambda: datetime.now(UTC))
        self.snooze_default = snooze
        self.max_timer = max_timer
        self.max_alarms = max_alarms
        self.poll_interval_s = poll_interval_s
        self._lock = threading.RLock()
        self._seen_version: int | None = None
        self._wakeups: WakeUps | None = None

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
        self._listeners.add(listener)

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.remove(listener)

    @property
    def running(self) -> bool:
        return self._wakeups is not None

    def start(self) -> list[MissedAlarm]:
        """Report what was missed while nothing ran, then ring alarms on time until shutdown."""
        with self._lock:
            if self._store.closed:
                raise RuntimeError("this AlarmService was shut down")
            if self._wakeups is not None:
                return []
            now = self.now()
            with self._store.transaction() as db:
                self._states.mark_missed(db, now)
                self._states.expire(db, now)
                missed = self._states.take_unreported(db)
            self._wakeups = WakeUps(self.fire_due, self._poll, self.poll_interval_s)
            self._seen_version = self._data_version()
            self._sync_jobs()
        return missed

    def shutdown(self) -> None:
        """Stop the scheduler (waiting for a ring in progress) and close the database."""
        with self._lock:
            wakeups, self._wakeups = self._wakeups, None
            self._store.closed = True
        if wakeups is not None:
            wakeups.shutdown()
        with self._lock:
            self._store.close()

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
        catch_up: bool = False,
    ) -> Alarm:
        """Store a new alarm ringing at ``at`` (aware); with ``days`` it repeats at that wall time.

        ``catch_up`` (routines): when it was due while nothing ran, it runs once at the next
        start; otherwise that run is skipped (both are reported once).

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
        with self._lock, self._store.transaction() as db:
            (count,) = db.execute("SELECT COUNT(*) FROM alarms").fetchone()
            if count >= self.max_alarms:
                raise ToolError(
                    f"There are already {count} alarms, timers and reminders (the limit).",
                    "Cancel some with cancel_alarm first.",
                )
            cur = db.execute(
                "INSERT INTO alarms (kind, label, days, time_of_day, due, duration_s, created, "
                "origin, catch_up) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    kind.value,
                    label.strip(),
                    repeat_key(days_set),
                    tod.isoformat() if tod else None,
                    at.timestamp(),
                    duration.total_seconds() if duration is not None else None,
                    now.timestamp(),
                    origin,
                    int(catch_up and kind is AlarmKind.ROUTINE),
                ),
            )
            alarm_id = int(cur.lastrowid or 0)
        self._after_change()
        alarm = self.get(alarm_id)
        assert alarm is not None
        return alarm

    def get(self, alarm_id: int) -> Alarm | None:
        with self._lock:
            row = (
                self._store.connection()
                .execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,))
                .fetchone()
            )
        if row is None:
            return None
        try:
            return self._store.read(row)
        except UnreadableRow as exc:  # skipped, as by every reader of many rows
            self._store.warn(exc)
            return None

    def alarms(self) -> list[Alarm]:
        """Every alarm, ringing ones first, then by when they ring next.

        When no service runs, overdue alarms are marked missed first (and reported at the next
        start), so a list never shows a time in the past as still to come.
        """
        with self._lock:
            now = self.now()
            with self._store.transaction() as db:
                if self._wakeups is None:
                    self._states.mark_missed(db, now)
                self._states.expire(db, now)
                rows = db.execute("SELECT * FROM alarms").fetchall()
        items = self._store.readable(rows)  # a row that cannot be read is skipped, logged
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
        with self._lock, self._store.transaction() as db:
            alarms = [self._store.require(db, i) for i in alarm_ids]
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
            with self._store.transaction() as db:
                self._states.expire(db, now)
                for alarm_id in alarm_ids:
                    alarm = self._store.require(db, alarm_id)
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
                rows = [self._store.require(db, i) for i in alarm_ids]
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
            with self._store.transaction() as db:
                self._states.expire(db, now)
                for alarm_id in alarm_ids:
                    alarm = self._store.require(db, alarm_id)
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
                self._store.delete_finished(db)
                rows = [
                    db.execute("SELECT * FROM alarms WHERE id = ?", (i,)).fetchone()
                    for i in alarm_ids
                ]
        self._after_change()
        return [self._store.read(r) if r is not None else None for r in rows]

    def unreadable(self) -> list[UnreadableRow]:
        """Stored rows that cannot be read (skipped by everything else): for doctor and the CLI."""
        with self._lock:
            return self._store.unreadable(self._store.connection())

    def remove(self, alarm_id: int) -> Alarm | UnreadableRow:
        """Delete one stored entry, readable or not (`botpsy alarms remove`): what it was."""
        with self._lock, self._store.transaction() as db:
            row = db.execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,)).fetchone()
            if row is None:
                raise ToolError(
                    f"There is no alarm, timer, reminder or routine {alarm_id}.",
                    "List them with `botpsy alarms`.",
                )
            try:
                entry: Alarm | UnreadableRow = self._store.read(row)
            except UnreadableRow as exc:
                entry = exc
            db.execute("DELETE FROM alarms WHERE id = ?", (alarm_id,))
        self._after_change()
        return entry

    def set_conversation(self, alarm_id: int, conversation_id: str) -> None:
        """Remember the conversation routine ``alarm_id`` runs in (reused by its next runs)."""
        with self._lock, self._store.transaction() as db:
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
            if self._store.closed:
                return []
            now = self.now()
            stamp = now.timestamp()
            with self._store.transaction() as db:
                rows = db.execute(
                    "SELECT * FROM alarms WHERE due <= ? OR snoozed_until <= ?", (stamp, stamp)
                ).fetchall()
                for alarm in self._store.readable(rows):
                    event = self._states.ring(db, alarm, now)
                    if event is not None:
                        fired.append(event)
            listeners = self._listeners.current()
        if fired:
            self._after_change()
        self._listeners.tell(listeners, fired)
        return fired

    # --- internals ----------------------------------------------------------------------------

    def _data_version(self) -> int:
        with self._lock:
            return self._store.data_version()

    def _after_change(self) -> None:
        """Make the scheduler's wake-ups match the table after a change made here."""
        if self._wakeups is not None:
            self._sync_jobs()

    def _sync_jobs(self) -> None:
        with self._lock:
            wakeups = self._wakeups
            if wakeups is None:
                return
            rows = (
                self._store.connection()
                .execute("SELECT * FROM alarms WHERE due IS NOT NULL OR snoozed_until IS NOT NULL")
                .fetchall()
            )
            rings = [
                (a.id, a.next_ring.timestamp())
                for a in self._store.readable(rows)
                if a.next_ring is not None
            ]
            wakeups.schedule(rings, datetime.now(UTC) - self.now())

    def _poll(self) -> None:
        """Every few seconds: notice changes from other processes, end old rings, ring late ones."""
        try:
            with self._lock:
                if self._wakeups is None:
                    return
                version = self._data_version()
                changed = version != self._seen_version
                self._seen_version = version
                with self._store.transaction() as db:
                    self._states.expire(db, self.now())
            if changed:
                self._sync_jobs()
            self.fire_due()
        except Exception:
            log.exception("checking the alarms failed")


def _name(alarm: Alarm) -> str:
    return describe(alarm.kind, alarm.id, alarm.label).capitalize()


def _not_ringing_hint(alarm: Alarm, now: datetime) -> str:
    if alarm.next_ring is not None:
        return (
            f"It rings {format_time(alarm.next_ring, now)}; "
            "use cancel_alarm to remove it before then."
        )
    return "Use list_alarms to see what is ringing."
