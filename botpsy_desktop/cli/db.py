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
        "restore",
        help="put a database's newest backup (or BACKUP) in its place, with the app closed",
    )
    restore.add_argument("database", metavar="FILE", help="e.g. conversations.sqlite3")
    restore.add_argument("backup", nargs="?", metavar="BACKUP", help="a backup file to use")
    restore.add_argument(
        "--yes",
        action="store_true",
        help="replace a healthy database too, though it holds what the backup lacks (it is "
        "kept aside)",
    )


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
        done = dbsafety.restore(target, chosen, replace_healthy=args.yes)
    except BotpsyError as exc:
        print(f"botpsy: {exc}", file=err)
        return EXIT_ERROR
    if done.aside is None and target.exists():  # healthy, and newer than the backup
        print(
            f"botpsy: {target.name} is healthy and holds what the backup {done.backup.name} "
            f"({done.age()}) does not: {done.lost()}. Nothing was changed; run `botpsy db "
            f"restore {target.name} {done.backup.name} --yes` to put the backup back anyway "
            "(the current file is then kept aside).",
            file=err,
        )
        return EXIT_ERROR
    print(f"Restored {target} from {done.backup.name}, a backup {done.age()}.", file=out)
    if done.aside is not None:
        state = "damaged" if done.damaged else "healthy"
        print(f"The replaced file ({state}) is kept as {done.aside}.", file=out)
        if done.missing:
            print(f"Not in the backup (saved after it): {done.lost()}.", file=out)
        elif done.missing is None:
            print(
                "What was saved after the backup cannot be counted: the replaced file cannot "
                "be read.",
                file=out,
            )
        else:
            print("Nothing saved before the restore is missing from it.", file=out)
    return EXIT_OK
