"""`botpsy contacts`: sync the address books, look someone up, show one contact."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_ERROR, EXIT_OK
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.text import terminal_safe


def add_command(sub: Any) -> None:
    """The `contacts` subcommand and its actions."""
    c = sub.add_parser("contacts", help="address books: vCard files and CardDAV accounts")
    act = c.add_subparsers(dest="contacts_command", required=True, metavar="ACTION")
    sync = act.add_parser("sync", help="bring every address book's local copy up to date")
    find = act.add_parser("find", help="look up a name, nickname, email, phone or company")
    find.add_argument("query")
    show = act.add_parser("show", help="one contact's details (an id from find, or a name)")
    show.add_argument("contact")
    for sp in (sync, find, show):
        sp.add_argument("--json", action="store_true", help="print JSON")


def cmd_contacts(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Sync prints one line per book (cards written, removed, skipped with why); find and show
    answer from the local copy, as the assistant's tools do."""
    service = app.contacts
    if service is None or not service.configured:
        raise BotpsyError(
            "No address book is set up.",
            "Add .vcf files or folders under contacts.files in the settings, or a CalDAV "
            "account's address books with `botpsy account add caldav NAME ... --contacts own`.",
        )
    if args.contacts_command == "sync":
        reports = service.sync()
        if args.json:
            rows = [
                {
                    "book": r.book,
                    "label": r.label,
                    "written": r.written,
                    "removed": r.removed,
                    "unchanged": r.unchanged,
                    "skipped": r.problems,
                    "error": r.error,
                }
                for r in reports
            ]
            json.dump({"books": rows, "cards": service.cache.count()}, out, indent=2)
            out.write("\n")
        else:
            for r in reports:
                print(terminal_safe(r.line()), file=out)
                for problem in r.problems:
                    print(terminal_safe(f"  skipped: {problem}"), file=out)
        return EXIT_ERROR if any(r.error for r in reports) else EXIT_OK
    found = (
        service.find(args.query)
        if args.contacts_command == "find"
        else service.details(args.contact)
    )
    if args.json:
        json.dump(found, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return EXIT_OK
    people = found.get("contacts") or ([found["contact"]] if "contact" in found else [])
    for person in people:
        mails = ", ".join(person.get("emails") or []) or "no email"
        extra = ", ".join(person.get("phones") or [])
        line = f"{person['id']}  {person['name']} <{mails}>" + (f"  {extra}" if extra else "")
        print(terminal_safe(line), file=out)
        for key in ("company", "birthday", "anniversary", "note"):
            if key in found.get("contact", {}) and person.get(key):
                print(terminal_safe(f"  {key}: {person[key]}"), file=out)
    if not people:
        print("Nobody matches.", file=out)
    if found.get("as_of"):
        print(terminal_safe(f"(as of: {found['as_of']})"), file=out)
    return EXIT_OK
