"""How alarms move between states as time passes: ringing when due, missed while nothing ran,
rings that ran their length, misses old enough to forget.

Every transition is a conditional update (``WHERE due IS ? AND snoozed_until IS ?``), so an alarm
rings once even when two services share the table.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, tzinfo

from botpsy_desktop.adapters.alarms.records import Alarm, AlarmFired, AlarmKind, MissedAlarm
from botpsy_desktop.adapters.alarms.store import AlarmStore
from botpsy_desktop.adapters.alarms.when import next_occurrence, utc

KEEP_MISSED = timedelta(days=7)
"""A one-off alarm reported as missed stays listed this long unless dismissed."""


class AlarmStates:
    """The time-driven transitions of the rows in ``store``, each inside the caller's
    transaction ``db``."""

    def __init__(
        self, store: AlarmStore, tz: tzinfo, *, ring_for: timedelta, missed_after: timedelta
    ) -> None:
        self.store = store
        self.tz = tz
        self.ring_for = ring_for
        self.missed_after = missed_after

    def ring(self, db: sqlite3.Connection, alarm: Alarm, now: datetime) -> AlarmFired | None:
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

    def mark_missed(self, db: sqlite3.Connection, now: datetime) -> None:
        """Turn rings overdue by more than ``missed_after`` into missed ones, to be reported."""
        cutoff = utc(now) - self.missed_after
        stamp = cutoff.timestamp()
        rows = db.execute(
            "SELECT * FROM alarms WHERE due < ? OR snoozed_until < ?", (stamp, stamp)
        ).fetchall()
        for alarm in self.store.readable(rows):
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

    def take_unreported(self, db: sqlite3.Connection) -> list[MissedAlarm]:
        rows = db.execute(
            "SELECT * FROM alarms WHERE missed_reported = 0 AND missed_due IS NOT NULL "
            "ORDER BY missed_due, id"
        ).fetchall()
        db.execute("UPDATE alarms SET missed_reported = 1 WHERE missed_reported = 0")
        missed = []
        for alarm in self.store.readable(rows):
            assert alarm.missed_due is not None
            missed.append(
                MissedAlarm(
                    alarm.id,
                    alarm.kind,
                    alarm.label,
                    alarm.missed_due,
                    alarm.missed_count,
                    alarm.due if alarm.repeats else None,
                    alarm.kind is AlarmKind.ROUTINE and alarm.catch_up,
                )
            )
        return missed

    def expire(self, db: sqlite3.Connection, now: datetime) -> None:
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
        self.store.delete_finished(db)


def _ts(value: datetime | None) -> float | None:
    """A time as stored (seconds since the epoch), None kept as NULL."""
    return value.timestamp() if value is not None else None
