"""`botpsy db`: check the profile's databases, or restore a backup, with the app closed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from botpsy_desktop.cli.common import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.paths import Paths


def add_command(sub: Any) -> None:
    """The `db` subcommand and its actions."""
    db = sub.add_parser("db", help="check the profile's databases, or restore a backup")
    act = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    act.add_parser("check", help="integrity of each database, and its backups")
    restore = act.add_parser(
        "restore", help="put a database's newest backup (or BACKUP) in its place; app closed"
    )
    restore.add_argument("database", metavar="FILE", help="e.g. conversations.sqlite3")
    restore.add_argument("backup", nargs="?", metavar="BACKUP", help="a backup file to use")


def cmd_db(paths: Paths, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Check or restore the profile's SQLite files; runs without opening them for the app."""
    from botpsy_desktop.core import dbsafety

    files = [paths.database, paths.data_dir / "alarms.sqlite3", paths.data_dir / "music.sqlite3"]
    if args.db_command == "check":
        bad = 0
        for file in files:
            if not file.exists():
                continue
            problems = dbsafety.check_file(file)
            bad += bool(problems)
            state = "ok" if not problems else "DAMAGED: " + "; ".join(problems[:3])
            print(f"{file}: {state}", file=out)
            for backup in dbsafety.list_backups(file):
                print(f"    backup {backup.name}", file=out)
            if problems:
                print(f"    -> {dbsafety.restore_hint(file)}", file=out)
        return EXIT_ERROR if bad else EXIT_OK
    target = next((f for f in files if f.name == Path(args.database).name), None)
    if target is None:
        names = ", ".join(f.name for f in files)
        print(f"botpsy: {args.database} is not one of the databases ({names}).", file=err)
        return EXIT_USAGE
    try:
        chosen = None if args.backup is None else Path(args.backup)
        if chosen is not None and not chosen.is_absolute():
            chosen = target.parent / chosen
        used, aside = dbsafety.restore(target, chosen)
    except BotpsyError as exc:
        print(f"botpsy: {exc}", file=err)
        return EXIT_ERROR
    kept = f"; the replaced file is kept as {aside}" if aside is not None else ""
    print(f"Restored {target} from {used.name}{kept}.", file=out)
    return EXIT_OK
