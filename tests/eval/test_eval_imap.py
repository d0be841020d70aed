"""The sandbox's IMAP stand-in, driven by the app's own mail tools and by raw IMAP commands."""

from __future__ import annotations

import imaplib
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from botpsy_desktop.adapters.email import MailClient, MailService, email_tools
from botpsy_desktop.core.accounts import MailAccount
from botpsy_desktop.eval.imap import ImapServer, Mailbox
from botpsy_desktop.eval.sandbox import (
    MAIL_ADDRESS,
    MAIL_PASSWORD,
    Sandbox,
    SandboxError,
    SandboxSettings,
    _mail_message,
    open_sandbox,
    run_tool,
    sandbox_mailbox,
)
from botpsy_desktop.eval.scoring import World, score_state
from botpsy_desktop.eval.spec import Case
from botpsy_desktop.eval.weather import WeatherStandIn
from tests.helpers.mail_servers import Dovecot
from tests.helpers.services import dovecot  # noqa: F401

MAIL: list[dict[str, Any]] = [
    {
        "from": "Ana Lopez <ana@example.org>",
        "subject": "Lunch friday?",
        "body": "Are you free for lunch on Friday at 12:30? Menya Kaze, rue Sainte-Anne.",
        "date": "2026-03-09T16:20",
    },
    {
        "from": "Banque Exemple <no-reply@bank.example>",
        "subject": "Your March statement is ready",
        "body": "Your statement for February is attached.",
        "date": "2026-03-08T07:00",
        "unread": False,
        "attachments": [
            {"name": "statement-2026-02.pdf", "size": 48000, "type": "application/pdf"}
        ],
    },
    {
        "from": "Jürgen Kraus <juergen@example.de>",
        "cc": "ana@example.org",
        "subject": "Herzliche Grüße aus Köln",
        "body": "Viele Grüße aus Köln, bis bald!",
        "date": "2026-03-10T08:10",
    },
    {
        "folder": "Archive",
        "from": "Ana Lopez <ana@example.org>",
        "subject": "Photos from Porto",
        "body": "Here are the photos!",
        "date": "2026-02-14T19:00",
        "unread": False,
    },
]


def _case(end_state: list[dict[str, Any]] | None = None) -> Case:
    return Case.model_validate(
        {
            "id": "imap-test",
            "domain": "email",
            "category": "simple",
            "language": "en",
            "now": "2026-03-10T09:30",
            "time_zone": "Europe/Paris",
            "request": "check my mail",
            "sandbox": {"mail": MAIL},
            "expect": {
                "calls": [{"tool": "list_emails", "arguments": {}}],
                "end_state": end_state or [],
            },
        }
    )


@pytest.fixture
def box() -> Iterator[Sandbox]:
    settings = SandboxSettings(WeatherStandIn(base="http://127.0.0.1:9"))
    with open_sandbox(_case(), settings) as sandbox:
        yield sandbox


