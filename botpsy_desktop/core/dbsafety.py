"""SQLite safety for the app's databases: integrity checks, backups before migrations, restore."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import threading
import time
from pathlib import Path

from botpsy_desktop.core.errors import StoreError

KEEP_BACKUPS = 3
"""How many backups of each database are kept (the newest; older ones are removed)."""

_BACKUP = re.compile(r"\.backup-v\d+-\d{8}T\d{6}(?:\.\d{6})?Z\.sqlite3$")


def restore_hint(path: Path) -> str:
    """What to do about a damaged database file: restore the newest backup if there is one,
    else move the file away (a fresh one is made on the next start)."""
    backups = list_backups(path)
    if not backups:
        return (
            f"There is no backup of it: move {path} away (keep it for repair tools) and start "
            "again with a fresh one; `botpsy db check` checks every database of the profile."
        )
    return (
        f"Run `botpsy db restore {path.name}` to put back the newest backup "
        f"({backups[0].name}), or move {path} away to start fresh; `botpsy db check` checks "
        "every database of the profile."
    )


DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def is_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the file itself is damaged (not the disk or a lock)."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    text = str(exc).lower()
    return name.startswith(DAMAGED) or "malformed" in text or "not a database" in text


def write_failure(path: Path, exc: BaseException, what: str) -> StoreError:
    """The error for a write to the database at ``path`` that failed with ``exc``: what went
    wrong in true words (full disk, damaged file, another process, permissions, a disk error),
    that ``what`` was not saved, and what to do."""
    name = str(getattr(exc, "sqlite_errorname", ""))
    if name.startswith("SQLITE_FULL"):
        return StoreError(
            f"The disk holding {path} is full, so {what} could not be saved; nothing of it was "
            "kept.",
            "Free some disk space, then try again.",
        )
    if is_damage(exc):
        return StoreError(
            f"The database {path} is damaged ({exc}), so {what} was not saved.",
            restore_hint(path),
        )
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return StoreError(
            f"{path} is busy: another botpsy process kept it locked too long, so {what} was "
            "not saved.",
            "Try again in a moment; if it keeps happening, close other botpsy windows.",
        )
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")):
        return StoreError(
            f"{path} cannot be written ({exc}), so {what} was not saved.",
            "Check the permissions of the file and its folder.",
        )
    if name.startswith("SQLITE_IOERR"):
        return StoreError(
            f"Writing {path} failed with a disk error ({exc}), so {what} was not saved.",
            "Check that the disk has free space and is still attached, then try again.",
        )
    return StoreError(
        f"Could not save {what} to {path}: {exc}.", "Check free disk space and permissions."
    )


def integrity_errors(db: sqlite3.Connection, *, quick: bool = False) -> list[str]:
    """Problems ``PRAGMA integrity_check`` (or ``quick_check``) finds; empty when the file is ok."""
    pragma = "quick_check" if quick else "integrity_check"
    try:
        rows = db.execute(f"PRAGMA {pragma}").fetchall()
    except sqlite3.DatabaseError as exc:
        return [str(exc)]
    found = [str(r[0]) for r in rows]
    return [] if found == ["ok"] else found


def check_file(path: Path, *, quick: bool = False) -> list[str]:
    """Integrity problems of the database at ``path``, opened read-only (empty: ok)."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        return [str(exc)]
    try:
        return integrity_errors(db, quick=quick)
    finally:
        db.close()


def list_backups(path: Path) -> list[Path]:
    """Backups of ``path`` (made before migrations, and recent copies), newest first."""
    stem = path.name.removesuffix(".sqlite3")
    if not path.parent.is_dir():
        return []
    found = [
        p
        for p in path.parent.iterdir()
        if p.name.startswith(stem + ".backup-") and _BACKUP.search(p.name)
    ]
    return sorted(found, key=lambda p: p.name, reverse=True)


def backup_before_migration(
    db: sqlite3.Connection, path: Path, from_version: int, *, keep: int = KEEP_BACKUPS
) -> Path:
    """Check ``db`` and copy it next to ``path`` (SQLite's backup API) before a migration.

    Raises StoreError, saying how to restore a backup, when the integrity check fails: a damaged
    file is never migrated. Keeps the newest ``keep`` backups of this database.
    """
    problems = integrity_errors(db)
    if problems:
        shown = "; ".join(problems[:3]) + (" ..." if len(problems) > 3 else "")
        raise StoreError(
            f"The database {path} is damaged (integrity check: {shown}); it was not upgraded.",
            restore_hint(path),
        )
    return _copy(db, path, from_version, keep=keep, why="before upgrading it")


