"""`botpsy routines`: list, add and remove routines (requests the assistant runs at a time)."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from botpsy_desktop.adapters.alarms import AlarmKind
from botpsy_desktop.adapters.alarms.tools import add_routine, describe_alarm
from botpsy_desktop.app import App
from botpsy_desktop.cli.alarms import removed_line, service_of
from botpsy_desktop.cli.common import EXIT_OK, row_id
from botpsy_desktop.core.errors import BotpsyError


def add_command(sub: Any) -> None:
    """The `routines` subcommand: list, add WHEN REQUEST, remove ID."""
    routines = sub.add_parser(
        "routines", help="list, add or remove routines (run by the window or `botpsy daemon`)"
    )
    routines.add_argument("--json", action="store_true", help="print JSON")
    what = routines.add_subparsers(dest="action", metavar="ACTION")
    listing = what.add_parser("list", help="the routines and when each runs next (the default)")
    listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    add = what.add_parser("add", help="run REQUEST at WHEN, once or repeating")
    add.add_argument("when", metavar="WHEN", help='e.g. "7:30", "tomorrow 8:00", ISO 8601')
    add.add_argument("request", metavar="REQUEST", help="what to ask the assistant then")
    add.add_argument("--repeat", default="never", help='e.g. "weekdays", "every day", "mon,fri"')
    missed = add.add_mutually_exclusive_group()
    missed.add_argument(
        "--catch-up",
        action="store_true",
        help="if it is due while BotPsy is not running, run it once at the next start",
    )
    missed.add_argument(
        "--skip",
        action="store_true",
        help="if it is due while BotPsy is not running, skip it (the default)",
    )
    add.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    remove = what.add_parser("remove", help="remove routine ID with all its repeats")
    remove.add_argument("id", type=row_id, metavar="ID")
    remove.add_argument("--json", action="store_true", default=argparse.SUPPRESS)


def cmd_routines(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    alarms = service_of(app)
    action = args.action or "list"
    as_json = bool(getattr(args, "json", False))
    if action == "add":
        result = add_routine(alarms, args.when, args.request, args.repeat, catch_up=args.catch_up)
        if as_json:
            print(json.dumps(result, ensure_ascii=False, indent=2), file=out)
        else:
            missed = (
                "if missed while BotPsy is not running, it runs once at the next start"
                if args.catch_up
                else "if missed while BotPsy is not running, that run is skipped"
            )
            print(f"{result['summary']} ({missed}; routine {result['id']})", file=out)
        return EXIT_OK
    broken = [b for b in alarms.unreadable() if b.kind == AlarmKind.ROUTINE.value]
    if action == "remove":
        alarm = alarms.get(args.id)
        stored_routine = alarm is not None and alarm.kind is AlarmKind.ROUTINE
        if not stored_routine and args.id not in {b.id for b in broken}:
            raise BotpsyError(
                f"There is no routine {args.id}.",
                "List them with `botpsy routines` (or everything with `botpsy alarms`).",
            )
        print(removed_line(alarms.remove(args.id)), file=out)
        return EXIT_OK
    items = [describe_alarm(a, alarms) for a in alarms.alarms() if a.kind is AlarmKind.ROUTINE]
    if as_json:
        listed = items + [b.as_dict() for b in broken]
        print(json.dumps(listed, ensure_ascii=False, indent=2), file=out)
        return EXIT_OK
    for b in broken:
        print(f"botpsy: warning: {b.line()}. {b.hint()}", file=err)
    if not items:
        print("No routines are set." if not broken else "No readable routines.", file=out)
    for item in items:
        when = item.get("runs") or item.get("missed", "")
        print(
            f"{item['id']}: {item.get('request', '')} — {when}, {item['repeat']}; "
            f"if missed: {item['if_missed']}",
            file=out,
        )
    return EXIT_OK