def _tool(box: Sandbox, name: str, **arguments: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(run_tool(box, name, arguments, "the test"))
    return result


def test_the_app_lists_and_searches_the_sandbox_mailbox(box: Sandbox) -> None:
    listed = _tool(box, "list_emails")
    assert [(m["id"], m["subject"], m.get("unread", False)) for m in listed["messages"]] == [
        (3, "Herzliche Grüße aus Köln", True),
        (2, "Your March statement is ready", False),
        (1, "Lunch friday?", True),
    ]
    unread = _tool(box, "list_emails", unread_only=True)
    assert [m["id"] for m in unread["messages"]] == [3, 1]
    by_sender = _tool(box, "search_emails", sender="ana@example.org")
    assert [m["id"] for m in by_sender["messages"]] == [1]
    by_subject = _tool(box, "search_emails", subject="statement")
    assert [m["id"] for m in by_subject["messages"]] == [2]
    by_text = _tool(box, "search_emails", text="sainte-anne")
    assert [m["id"] for m in by_text["messages"]] == [1]
    # non-ASCII text goes as a UTF-8 literal, sent after the server's continuation
    by_literal = _tool(box, "search_emails", text="grüße aus köln")
    assert [m["id"] for m in by_literal["messages"]] == [3]
    since = _tool(box, "search_emails", since="2026-03-09")
    assert [m["id"] for m in since["messages"]] == [3, 1]
    # relative days count from the case's clock (Tuesday 10 March 2026), not the real date
    yesterday = _tool(box, "search_emails", since="yesterday")
    assert [m["id"] for m in yesterday["messages"]] == [3, 1]
    nothing = _tool(box, "search_emails", sender="nobody@example.org")
    assert nothing["messages"] == []
    archive = _tool(box, "list_emails", folder="archive")
    assert (archive["folder"], [m["subject"] for m in archive["messages"]]) == (
        "Archive",
        ["Photos from Porto"],
    )


def test_reading_a_multipart_message_lists_its_attachment_and_keeps_it_unread(
    box: Sandbox,
) -> None:
    read = _tool(box, "read_email", id=2)
    assert read["from"] == "Banque Exemple <no-reply@bank.example>"
    assert read["subject"] == "Your March statement is ready"
    assert "Your statement for February is attached." in read["body"]
    assert read["attachments"] == [
        {"name": "statement-2026-02.pdf", "type": "application/pdf", "size": "47 KB"}
    ]
    first = _tool(box, "read_email", id=1)
    assert first["unread"] is True  # read with BODY.PEEK[]: the flag is left alone
    assert _tool(box, "read_email", id=1)["unread"] is True
    with pytest.raises(SandboxError, match="no message 9"):
        run_tool(box, "read_email", {"id": 9}, "the test")


def test_a_draft_reply_lands_in_drafts_and_a_move_and_a_mark_change_the_mailbox(
    box: Sandbox,
) -> None:
    saved = _tool(
        box,
        "draft_email",
        to="ana@example.org",
        subject="Re: Lunch friday?",
        body="Friday at 12:30 works for me.",
        reply_to_id=1,
    )
    assert saved["draft_saved"] is True
    assert (saved["folder"], saved["id"]) == ("Drafts", 1)
    assert saved["in_reply_to"] == "<imap-test.1@sandbox.example.org>"
    drafts = _tool(box, "list_emails", folder="Drafts")
    assert [m["subject"] for m in drafts["messages"]] == ["Re: Lunch friday?"]
    stored = box.mailbox.messages("Drafts")[0]
    assert stored.has("\\Draft") and stored.has("\\Seen")
    moved = _tool(box, "move_email", id=2, to_folder="Trash")
    assert (moved["from_folder"], moved["to_folder"]) == ("INBOX", "Trash")
    assert [m.uid for m in box.mailbox.messages("INBOX")] == [1, 3]
    marked = _tool(box, "mark_email", id=3, read=True)
    assert marked["marked"] == "read"
    # the end-state checks of kind mail see all of it
    case = _case(
        [
            {
                "kind": "mail",
                "folder": "Drafts",
                "to": "ana@example.org",
                "subject": "Re: Lunch friday?",
                "body": "12:30",
                "count": 1,
            },
            {"kind": "mail", "folder": "Trash", "subject": "Your March statement is ready"},
            {"kind": "mail", "subject": "Your March statement is ready", "count": 0},
            {"kind": "mail", "from": "juergen@example.de", "unread": False, "count": 1},
        ]
    )
    world = World(box.context, box.app.paths.data_dir / "calendar", mailbox=box.mailbox)
    assert score_state(case, world) == (True, [])
    wrong = _case([{"kind": "mail", "folder": "Drafts", "to": "tom@example.com"}])
    ok, problems = score_state(wrong, world)
    assert not ok
    assert problems == ["end state #1 (mail): no message matches"]


def _talk(port: int, lines: list[bytes]) -> list[str]:
    """Send raw command lines one by one; the server's answer to each (up to its tagged line)."""
    answers: list[str] = []
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        stream = sock.makefile("rb")
        assert stream.readline().startswith(b"* OK")
        for line in lines:
            sock.sendall(line + b"\r\n")
            tag = line.split(b" ", 1)[0]
            got: list[bytes] = []
            while True:
                reply = stream.readline()
                got.append(reply)
                if not reply or reply.startswith(tag + b" "):
                    break
            answers.append(b"".join(got).decode("utf-8", "replace"))
    return answers


def test_unknown_commands_and_items_are_answered_bad_with_what_is_supported() -> None:
    mailbox = Mailbox()
    mailbox.add("INBOX", b"From: a@example.org\r\nSubject: hi\r\n\r\nhello\r\n")
    with ImapServer(mailbox, MAIL_ADDRESS, MAIL_PASSWORD) as server:
        answers = _talk(
            server.port,
            [
                b"a1 SELECT INBOX",
                b"a2 LOGIN " + MAIL_ADDRESS.encode() + b' "wrong"',
                b"a3 LOGIN " + MAIL_ADDRESS.encode() + b' "' + MAIL_PASSWORD.encode() + b'"',
                b"a4 FROBNICATE",
                b"a5 UID FETCH 1 (UID)",
                b"a6 SELECT INBOX",
                b"a7 UID FETCH 1 (ENVELOPE)",
                b"a8 UID SEARCH KEYWORD urgent",
                b"a9 UID THREAD REFERENCES UTF-8 ALL",
                b"b1 UID FETCH 1 (UID FLAGS BODY.PEEK[HEADER.FIELDS (SUBJECT)])",
                b"b2 LOGOUT",
            ],
        )
    assert answers[0].startswith("a1 BAD Log in (LOGIN) before SELECT")
    assert answers[1].startswith("a2 NO [AUTHENTICATIONFAILED]")
    assert answers[2].endswith("a3 OK LOGIN completed\r\n")
    assert answers[3].startswith("a4 BAD Unknown or unsupported command FROBNICATE; this server")
    assert "LOGIN, LIST" in answers[3]
    assert answers[4].startswith("a5 BAD Select a folder (SELECT or EXAMINE) before UID")
    assert "a6 OK [READ-WRITE] SELECT completed" in answers[5]
    assert answers[6].startswith("a7 BAD FETCH item ENVELOPE is not supported; UID, FLAGS")
    assert answers[7].startswith("a8 BAD SEARCH criterion KEYWORD is not supported")
    assert answers[8].startswith("a9 BAD UID THREAD is not supported")
    assert answers[9] == (
        "* 1 FETCH (UID 1 BODY[HEADER.FIELDS (SUBJECT)] {15}\r\n"
        "Subject: hi\r\n\r\n FLAGS ())\r\n"
        "b1 OK FETCH completed\r\n"
    )
    assert answers[10].startswith("* BYE")


def test_imaplib_sees_the_bad_answer_as_an_error_and_can_copy_then_expunge() -> None:
    mailbox = Mailbox()
    mailbox.add("INBOX", b"From: a@example.org\r\nSubject: one\r\n\r\nhello\r\n")
    mailbox.add("INBOX", b"From: b@example.org\r\nSubject: two\r\n\r\nhello\r\n")
    with ImapServer(mailbox, MAIL_ADDRESS, MAIL_PASSWORD) as server:
        conn = imaplib.IMAP4("127.0.0.1", server.port, timeout=5)
        try:
            conn.login(MAIL_ADDRESS, MAIL_PASSWORD)
            assert conn.select("INBOX")[0] == "OK"
            with pytest.raises(imaplib.IMAP4.error, match="Unknown or unsupported command"):
                conn.xatom("XYZZY")
            # the path of a server without MOVE: COPY, flag \Deleted, UID EXPUNGE
            assert conn.uid("COPY", "1", '"Archive"')[0] == "OK"
            assert len(mailbox.messages("INBOX")) == 2
            assert conn.uid("STORE", "1", "+FLAGS.SILENT", "(\\Deleted)")[0] == "OK"
            assert conn.uid("EXPUNGE", "1")[0] == "OK"
            assert [m.uid for m in mailbox.messages("INBOX")] == [2]
            assert [m.raw.split(b"\r\n")[1] for m in mailbox.messages("Archive")] == [
                b"Subject: one"
            ]
            assert conn.noop()[0] == "OK"
        finally:
            conn.logout()


def test_the_stand_in_answers_the_mail_tools_as_dovecot_does(
    dovecot: Dovecot,  # noqa: F811
) -> None:
    """The same seeded mailbox on the stand-in and on a real Dovecot; the same tool calls through
    the app's mail client give the same results, ids aside (each server numbers its own)."""
    case = _case()
    user, password, maildir = dovecot.new_mailbox()
    for i, spec in enumerate(case.sandbox.mail):
        raw, _ = _mail_message(case, spec, i)
        folder = "" if spec.folder.casefold() == "inbox" else spec.folder
        # delivered now, in the case's order, so Dovecot numbers them as the stand-in does
        dovecot.deliver(maildir, raw, seen=not spec.unread, folder=folder)

    def service(port: int, username: str, secret: str) -> MailService:
        acct = MailAccount(
            name="home",
            address=MAIL_ADDRESS,
            username=username,
            imap_host="127.0.0.1",
            imap_port=port,
            imap_security="none",
            smtp_host="127.0.0.1",
            smtp_port=9,
            smtp_security="none",
        )
        return MailService([MailClient(acct, lambda: secret, timeout_s=10)], tz=case.zone)

    def session(svc: MailService) -> list[Any]:
        tools = {t.name: t for t in email_tools(svc)}

        def call(name: str, **args: Any) -> dict[str, Any]:
            tool = tools[name]
            result: dict[str, Any] = tool.call(tool.validate(args))
            return result

        def uid(subject: str, folder: str = "INBOX") -> int:
            rows = call("list_emails", folder=folder, count=20)["messages"]
            return next(int(m["id"]) for m in rows if m["subject"] == subject)

        out: list[Any] = [
            call("list_emails"),
            call("list_emails", unread_only=True),
            call("search_emails", sender="ana@example.org"),
            call("search_emails", subject="Grüße"),
            call("search_emails", text="Köln"),
            call("search_emails", text="(lunch)"),
            call("search_emails", folder="archive"),
            call("read_email", id=uid("Herzliche Grüße aus Köln")),
            call("read_email", id=uid("Your March statement is ready")),
            call("draft_email", to="ana@example.org", subject="Re: Lunch", body="Yes, 12:30."),
            _undated(call("list_emails", folder="Drafts")),  # its Date is the wall clock's
            call("move_email", id=uid("Lunch friday?"), to_folder="Archive"),
            call("list_emails", folder="Archive"),
            call("mark_email", id=uid("Herzliche Grüße aus Köln")),
            call("list_emails", unread_only=True),
        ]
        return [json.loads(json.dumps(r), object_hook=_without_ids) for r in out]

    with ImapServer(sandbox_mailbox(case), MAIL_ADDRESS, MAIL_PASSWORD) as stand_in:
        on_stand_in = session(service(stand_in.port, MAIL_ADDRESS, MAIL_PASSWORD))
    on_dovecot = session(service(dovecot.port, user, password))
    assert on_stand_in == on_dovecot


def _without_ids(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in ("id", "inverse")}


def _undated(listed: dict[str, Any]) -> dict[str, Any]:
    return {**listed, "messages": [{**m, "date": None} for m in listed["messages"]]}
