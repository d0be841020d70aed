"""`botpsy account`: add, list, test and remove calendar and mail accounts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_ERROR, EXIT_OK
from botpsy_desktop.core.errors import BotpsyError


def add_command(sub: Any) -> None:
    """The `account` subcommand and its actions."""
    acc = sub.add_parser("account", help="calendar (CalDAV) and mail (IMAP/SMTP) accounts")
    act = acc.add_subparsers(dest="account_command", required=True, metavar="ACTION")
    add = act.add_parser("add", help="add an account; its password goes to the OS keyring")
    kind = add.add_subparsers(dest="kind", required=True, metavar="KIND")
    dav = kind.add_parser("caldav", help="a CalDAV server (Nextcloud, Fastmail, iCloud...)")
    dav.add_argument("--url", required=True, help="CalDAV URL, e.g. https://host/remote.php/dav")
    dav.add_argument("--username", required=True)
    dav.add_argument("--calendar", help="calendar new events go to (default: the first)")
    dav.add_argument("--email", help="your address as organizer of invitations")
    dav.add_argument(
        "--contacts",
        choices=("off", "own", "shared"),
        help="its address books (CardDAV, same password): own (only you write them) or shared "
        "(others can: their fields count as outside content); default off",
    )
    dav.add_argument(
        "--contacts-url",
        help="CardDAV URL where it is not the CalDAV URL (Fastmail, iCloud)",
    )
    mail = kind.add_parser("mail", help="a mailbox: IMAP to read, SMTP to send")
    mail.add_argument("--address", required=True, help="your email address")
    mail.add_argument("--username", help="login name (default: the address)")
    mail.add_argument("--display-name", default="", help="your name, shown to recipients")
    for side, port in (("imap", "993 ssl, 143 starttls"), ("smtp", "465 ssl, 587 starttls")):
        mail.add_argument(f"--{side}-host", required=True)
        mail.add_argument(f"--{side}-port", type=int, help=f"default {port}")
        mail.add_argument(f"--{side}-security", choices=("ssl", "starttls", "none"), default="ssl")
    mail.add_argument("--drafts-folder", help="default: the server's Drafts folder")
    mail.add_argument("--sent-folder", help="keep a copy of sent mail there (not for Gmail)")
    for sp in (dav, mail):
        sp.add_argument("name", help="a short name, e.g. work")
        sp.add_argument("--ca-file", help="extra CA certificate (PEM) to trust")
        sp.add_argument("--password-stdin", action="store_true", help="read it from stdin")
        sp.add_argument(
            "--session-only",
            action="store_true",
            help="store no password: it is given each session (no keyring needed)",
        )
    act.add_parser("list", help="the accounts and whether a password is stored").add_argument(
        "--json", action="store_true", help="print them as JSON"
    )
    for name, text in (
        ("test", "connect and say in one line what works"),
        ("password", "store a new password for an account"),
        ("remove", "forget an account and its stored password"),
    ):
        sp = act.add_parser(name, help=text)
        sp.add_argument("name")
        if name != "remove":
            sp.add_argument("--password-stdin", action="store_true", help="read it from stdin")


def cmd_account(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Add, list, test and remove accounts; passwords only ever go to the keyring (or memory)."""
    from pydantic import ValidationError

    from botpsy_desktop.adapters.accounts import check_account
    from botpsy_desktop.core.accounts import (
        AccountBook,
        CalDAVAccount,
        MailAccount,
        validation_sentence,
    )
    from botpsy_desktop.core.secrets import KeyringUnavailable

    book, secrets, action = AccountBook.for_paths(app.paths), app.secrets, args.account_command

    def password(name: str) -> str:
        if args.password_stdin:
            return sys.stdin.readline().rstrip("\r\n")
        if not sys.stdin.isatty():
            raise BotpsyError("No terminal to ask the password on.", "Use --password-stdin.")
        import getpass

        return getpass.getpass(f"Password for {name}: ", stream=err)

    if action == "add":
        fields = {k: v for k, v in vars(args).items() if v is not None and v != ""}
        if fields.get("contacts") == "off":
            del fields["contacts"]
        keep = CalDAVAccount.model_fields if args.kind == "caldav" else MailAccount.model_fields
        fields.setdefault("username", fields.get("address"))
        try:
            account: CalDAVAccount | MailAccount = (
                CalDAVAccount if args.kind == "caldav" else MailAccount
            ).model_validate({k: v for k, v in fields.items() if k in keep})
        except ValidationError as exc:
            why = validation_sentence(exc)
            raise BotpsyError(f"Invalid account ({why}).", "Correct the options.") from None
        if book.get(account.name) is not None:
            raise BotpsyError(
                f"There is already an account named {account.name!r}.",
                "Choose another name, or remove it first with `botpsy account remove`.",
            )
        if not args.session_only:
            secrets.set(account.name, password(account.name))  # nothing is saved if this fails
        book.add(account)
        where = "not stored (given each session)" if args.session_only else "in the OS keyring"
        print(
            f"Added {account.kind} account {account.name!r}; password {where}. "
            f"Check it with `botpsy account test {account.name}`.",
            file=out,
        )
        return EXIT_OK
    if action == "list":
        rows = []
        for a in book.load():
            try:
                stored = "keyring" if secrets.get(a.name) else "none"
            except KeyringUnavailable:
                stored = "unknown (no keyring)"
            host = a.url if isinstance(a, CalDAVAccount) else f"{a.imap_host}, {a.smtp_host}"
            books = (a.contacts if isinstance(a, CalDAVAccount) else None) or "off"
            rows.append(
                dict(
                    name=a.name,
                    kind=a.kind,
                    user=a.username,
                    server=host,
                    pw=stored,
                    contacts=books,
                )
            )
        if args.json:
            json.dump(rows, out, indent=2)
            out.write("\n")
        for r in [] if args.json else rows:
            line = f"{r['name']:<16} {r['kind']:<7} {r['user']} @ {r['server']}"
            shown = f", address books: {r['contacts']}" if r["contacts"] != "off" else ""
            print(f"{line} (password: {r['pw']}{shown})", file=out)
        if not rows and not args.json:
            print("No accounts. Add one with `botpsy account add caldav|mail NAME ...`.", file=out)
        return EXIT_OK
    found = book.get(args.name)
    if found is None:
        names = ", ".join(a.name for a in book.load()) or "none"
        raise BotpsyError(f"There is no account {args.name!r} (accounts: {names}).")
    if action == "remove":
        book.remove(found.name)
        try:
            gone = secrets.delete(found.name)
        except KeyringUnavailable as exc:
            print(f"Removed {found.name!r}; its keyring entry stays: {exc}", file=err)
            return EXIT_OK
        note = " and its password" if gone else ""
        print(f"Removed account {found.name!r}{note}.", file=out)
        return EXIT_OK
    if action == "password":
        secrets.set(found.name, password(found.name))
        print(f"Stored a new password for {found.name!r} in the OS keyring.", file=out)
        return EXIT_OK
    if args.password_stdin:  # test with a password given for this run only
        secrets.set(found.name, password(found.name), session_only=True)
    ok, line = check_account(found, secrets, app.config)
    print(line, file=out)
    return EXIT_OK if ok else EXIT_ERROR
