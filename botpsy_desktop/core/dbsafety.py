"""SQLite safety for the app's databases: integrity checks, backups before migrations, restore."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path

from botpsy_desktop.core.errors import StoreError

KEEP_BACKUPS = 3
"""How many backups of each database are kept (the newest; older ones are removed)."""

_BACKUP = re.compile(r"\.backup-v\d+-\d{8}T\d{6}(?:\.\d{6})?Z\.sqlite3$")


def restore_hint(path: Path) -> str:
    """What to do about a damaged database file, naming the command that restores a backup."""
    backups = list_backups(path)
    newest = f" (newest: {backups[0].name})" if backups else ""
    return (
        f"Run `botpsy db restore {path.name}` to put back the newest backup{newest}, or move "
        f"{path} away to start fresh; `botpsy db check` checks every database of the profile."
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
    """Backups made of ``path`` before migrations, newest first."""
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
    stamp = (
        time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f".{time.time_ns() // 1000 % 10**6:06d}Z"
    )
    target = path.with_name(
        f"{path.name.removesuffix('.sqlite3')}.backup-v{from_version}-{stamp}.sqlite3"
    )
    partial = target.with_name(target.name + ".part")
    try:
        copy = sqlite3.connect(str(partial))
        try:
            db.backup(copy)
        finally:
            copy.close()
        os.replace(partial, target)
    except (OSError, sqlite3.Error) as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise StoreError(
            f"Could not back up {path} before upgrading it: {exc}.",
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
                f"Move {path} away to start fresh (backups are made before each upgrade).",
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