BACKUP_EVERY_S = 24 * 3600
"""A healthy database is copied when it is opened and its newest backup is older than this."""


def keep_recent_backup(
    path: Path, version: int, *, every_s: float = BACKUP_EVERY_S
) -> threading.Thread | None:
    """Copy the healthy database at ``path`` next to it if its newest backup is older than
    ``every_s``, so that a file damaged later has a recent one to restore.

    The copy runs on a thread of its own (its own read-only connection, a snapshot of the
    file): opening the app never waits for it. Returns the thread to join before the process
    ends (None: no copy was due). A copy that fails or is cut off (a full disk, the process
    killed) leaves no backup and is tried again on a later open.
    """
    backups = list_backups(path)
    with contextlib.suppress(OSError):
        if backups and time.time() - backups[0].stat().st_mtime < every_s:
            return None
    for stale in path.parent.glob(f"{path.name.removesuffix('.sqlite3')}.backup-*.part"):
        with contextlib.suppress(OSError):  # a copy cut off earlier
            if time.time() - stale.stat().st_mtime > 3600:
                stale.unlink()

    def copy() -> None:
        try:
            db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        except sqlite3.Error:
            return
        try:
            _copy(db, path, version, keep=KEEP_BACKUPS, why="as a backup")
        except StoreError:
            return
        finally:
            db.close()

    thread = threading.Thread(target=copy, name="database-backup", daemon=True)
    thread.start()
    return thread


def _copy(db: sqlite3.Connection, path: Path, version: int, *, keep: int, why: str) -> Path:
    """SQLite's backup API into ``NAME.backup-vVERSION-STAMP.sqlite3`` (whole or not at all);
    the newest ``keep`` backups are kept."""
    stamp = (
        time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() // 1000 % 10**6:06d}Z"
    )
    target = path.with_name(
        f"{path.name.removesuffix('.sqlite3')}.backup-v{version}-{stamp}.sqlite3"
    )
    partial = target.with_name(target.name + ".part")
    try:
        copy = sqlite3.connect(str(partial))
        try:
            copy.execute("PRAGMA synchronous=OFF")  # flushed once, below
            db.backup(copy)
        finally:
            copy.close()
        fd = os.open(partial, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, target)
    except (OSError, sqlite3.Error) as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise StoreError(
            f"Could not back up {path} {why}: {exc}.",
            "Free some disk space (the backup is as large as the database) and start again.",
        ) from exc
    for old in list_backups(path)[keep:]:
        with contextlib.suppress(OSError):
            old.unlink()
    return target


def restore(path: Path, backup: Path | None = None) -> tuple[Path, Path | None]:
    """Put ``backup`` (default: the newest) in place of ``path``; the old file is kept aside.

    Returns the backup used and where the replaced file went (None if there was none). Run it
    while the app is closed.
    """
    if backup is None:
        backups = list_backups(path)
        if not backups:
            raise StoreError(
                f"There is no backup of {path}.",
                f"Move {path} away to start fresh (backups are made before each upgrade and "
                "once a day).",
            )
        backup = backups[0]
    if not backup.is_file():
        raise StoreError(f"There is no backup file {backup}.", "`botpsy db check` lists backups.")
    problems = check_file(backup)
    if problems:
        raise StoreError(
            f"The backup {backup} is damaged too ({problems[0]}).",
            "Pick an older one from `botpsy db check`, or move the database away to start fresh.",
        )
    aside: Path | None = None
    if path.exists():
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        aside = path.with_name(f"{path.name}.damaged-{stamp}")
        os.replace(path, aside)
    for suffix in ("-wal", "-shm"):  # the old file's journal must not be applied to the backup
        side = path.with_name(path.name + suffix)
        if side.exists() and aside is not None:
            os.replace(side, aside.with_name(aside.name + suffix))
        else:
            with contextlib.suppress(OSError):
                side.unlink()
    shutil.copyfile(backup, path)
    return backup, aside
