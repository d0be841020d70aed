"""`botpsy account ...` and calendar and mail requests end to end, against real servers.

Radicale (CalDAV), Dovecot (IMAP), aiosmtpd (SMTP) and gnome-keyring (Secret Service) run on
this machine for the tests; `botpsy ask --replay` drives the real loop, gate and adapters.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import keyring
import keyring.core
import pytest
from keyring.backends import fail

from botpsy_desktop.cli import main
from botpsy_desktop.core.accounts import AccountBook, CalDAVAccount, MailAccount
from botpsy_desktop.core.secrets import SecretStore
from tests.helpers import mail_samples as samples
from tests.helpers.keyring_service import SecretService
from tests.helpers.mail_servers import Dovecot, SMTPServer, smtp_server
from tests.helpers.radicale_server import Radicale
from tests.helpers.replay import xml_call
from tests.helpers.services import (  # noqa: F401
    dovecot,
    keyring_env,
    radicale,
    secret_service,
)

PARIS = ZoneInfo("Europe/Paris")
REPO = Path(__file__).resolve().parents[2]


def replay(tmp_path: Path, *turns: str) -> str:
    f = tmp_path / "replay.json"
    f.write_text(json.dumps(list(turns)), encoding="utf-8")
    return str(f)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    config = {
        "files": {"roots": [str(tmp_path / "files")]},
        "music": {"folders": [str(tmp_path / "music")], "player": "none"},
        "calendar": {"time_zone": "Europe/Paris"},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def run_cli(
    args: list[str], env: dict[str, str], stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        timeout=120,
        check=False,
    )


# --- accounts on the command line ---------------------------------------------------------


def test_account_commands_with_a_real_keyring(
    home: Path,
    radicale: Radicale,  # noqa: F811
    dovecot: Dovecot,  # noqa: F811
    secret_service: SecretService,  # noqa: F811
) -> None:
    env = {"DBUS_SESSION_BUS_ADDRESS": secret_service.env["DBUS_SESSION_BUS_ADDRESS"]}
    user, cal_pw = radicale.new_user()
    radicale.client(user).principal().make_calendar(name="Personal")
    base = ["--home", str(home), "account"]
    added = run_cli(
        [
            *base,
            "add",
            "caldav",
            "cloud",
            "--url",
            radicale.url,
            "--username",
            user,
            "--password-stdin",
        ],
        env,
        stdin=cal_pw + "\n",
    )
    assert added.returncode == 0, added.stderr
    assert "password in the OS keyring" in added.stdout
    tested = run_cli([*base, "test", "cloud"], env)
    assert tested.returncode == 0, tested.stderr
    assert tested.stdout.strip() == "cloud (caldav): CalDAV ok: 1 calendar(s) (Personal)"

    mail_user, mail_pw, _ = dovecot.new_mailbox()
    with smtp_server({mail_user: mail_pw}) as smtp:
        added = run_cli(
            [
                *base,
                "add",
                "mail",
                "box",
                "--address",
                "me@example.org",
                "--username",
                mail_user,
                "--imap-host",
                "127.0.0.1",
                "--imap-port",
                str(dovecot.ssl_port),
                "--ca-file",
                str(dovecot.certs.ca),
                "--smtp-host",
                "127.0.0.1",
                "--smtp-port",
                str(smtp.port),
                "--smtp-security",
                "none",
                "--password-stdin",
            ],
            env,
            stdin=mail_pw + "\n",
        )
        assert added.returncode == 0, added.stderr
        tested = run_cli([*base, "test", "box"], env)
    assert tested.returncode == 0, tested.stderr
    assert tested.stdout.strip() == (
        "box (mail): IMAP ok (INBOX: 0 messages, 0 unread; 5 folders); SMTP ok (login accepted)"
    )

    listed = json.loads(run_cli([*base, "list", "--json"], env).stdout)
    assert [(a["name"], a["kind"], a["pw"]) for a in listed] == [
        ("cloud", "caldav", "keyring"),
        ("box", "mail", "keyring"),
    ]
    text = (home / "config" / "accounts.json").read_text()
    assert cal_pw not in text and mail_pw not in text

    wrong = run_cli([*base, "password", "cloud", "--password-stdin"], env, stdin="wrong\n")
    assert wrong.returncode == 0
    failed = run_cli([*base, "test", "cloud"], env)
    assert failed.returncode == 1
    assert "CalDAV failed: The CalDAV server of account 'cloud'" in failed.stdout
    assert "refused the user name or password" in failed.stdout

    removed = run_cli([*base, "remove", "cloud"], env)
    assert removed.stdout.strip() == "Removed account 'cloud' and its password."
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = env["DBUS_SESSION_BUS_ADDRESS"]
    try:
        assert secret_service.backend().get_password("botpsy-desktop", "account:cloud") is None
    finally:
        del os.environ["DBUS_SESSION_BUS_ADDRESS"]


def test_without_a_keyring_nothing_is_saved_and_the_fix_is_named(home: Path) -> None:
    env = {"PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    args = [
        "--home",
        str(home),
        "account",
        "add",
        "caldav",
        "cloud",
        "--url",
        "https://cloud.example.org/dav/",
        "--username",
        "me",
    ]
    result = run_cli([*args, "--password-stdin"], env, stdin="secret\n")
    assert result.returncode == 1
    assert "No OS keyring is available" in result.stderr
    assert "gnome-keyring" in result.stderr and "for this session only" in result.stderr
    assert not (home / "config" / "accounts.json").exists()
    session = run_cli([*args, "--session-only"], env)
    assert session.returncode == 0, session.stderr
    assert "password not stored (given each session)" in session.stdout
    listed = run_cli(["--home", str(home), "account", "list"], env)
    assert "(password: unknown (no keyring))" in listed.stdout


@pytest.fixture
def no_keyring() -> Iterator[None]:
    previous = keyring.core._keyring_backend
    keyring.set_keyring(fail.Keyring())
    try:
        yield
    finally:
        keyring.core._keyring_backend = previous


def test_the_app_starts_without_a_keyring_and_the_tools_say_why(
    home: Path, tmp_path: Path, no_keyring: None, capsys: pytest.CaptureFixture[str]
) -> None:
    book = AccountBook(home / "config" / "accounts.json")
    book.add(CalDAVAccount(name="cloud", url="https://cloud.example.org/dav/", username="me"))
    book.add(
        MailAccount(
            name="box",
            address="me@example.org",
            username="me",
            imap_host="imap.example.org",
            smtp_host="smtp.example.org",
        )
    )
    assert main(["--home", str(home), "tools", "--json"]) == 0
    names = {t["name"] for t in json.loads(capsys.readouterr().out)}
    assert {"list_events", "create_event", "list_emails", "send_email"} <= names
    file = replay(tmp_path, xml_call("list_emails"), "I could not read your mail.")
    assert main(["--home", str(home), "ask", "--replay", file, "--json", "any new mail?"]) == 0
    [result] = json.loads(capsys.readouterr().out)["tool_calls"]
    assert result["ok"] is False
    assert "No OS keyring is available" in result["result"]
    assert "gnome-keyring" in result["result"]


# --- end to end: a calendar request and an email request --------------------------------------


def _calendar_account(home: Path, server: Radicale, store: SecretStore) -> tuple[str, Any]:
    user, password = server.new_user()
    theirs = server.client(user).principal().make_calendar(name="Personal")
    AccountBook(home / "config" / "accounts.json").add(
        CalDAVAccount(name="cloud", url=server.url, username=user)
    )
    store.set("cloud", password)
    return password, theirs


def test_ask_creates_an_event_a_second_client_sees(
    home: Path,
    tmp_path: Path,
    radicale: Radicale,  # noqa: F811
    keyring_env: SecretService,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    _calendar_account(home, radicale, SecretStore())
    file = replay(
        tmp_path,
        xml_call("create_event", title="Dentist", start="tomorrow 9am", duration="45 minutes"),
        "Added: Dentist tomorrow at 9:00.",
    )
    code = main(
        [
            "--home",
            str(home),
            "ask",
            "--replay",
            file,
            "--json",
            "--approve",
            "all",
            "put the dentist tomorrow at 9",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data
    [tool] = data["tool_calls"]
    # a personal event the user asked for: a reversible change that runs at once
    assert tool["ok"] and tool["decision"] == "allowed", tool
    assert data["approvals"] == []
    tomorrow = (datetime.now(PARIS) + timedelta(days=1)).date()
    [event] = _theirs_events(radicale, home)
    vevent = event.icalendar_component
    assert str(vevent["SUMMARY"]) == "Dentist"
    assert vevent["DTSTART"].dt == datetime(
        tomorrow.year, tomorrow.month, tomorrow.day, 9, 0, tzinfo=PARIS
    )
    assert vevent["DTEND"].dt - vevent["DTSTART"].dt == timedelta(minutes=45)


def _theirs_events(server: Radicale, home: Path) -> list[Any]:
    [account] = AccountBook(home / "config" / "accounts.json").load()
    [calendar] = server.client(account.username).principal().get_calendars()
    return list(calendar.search(event=True))


def _mail_account(
    home: Path, box: Dovecot, smtp: SMTPServer, user: str, store: SecretStore, password: str
) -> None:
    AccountBook(home / "config" / "accounts.json").add(
        MailAccount(
            name="box",
            address="me@example.org",
            display_name="Me Myself",
            username=user,
            imap_host="127.0.0.1",
            imap_port=box.port,
            imap_security="none",
            smtp_host="127.0.0.1",
            smtp_port=smtp.port,
            smtp_security="none",
        )
    )
    store.set("box", password)


BODY = "Hi Ana,\n\nThursday 10:00 works for me.\n\nBest,\nMe"
SEND = xml_call(
    "send_email",
    to="Ana Lima <ana@example.com>",
    subject="Re: Réunion budget",
    body=BODY,
)


@pytest.mark.parametrize("approve", ["all", "deny"])
def test_ask_sends_exactly_the_approved_email_or_nothing(
    approve: str,
    home: Path,
    tmp_path: Path,
    dovecot: Dovecot,  # noqa: F811
    keyring_env: SecretService,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    user, password, _ = dovecot.new_mailbox()
    with smtp_server({user: password}) as smtp:
        _mail_account(home, dovecot, smtp, user, SecretStore(), password)
        file = replay(tmp_path, SEND, "Done.")
        code = main(
            [
                "--home",
                str(home),
                "ask",
                "--replay",
                file,
                "--json",
                "--approve",
                approve,
                "tell Ana thursday 10 works",
            ]
        )
        received = list(smtp.received)
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    [approval] = data["approvals"]
    assert approval["tool"] == "send_email"
    assert sorted(approval["effects"]) == ["outbound", "personal-data"]
    assert approval["arguments"] == {
        "to": "Ana Lima <ana@example.com>",
        "subject": "Re: Réunion budget",
        "body": BODY,
    }
    receipt = approval["receipt"]
    assert "ana@example.com" in receipt and "Re: Réunion budget" in receipt
    assert json.dumps(BODY, ensure_ascii=False)[1:-1] in receipt or BODY in receipt
    if approve == "deny":
        assert received == []
        assert data["tool_calls"][0]["decision"] == "denied"
        return
    [got] = received
    assert got.mail_from == "me@example.org" and got.rcpt_tos == ["ana@example.com"]
    msg = got.message
    assert msg["To"] == "Ana Lima <ana@example.com>"
    assert msg["From"] == "Me Myself <me@example.org>"
    assert msg["Subject"] == "Re: Réunion budget"
    assert str(msg.get_content()).replace("\r\n", "\n") == BODY + "\n"


def test_canary_password_never_leaks(
    home: Path,
    tmp_path: Path,
    radicale: Radicale,  # noqa: F811
    dovecot: Dovecot,  # noqa: F811
    keyring_env: SecretService,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Mail and calendar passwords appear in no log, no file of the profile (conversation store
    included), no tool result, no printed output and nothing the model is given."""
    store = SecretStore()
    cal_password, _ = _calendar_account(home, radicale, store)
    user, mail_password, maildir = dovecot.new_mailbox()
    dovecot.deliver(maildir, samples.multipart_with_attachment(samples.now()))
    caplog.set_level(logging.DEBUG)
    with smtp_server({user: mail_password}) as smtp:
        _mail_account(home, dovecot, smtp, user, store, mail_password)
        file = replay(
            tmp_path,
            xml_call("list_emails"),
            xml_call("read_email", id="1"),
            xml_call("list_events", when="this week"),
            xml_call("create_event", title="Budget meeting", start="thursday 10:00"),
            SEND,
            xml_call("read_email", id="999"),
            "Done.",
        )
        code = main(
            [
                "--home",
                str(home),
                "ask",
                "--replay",
                file,
                "--json",
                "--approve",
                "all",
                "read my mail, check my week, book thursday, answer Ana",
            ]
        )
        assert len(smtp.received) == 1
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert code == 0, data
    assert [c["ok"] for c in data["tool_calls"]] == [True, True, True, True, True, False]
    assert "Réunion budget" in data["tool_calls"][1]["result"]

    forms: list[str] = []
    for login, secret in ((user, mail_password), (radicale_user(home), cal_password)):
        forms += [
            secret,
            base64.b64encode(secret.encode()).decode(),
            base64.b64encode(f"{login}:{secret}".encode()).decode(),  # HTTP Basic
            base64.b64encode(f"\0{login}\0{secret}".encode()).decode(),  # SASL PLAIN
        ]
    # the test's own SMTP server logs the wire (AUTH lines included): not the app's logs
    app_logs = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith(("mail.log", "aiosmtpd"))
    )
    places = {"stdout": out.out, "stderr": out.err, "logs": app_logs}
    for path in home.rglob("*"):
        if path.is_file():
            places[str(path)] = path.read_bytes().decode("latin-1")
    for where, text in places.items():
        for form in forms:
            assert form not in text, f"a password form leaked into {where}"
    assert any(p.endswith(".sqlite3") for p in places), "the conversation store was checked"


def radicale_user(home: Path) -> str:
    account = next(
        a for a in AccountBook(home / "config" / "accounts.json").load() if a.kind == "caldav"
    )
    return account.username
