"""`botpsy log` and `botpsy undo`: the audit log, and reversing the last reversible action."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_OK, row_id


def add_commands(sub: Any) -> None:
    """The `log` and `undo` subcommands and their options."""
    log = sub.add_parser("log", help="actions the assistant carried out (the audit log)")
    log.add_argument("--limit", type=int, default=20, metavar="N", help="newest N (default 20)")
    log.add_argument("--json", action="store_true", help="print the entries as JSON")
    undo = sub.add_parser("undo", help="reverse the assistant's last reversible action")
    undo.add_argument(
        "action", nargs="?", type=row_id, metavar="ID", help="undo this action (see `botpsy log`)"
    )
    undo.add_argument(
        "--approve",
        choices=("ask", "all", "deny"),
        default="ask",
        help="an undo that sends or deletes asks first: ask on the terminal (default), all, deny",
    )
    undo.add_argument("--json", action="store_true", help="print what was undone as JSON")


def cmd_log(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The audit log, newest first: what ran, when, who approved it, and how to undo it."""
    from botpsy_desktop.agent.audit import AuditLog, format_entry

    if app.store.damaged:  # shown as far as it can be read; said first
        warning = app.store.damage_error("nothing")
        print(f"botpsy: warning: {warning}", file=err)
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
    """Reverse the newest action that has an inverse and was not undone yet (or action ID),
    through the gate: the undo's receipt is shown, and one that sends or deletes asks first."""
    from botpsy_desktop.agent.audit import describe
    from botpsy_desktop.cli.turns import Approver
    from botpsy_desktop.core.text import terminal_safe

    plan = app.plan_undo(args.action)
    if plan.request is not None:
        Approver(args.approve, sys.stdin, err).decide(plan.request)
    done = app.undo(plan, by="user (botpsy undo)")
    if args.json:
        data = {"undone": done.action, "inverse": done.inverse.as_dict(), "result": done.result}
        json.dump({**data, "entry_id": done.entry_id}, out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        shown = f"Undid #{done.action['id']} {describe(done.action)}: {done.result}"
        print(terminal_safe(shown), file=out)
    return EXIT_OK
