"""SQLite safety for the app's databases: integrity checks, backups before migrations, restore."""

from __future__ import annotations

import calendar
import contextlib
import os
import re
import shutil
import sqlite3
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from botpsy_desktop.core.errors import StoreError

KEEP_BACKUPS = 3
"""How many backups of each database are kept (the newest; older ones are removed, but the
newest of each older schema version, made before an upgrade, stays)."""

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
        if backups and time.time() - _made_at(backups[0]) < every_s:
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
    kept_versions = {_version_of(b) for b in list_backups(path)[:keep]}
    for old in list_backups(path)[keep:]:
        version_of_old = _version_of(old)
        if version_of_old not in kept_versions:  # the newest copy made before an upgrade
            kept_versions.add(version_of_old)
            continue
        with contextlib.suppress(OSError):
            old.unlink()
    return target


def _version_of(backup: Path) -> str:
    found = re.search(r"\.backup-v(\d+)-", backup.name)
    return found.group(1) if found else ""


def copy_now(path: Path, version: int) -> Path | None:
    """Back up the database at ``path`` now (its own read-only connection, a snapshot); None
    when it cannot be read or copied (the next change tries again)."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        return _copy(db, path, version, keep=KEEP_BACKUPS, why="as a backup")
    except StoreError:
        return None
    finally:
        db.close()


@dataclass(frozen=True)
class Restored:
    """What a restore did, or would do."""

    backup: Path
    made_at: float  # when the backup was made (seconds since the epoch)
    damaged: list[str]  # what is wrong with the replaced file (empty: it is healthy)
    missing: dict[str, int] | None  # rows per table the backup lacks (None: unknown)
    aside: Path | None = None  # where the replaced file went (None: nothing replaced yet)

    def age(self, now: float | None = None) -> str:
        """How old the backup is, in words."""
        seconds = max(int((time.time() if now is None else now) - self.made_at), 0)
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.made_at))
        if seconds < 90:
            return f"{seconds} s old ({stamp})"
        minutes = seconds // 60
        if minutes < 90:
            return f"{minutes} minutes old ({stamp})"
        hours = minutes // 60
        if hours < 48:
            return f"{hours} hours {minutes % 60} minutes old ({stamp})"
        return f"{hours // 24} days old ({stamp})"

    def lost(self) -> str:
        """What the replaced file holds that the backup does not, in words."""
        if self.missing is None:
            return "what was saved after the backup cannot be counted (the file is unreadable)"
        shown = [f"{n} row{'s' if n != 1 else ''} of {table}" for table, n in self.missing.items()]
        return ", ".join(shown) if shown else "nothing"


def restore(path: Path, backup: Path | None = None, *, replace_healthy: bool = False) -> Restored:
    """Put ``backup`` (default: the newest) in place of ``path``; the old file is kept aside
    (``NAME.damaged-STAMP`` when it is damaged, ``NAME.replaced-STAMP`` when it is healthy).

    Refused (StoreError) while another process has the database open (:func:`holders`): it
    would go on writing into the file set aside. A healthy file that holds rows the backup
    lacks is replaced only with ``replace_healthy``; without it nothing changes and the
    returned ``Restored`` (``aside`` None) says what would be lost.
    """
    if backup is None:
        backups = list_backups(path)
        if not backups:
            raise StoreError(
                f"There is no backup of {path}.",
                f"Move {path} away to start fresh (backups are made before each upgrade and "
                "after each request that changed something).",
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
    busy = holders(path)
    if busy:
        raise StoreError(
            f"{path.name} is open in {busy} other botpsy process{'es' if busy > 1 else ''} (the "
            "window, `botpsy daemon`, or a command still running), which would go on writing "
            "into the file set aside; nothing was changed.",
            "Close the window and stop the daemon (and any `botpsy chat`), then run this again.",
        )
    damaged = check_file(path) if path.exists() else []
    missing = _missing_rows(path, backup) if path.exists() else {}
    made_at = _made_at(backup)
    planned = Restored(backup, made_at, damaged, missing)
    if path.exists() and not damaged and missing and not replace_healthy:
        return planned  # a healthy file with newer rows: only on request
    aside: Path | None = None
    if path.exists():
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        what = "damaged" if damaged else "replaced"
        aside = path.with_name(f"{path.name}.{what}-{stamp}")
        n = 1
        while aside.exists():  # never over an earlier one
            n += 1
            aside = path.with_name(f"{path.name}.{what}-{stamp}-{n}")
        os.replace(path, aside)
    for suffix in ("-wal", "-shm"):  # the old file's journal must not be applied to the backup
        side = path.with_name(path.name + suffix)
        if side.exists() and aside is not None:
            os.replace(side, aside.with_name(aside.name + suffix))
        else:
            with contextlib.suppress(OSError):
                side.unlink()
    shutil.copyfile(backup, path)
    return Restored(backup, made_at, damaged, missing, aside)


def _made_at(backup: Path) -> float:
    """When a backup was made: the time in its name (this app's clock), else its file's."""
    found = re.search(r"-(\d{8}T\d{6})(?:\.\d{6})?Z\.sqlite3$", backup.name)
    if found:
        with contextlib.suppress(ValueError, OverflowError):
            return calendar.timegm(time.strptime(found.group(1), "%Y%m%dT%H%M%S"))
    return backup.stat().st_mtime


def _rows(path: Path) -> dict[str, int]:
    """Rows per table of the database at ``path`` (read-only; raises sqlite3.Error)."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = [
            str(r[0])
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return {t: int(db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables}
    finally:
        db.close()


def _missing_rows(path: Path, backup: Path) -> dict[str, int] | None:
    """Per table, how many more rows the file at ``path`` has than ``backup`` (only tables
    where it has more); None when the file cannot be read."""
    try:
        now = _rows(path)
    except sqlite3.Error:
        return None
    try:
        then = _rows(backup)
    except sqlite3.Error:
        then = {}
    return {t: n - then.get(t, 0) for t, n in sorted(now.items()) if n > then.get(t, 0)}


# --- which processes have a database open ------------------------------------------------------
# try_lock(fd): lock an open file exclusively without waiting, and say whether it was free; the
# OS frees the lock when its process ends in any way (agent/owners.py uses it too).

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

else:
    import fcntl

    def try_lock(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True


def holders_folder(path: Path) -> Path:
    """``DB.owners``: one locked file per process that has the database open (the conversation
    store's owner locks, agent/owners.py, live there too)."""
    return path.with_name(path.name + ".owners")


class Hold:
    """This process has the database at ``path`` open: a file in ``DB.owners`` stays locked
    until :meth:`release` (the OS frees it when the process ends in any way)."""

    def __init__(self, path: Path) -> None:
        folder = holders_folder(path)
        folder.mkdir(parents=True, exist_ok=True)
        self._file = folder / f"{os.getpid()}-{uuid.uuid4().hex[:12]}.lock"
        fd = os.open(self._file, os.O_RDWR | os.O_CREAT, 0o600)
        if not try_lock(fd):
            os.close(fd)
            raise OSError(f"cannot lock {self._file}")
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        os.close(self._fd)
        self._fd = None
        with contextlib.suppress(OSError):
            self._file.unlink()


def holders(path: Path) -> int:
    """How many other processes have the database at ``path`` open (their lock files in
    ``DB.owners`` are held); a file left by a dead process is removed."""
    folder = holders_folder(path)
    if not folder.is_dir():
        return 0
    busy = 0
    for file in folder.glob("*.lock"):
        try:
            fd = os.open(file, os.O_RDWR)
        except OSError:
            continue
        try:
            free = try_lock(fd)
        finally:
            os.close(fd)
        if free:
            with contextlib.suppress(OSError):
                file.unlink()
        else:
            busy += 1
    return busy
