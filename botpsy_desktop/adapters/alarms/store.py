"""The alarms table: its SQLite file, schema upgrades (backed up first), transactions and rows.

Every stored row is read through :meth:`AlarmStore.read` (one place): a row whose values cannot
be an alarm (a time of day ``25:99``, days that are not weekdays, a due time out of range or of
the wrong type, an unknown kind; written by an older version, another program or a damaged disk)
raises :class:`UnreadableRow`, and the readers of many rows (:meth:`AlarmStore.readable`) skip it
with one warning in the log, so the other alarms keep ringing. ``botpsy doctor`` reports such rows
and ``botpsy alarms remove ID`` deletes them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.alarms.records import Alarm, AlarmKind
from botpsy_desktop.adapters.alarms.when import repeat_from_key
from botpsy_desktop.core.dbsafety import Hold, backup_before_migration
from botpsy_desktop.core.errors import StoreError, ToolError

log = logging.getLogger(__name__)

_EARLIEST = 0.0
"""The earliest stored time that is read as a time (1970-01-01 UTC): before it, a bad value."""
_LATEST = datetime(9000, 1, 1, tzinfo=UTC).timestamp()
"""The latest stored time read as a time: far past any alarm (at most a year ahead), and far
enough from datetime's end that moving to the next occurrence cannot overflow."""
_LONGEST_S = 10 * 366 * 86400.0
"""The longest stored timer length read as one (timers are bounded far lower when set)."""


class UnreadableRow(ValueError):
    """A stored row whose values cannot be an alarm: ``problem`` says which value and why."""

    def __init__(self, row_id: int, kind: str, label: str, problem: str) -> None:
        super().__init__(problem)
        self.id, self.kind, self.label, self.problem = row_id, kind, label, problem

    def line(self) -> str:
        """One sentence for a terminal, a log or doctor, naming the row and the way out."""
        what = f"entry {self.id} ({self.kind}{f' {self.label!r}' if self.label else ''})"
        return (
            f"{what} in the alarms database cannot be read: {self.problem}; it is skipped "
            "(it does not ring or run)"
        )

    def hint(self) -> str:
        return f"Remove it with `botpsy alarms remove {self.id}` and set it again if needed."

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "label": self.label,
            "status": "unreadable",
            "problem": self.problem,
        }


