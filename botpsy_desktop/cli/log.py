"""`botpsy log` and `botpsy undo`: the audit log, and reversing the last reversible action."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_OK


def add_commands(sub: Any) -> None:
    """The `log` and `undo` subcommands and their options."""
    log = sub.add_parser("log", help="actions the assistant carried out (the audit log)")
    log.add_argument("--limit", type=int, default=20, metavar="N", help="newest N (default 20)")
    log.add_argument("--json", action="store_true", help="print the entries as JSON")
    undo = sub.add_parser("undo", help="reverse the assistant's last reversible action")
    undo.add_argument("--json", action="store_true", help="print what was undone as JSON")


def cmd_log(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The audit log, newest first: what ran, when, who approved it, and how to undo it."""
    from botpsy_desktop.agent.audit import AuditLog, format_entry

    entries = AuditLog(app.store).entries(max(args.limit, 1))
    if args.json:
        json.dump(entries, out, ensure_ascii=False, indent=2)
        out.write("\n")
    elif not entries:
        print("The assistant has not carried out any action yet.", file=out)
    for entry in [] if args.json else entries:
        print(format_entry(entry), file=out)
    return EXIT_OK


def cmd_undo(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Reverse the newest action that has an inverse and was not undone yet."""
    from botpsy_desktop.agent.audit import AuditLog, describe

    done = AuditLog(app.store).undo(app.registry)
    if args.json:
        data = {"undone": done.action, "inverse": done.inverse.as_dict(), "result": done.result}
        json.dump({**data, "entry_id": done.entry_id}, out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        print(f"Undid #{done.action['id']} {describe(done.action)}: {done.result}", file=out)
    return EXIT_OK
