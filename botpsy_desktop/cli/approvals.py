"""`botpsy approvals`: the stored queue of approvals that routines wait for, answered here."""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_OK, row_id

if TYPE_CHECKING:
    from botpsy_desktop.agent.approvals import StoredApproval


def add_command(sub: Any) -> None:
    """The `approvals` subcommand: list, approve ID, deny ID."""
    approvals = sub.add_parser(
        "approvals",
        help="list, approve or deny the actions routines wait for (the window's queue too)",
    )
    approvals.add_argument("--json", action="store_true", help="print JSON")
    what = approvals.add_subparsers(dest="action", metavar="ACTION")
    listing = what.add_parser("list", help="what waits for a decision (the default)")
    listing.add_argument("--all", action="store_true", help="also the latest decided ones")
    listing.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    for name, words in (("approve", "run the waiting action"), ("deny", "do not run it")):
        one = what.add_parser(name, help=f"{words}; its run goes on where it runs")
        one.add_argument("id", type=row_id, metavar="ID", help="the number `list` shows")
        one.add_argument("--json", action="store_true", default=argparse.SUPPRESS)


def _when(stamp: float | None, now: float) -> str:
    if stamp is None:
        return "no limit"
    moment = datetime.fromtimestamp(stamp).astimezone()
    left = stamp - now
    if left <= 0:
        return f"{moment:%a %d %b %H:%M} (passed)"
    return f"{moment:%a %d %b %H:%M} (in {int(left // 60)} min {int(left % 60)} s)"


def show(stored: StoredApproval, out: TextIO) -> None:
    """The receipt as the window shows it: what will happen, who asked, until when, details."""
    now = time.time()
    asked = datetime.fromtimestamp(stored.asked_at).astimezone()
    print(f"Approval {stored.id}: {stored.state}", file=out, end="")
    if stored.decision:
        print(
            f", {stored.decision}" + (f" by {stored.decided_by}" if stored.decided_by else ""),
            file=out,
            end="",
        )
    print(file=out)
    for line in stored.receipt.splitlines():
        print(f"  {line}", file=out)
    print(f"  Asked by {stored.asker()} at {asked:%a %d %b %H:%M:%S}.", file=out)
    if stored.state == "waiting":
        print(f"  Waits until {_when(stored.deadline, now)}.", file=out)
    print("  Details:", file=out)
    for line in stored.details.splitlines():
        print(f"    {line}", file=out)


def cmd_approvals(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """List the stored queue, or approve or deny one approval in it (the first decision wins)."""
    if app.store.damaged:  # shown as far as it can be read; nothing is written to it
        print(f"botpsy: warning: {app.store.damage_error('nothing')}", file=err)
    queue = app.approvals()
    action = args.action or "list"
    as_json = bool(getattr(args, "json", False))
    if action == "list":
        rows = queue.recent() if getattr(args, "all", False) else queue.waiting()
        if as_json:
            print(json.dumps([r.as_dict() for r in rows], ensure_ascii=False, indent=2), file=out)
            return EXIT_OK
        if not rows:
            print("Nothing waits for your approval.", file=out)
            return EXIT_OK
        for stored in rows:
            show(stored, out)
        waiting = [r.id for r in rows if r.state == "waiting"]
        if waiting:
            print(
                f"Answer with `botpsy approvals approve ID` or `botpsy approvals deny ID` "
                f"(ID: {', '.join(map(str, waiting))}).",
                file=out,
            )
        return EXIT_OK
    approve = action == "approve"
    stored = queue.decide(args.id, approve, "user (terminal)")
    if as_json:
        print(json.dumps(stored.as_dict(), ensure_ascii=False, indent=2), file=out)
        return EXIT_OK
    show(stored, out)
    holder = "its run goes on in the window or `botpsy daemon` holding it"
    if stored.owner and app.store.owner_gone(stored.owner):
        holder = "its run goes on when the window or `botpsy daemon` starts"
    print(f"{'Approved' if approve else 'Denied'}: {holder}.", file=out)
    return EXIT_OK