SCHEMA_VERSION = 4
"""2: ``conversation`` (the conversation a routine runs in) added to ``alarms``; 3: ``origin``
(a routine set from content the user did not type: it runs as untrusted content); 4:
``catch_up`` (a routine missed while nothing ran runs once at the next start)."""

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
    origin TEXT,
    catch_up INTEGER NOT NULL DEFAULT 0
);
"""


class AlarmStore:
    """The ``alarms`` table in one SQLite file (WAL, shared with other processes).

    The connection opens on first use; ``closed`` makes every later use fail with a StoreError.
    It does no locking of its own: the service serializes its use.
    """

    def __init__(self, path: Path | str, tz: tzinfo) -> None:
        self.path = Path(path)
        self.tz = tz
        self.closed = False
        self._db: sqlite3.Connection | None = None
        self._warned: set[tuple[int, str]] = set()
        self._hold: Hold | None = None  # `botpsy db restore` refuses while it is held

    def connection(self) -> sqlite3.Connection:
        if self.closed:
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
            if "catch_up" not in columns:  # version 3: whether a missed routine catches up
                db.execute("ALTER TABLE alarms ADD COLUMN catch_up INTEGER NOT NULL DEFAULT 0")
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StoreError(
                f"Cannot open the alarms database {self.path}: {exc}.",
                "Check the disk and permissions; a damaged file can be moved away to start fresh.",
            ) from exc
        with contextlib.suppress(OSError):  # a folder that takes no lock file: still usable
            self._hold = Hold(self.path)
        self._db = db
        return db

    def transaction(self) -> Transaction:
        return Transaction(self.connection(), self.path)

    def data_version(self) -> int:
        """SQLite's count of commits by other connections: a change elsewhere moves it."""
        return int(self.connection().execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        """Close the connection (``closed`` should be set first, so nothing reopens it)."""
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._hold is not None:
            self._hold.release()
            self._hold = None

    def read(self, row: sqlite3.Row) -> Alarm:
        """The alarm a stored row holds; UnreadableRow when a value cannot be what it should."""
        row_id = int(row["id"])
        kind_text = row["kind"] if isinstance(row["kind"], str) else repr(row["kind"])
        label = row["label"] if isinstance(row["label"], str) else repr(row["label"])

        def bad(problem: str) -> UnreadableRow:
            return UnreadableRow(row_id, kind_text[:40], label[:80], problem)

        def at(column: str, *, required: bool = False) -> datetime | None:
            value = row[column]
            if value is None and not required:
                return None
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise bad(f"its {column} {_shown(value)} is not a stored time")
            if not (math.isfinite(value) and _EARLIEST <= value <= _LATEST):
                raise bad(f"its {column} {_shown(value)} is out of range")
            return datetime.fromtimestamp(value, self.tz)

        try:
            kind = AlarmKind(row["kind"])
        except ValueError:
            raise bad(f"its kind {_shown(row['kind'])} is unknown") from None
        days_text = row["days"]
        if not isinstance(days_text, str) or any(c not in "0123456" for c in days_text):
            raise bad(f"its days {_shown(days_text)} are not weekday numbers 0 to 6")
        tod_text = row["time_of_day"]
        time_of_day: time | None = None
        if tod_text is not None and tod_text != "":
            try:
                time_of_day = time.fromisoformat(tod_text)
            except (TypeError, ValueError):
                raise bad(f"its time of day {_shown(tod_text)} is not a time") from None
        if days_text and time_of_day is None:
            raise bad("it repeats but has no time of day")
        count = row["missed_count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise bad(f"its missed_count {_shown(count)} is not a count")
        length = row["duration_s"]
        duration: timedelta | None = None
        if length is not None and length != 0:
            if isinstance(length, bool) or not isinstance(length, int | float):
                raise bad(f"its duration_s {_shown(length)} is not a number of seconds")
            if not (math.isfinite(length) and 0 < length <= _LONGEST_S):
                raise bad(f"its duration_s {_shown(length)} is out of range")
            duration = timedelta(seconds=length)
        for column in ("conversation", "origin"):
            if row[column] is not None and not isinstance(row[column], str):
                raise bad(f"its {column} {_shown(row[column])} is not text")
        created = at("created", required=True)
        assert created is not None
        return Alarm(
            id=row_id,
            kind=kind,
            label=str(row["label"]),
            days=repeat_from_key(days_text),
            time_of_day=time_of_day,
            due=at("due"),
            snoozed_until=at("snoozed_until"),
            ringing_since=at("ringing_since"),
            ringing_due=at("ringing_due"),
            missed_due=at("missed_due"),
            missed_count=count,
            duration=duration,
            created=created,
            conversation=row["conversation"],
            origin=row["origin"],
            catch_up=bool(row["catch_up"]),
        )

    def readable(self, rows: Iterable[sqlite3.Row]) -> list[Alarm]:
        """The alarms of ``rows``, skipping (with one warning each) those that cannot be read."""
        alarms = []
        for row in rows:
            try:
                alarms.append(self.read(row))
            except UnreadableRow as exc:
                self.warn(exc)
        return alarms

    def warn(self, exc: UnreadableRow) -> None:
        """Log an unreadable row once per process and problem (the poll sees it every time)."""
        key = (exc.id, exc.problem)
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s. %s", exc.line(), exc.hint())

    def unreadable(self, db: sqlite3.Connection) -> list[UnreadableRow]:
        """Every stored row that cannot be read, in id order (doctor, `botpsy alarms`)."""
        found = []
        for row in db.execute("SELECT * FROM alarms ORDER BY id"):
            try:
                self.read(row)
            except UnreadableRow as exc:
                found.append(exc)
        return found

    def require(self, db: sqlite3.Connection, alarm_id: int) -> Alarm:
        row = db.execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,)).fetchone()
        if row is None:
            raise ToolError(
                f"There is no alarm, timer or reminder number {alarm_id}.",
                "Use list_alarms to see them and their numbers.",
            )
        try:
            return self.read(row)
        except UnreadableRow as exc:
            self.warn(exc)
            raise ToolError(
                f"Alarm {alarm_id} is stored in a form that cannot be read ({exc.problem}).",
                f"The person can remove it with `botpsy alarms remove {alarm_id}`.",
            ) from None

    @staticmethod
    def delete_finished(db: sqlite3.Connection) -> None:
        db.execute(
            "DELETE FROM alarms WHERE due IS NULL AND snoozed_until IS NULL "
            "AND ringing_since IS NULL AND missed_due IS NULL"
        )


class Transaction:
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


def _shown(value: object) -> str:
    """A stored value in a message: its repr, cut short (a row may hold anything)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge number"
    return text if len(text) <= 60 else text[:57] + "..."
