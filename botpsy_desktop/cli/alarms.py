"""`botpsy alarms`: list every alarm, timer, reminder and routine (and any stored entry that
cannot be read), and remove one by its number."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from botpsy_desktop.adapters.alarms import Alarm, AlarmService
from botpsy_desktop.adapters.alarms.tools import describe_alarm
from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_OK, row_id
from botpsy_desktop.core.errors import BotpsyError


def add_command(sub: Any) -> None:
    """The `alarms` subcommand: list, remove ID."""
    alarms = sub.add_parser(
        "alarms",
        help="list or remove alarms, timers, reminders and routines (also unreadable entries)",
    )
    alarms.add_argument("--json", action="store_true", help="print JSON")
    what = alarms.add_subparsers(dest="action", metavar="ACTION")
    listing = what.add_parser("list", help="everything set, and entries that cannot be read")
    listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    remove = what.add_parser("remove", help="delete entry ID (readable or not) with its repeats")
    remove.add_argument("id", type=row_id, metavar="ID")
    remove.add_argument("--json", action="store_true", default=argparse.SUPPRESS)


def service_of(app: App) -> AlarmService:
    if app.alarms is None:
        raise BotpsyError("This profile has no alarm service.", "Run the command again.")
    return app.alarms


def warn_unreadable(service: AlarmService, err: TextIO) -> None:
    """One line on stderr per stored entry that cannot be read (skipped by everything else)."""
    for broken in service.unreadable():
        print(f"botpsy: warning: {broken.line()}. {broken.hint()}", file=err)


def removed_line(entry: Any) -> str:
    if isinstance(entry, Alarm):
        label = f" ({entry.label})" if entry.label else ""
        return f"Removed {entry.kind.value} {entry.id}{label}."
    return f"Removed entry {entry.id}, which could not be read ({entry.problem})."


def cmd_alarms(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    service = service_of(app)
    action = args.action or "list"
    as_json = bool(getattr(args, "json", False))
    if action == "remove":
        try:
            entry = service.remove(args.id)
        except BotpsyError as exc:
            raise BotpsyError(exc.message, "List them with `botpsy alarms`.") from None
        if as_json:
            shown = describe_alarm(entry, service) if isinstance(entry, Alarm) else entry.as_dict()
            print(json.dumps({"removed": shown}, ensure_ascii=False, indent=2), file=out)
        else:
            print(removed_line(entry), file=out)
        return EXIT_OK
    items = [describe_alarm(a, service) for a in service.alarms()]
    broken = service.unreadable()
    if as_json:
        listed = items + [b.as_dict() for b in broken]
        print(json.dumps(listed, ensure_ascii=False, indent=2), file=out)
        return EXIT_OK
    if not items and not broken:
        print("No alarms, timers, reminders or routines are set.", file=out)
    for item in items:
        what = item.get("label") or item.get("text") or item.get("request") or ""
        when = item.get("rings") or item.get("runs") or item.get("missed") or item["status"]
        print(
            f"{item['id']}: {item['kind']}{f' {what!r}' if what else ''} — {when}, "
            f"{item['repeat']}",
            file=out,
        )
    for b in broken:
        print(
            f"{b.id}: UNREADABLE — {b.problem}; remove it with `botpsy alarms remove {b.id}`",
            file=out,
        )
    return EXIT_OK
