"""The alarms table: its SQLite file, schema upgrades (backed up first), transactions and rows."""

from __future__ import annotations

import contextlib
import sqlite3
from datetime import datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.alarms.records import Alarm, AlarmKind
from botpsy_desktop.adapters.alarms.when import repeat_from_key
from botpsy_desktop.core.dbsafety import Hold, backup_before_migration
from botpsy_desktop.core.errors import StoreError, ToolError

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

    def alarm(self, row: sqlite3.Row) -> Alarm:
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
            catch_up=bool(row["catch_up"]),
        )

    def require(self, db: sqlite3.Connection, alarm_id: int) -> Alarm:
        row = db.execute("SELECT * FROM alarms WHERE id = ?", (alarm_id,)).fetchone()
        if row is None:
            raise ToolError(
                f"There is no alarm, timer or reminder number {alarm_id}.",
                "Use list_alarms to see them and their numbers.",
            )
        return self.alarm(row)

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
