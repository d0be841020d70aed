"""Mail tools against a real Dovecot (IMAP) and aiosmtpd (SMTP) on 127.0.0.1."""

from __future__ import annotations

import imaplib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from botpsy_desktop.adapters.email import MailClient, MailService, email_tools
from botpsy_desktop.adapters.untrusted import QUOTE_END, QUOTE_START, UNTRUSTED_NOTE
from botpsy_desktop.core.accounts import MailAccount
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tool
from tests.helpers import mail_samples as samples
from tests.helpers.mail_servers import Dovecot, SMTPServer, smtp_server
from tests.helpers.radicale_server import free_port
from tests.helpers.services import dovecot  # noqa: F401

TZ = ZoneInfo("Europe/Paris")


@dataclass
class Mailbox:
    user: str
    password: str
    maildir: Path
    server: Dovecot

    def imap(self) -> imaplib.IMAP4:
        """A second, independent IMAP client to check what the tools did."""
        conn = imaplib.IMAP4("127.0.0.1", self.server.port, timeout=10)
        conn.login(self.user, self.password)
        return conn


def _seed(server: Dovecot) -> Mailbox:
    user, password, maildir = server.new_mailbox()
    t = samples.now()
    server.deliver(
        maildir, samples.latin1(t - timedelta(days=9)), seen=True, when=t - timedelta(days=9)
    )
    server.deliver(
        maildir,
        samples.multipart_with_attachment(t - timedelta(days=3)),
        when=t - timedelta(days=3),
    )
    server.deliver(
        maildir, samples.html_only(t - timedelta(days=2)), seen=True, when=t - timedelta(days=2)
    )
    server.deliver(maildir, samples.shift_jis(t - timedelta(days=1)), when=t - timedelta(days=1))
    server.deliver(
        maildir, samples.large(t - timedelta(hours=2)), seen=True, when=t - timedelta(hours=2)
    )
    server.deliver(
        maildir,
        samples.simple(
            t - timedelta(days=30),
            "Old <old@example.com>",
            "Archived thing",
            "old\n",
            "<old-1@example.com>",
        ),
        seen=True,
        when=t - timedelta(days=30),
        folder="Archive",
    )
    return Mailbox(user, password, maildir, server)


@pytest.fixture
def mailbox(dovecot: Dovecot) -> Mailbox:  # noqa: F811
    return _seed(dovecot)


@pytest.fixture
def smtp(mailbox: Mailbox) -> Iterator[SMTPServer]:
    """aiosmtpd taking the same login as the mailbox (one password per account, as in life)."""
    with smtp_server({mailbox.user: mailbox.password}) as server:
        yield server


def account(box: Mailbox, smtp_port: int = 0, **extra: Any) -> MailAccount:
    fields: dict[str, Any] = {
        "name": "home",
        "address": "alice@example.org",
        "display_name": "Alice Martin",
        "username": box.user,
        "imap_host": "127.0.0.1",
        "imap_port": box.server.port,
        "imap_security": "none",
        "smtp_host": "127.0.0.1",
        "smtp_port": smtp_port or free_port(),
        "smtp_security": "none",
    }
    fields.update(extra)
    return MailAccount.model_validate(fields)


def service(
    box: Mailbox, smtp: SMTPServer | None = None, *, password: str | None = None, **kw: Any
) -> MailService:
    acct = account(box, smtp.port if smtp else 0, **kw.pop("account", {}))
    secret = password or box.password
    client = MailClient(acct, lambda: secret, timeout_s=10, **kw)
    return MailService([client], tz=TZ)


def text_of(msg: Any) -> str:
    """A received message's text; line ends as the reader sees them (CRLF is the wire's)."""
    return str(msg.get_content()).replace("\r\n", "\n")


def tools(svc: MailService) -> dict[str, Tool]:
    return {t.name: t for t in email_tools(svc)}


def call(svc: MailService, name: str, **args: Any) -> dict[str, Any]:
    tool = tools(svc)[name]
    result = tool.call(tool.validate(args))
    json.dumps(result)  # the loop serialises results: they must be JSON
    assert isinstance(result, dict)
    return result


def test_effects_are_declared_for_the_gate() -> None:
    svc = MailService([], tz=TZ)
    effects = {t.name: t.effects for t in email_tools(svc)}
    assert effects["list_emails"] == {Effect.READ}
    assert effects["search_emails"] == {Effect.READ}
    assert effects["read_email"] == {Effect.READ}
    assert effects["draft_email"] == {Effect.LOCAL_WRITE}
    assert effects["send_email"] == {Effect.OUTBOUND, Effect.PERSONAL_DATA}
    assert effects["move_email"] == {Effect.LOCAL_WRITE}
    assert effects["mark_email"] == {Effect.LOCAL_WRITE}


def test_list_shows_newest_first_with_decoded_subjects_and_unread(mailbox: Mailbox) -> None:
    result = call(service(mailbox), "list_emails")
    assert result["folder"] == "INBOX"
    assert result["note"] == UNTRUSTED_NOTE
    subjects = [m["subject"] for m in result["messages"]]
    assert subjects == [
        "Holiday photos",
        "会議のお知らせ",
        "Weekly deals",
        "Réunion budget — ordre du jour",
        "Café de Noël",
    ]
    unread = {m["subject"] for m in result["messages"] if m.get("unread")}
    assert unread == {"会議のお知らせ", "Réunion budget — ordre du jour"}
    assert result["messages"][-1]["from"] == "José García <jose@example.net>"
    only_unread = call(service(mailbox), "list_emails", unread_only=True, count=1)
    assert [m["subject"] for m in only_unread["messages"]] == ["会議のお知らせ"]


def _find(svc: MailService, subject: str) -> int:
    rows = call(svc, "list_emails", count=50)["messages"]
    return next(int(m["id"]) for m in rows if m["subject"] == subject)


def test_read_multipart_prefers_plain_text_and_lists_attachment(mailbox: Mailbox) -> None:
    svc = service(mailbox)
    msg = call(svc, "read_email", id=_find(svc, "Réunion budget — ordre du jour"))
    assert msg["from"] == "Ana Lima <ana@example.com>"
    assert msg["body"].startswith(QUOTE_START) and msg["body"].endswith(QUOTE_END)
    assert "Voici l'ordre du jour pour jeudi." in msg["body"]
    assert "<b>" not in msg["body"]
    [attachment] = msg["attachments"]
    assert attachment["name"] == "ordre-du-jour.pdf"
    assert attachment["type"] == "application/pdf"
    assert attachment["size"] == "2 KB"
    assert msg["unread"] is True
    # reading is read-only: the message is still unread on the server
    again = call(svc, "list_emails", unread_only=True)
    assert "Réunion budget — ordre du jour" in [m["subject"] for m in again["messages"]]


def test_read_html_only_is_reduced_to_text_and_injection_is_defused(mailbox: Mailbox) -> None:
    svc = service(mailbox)
    msg = call(svc, "read_email", id=_find(svc, "Weekly deals"))
    body = msg["body"]
    assert msg["body_from"] == "HTML, shown as text"
    assert "Weekly deals" in body and "Hello friend, see our" in body
    assert "latest offers <https://shop.example/deals>" in body
    assert "- Coffee & tea" in body
    assert "alert(" not in body and "color: red" not in body
    for raw in ("<|im_start|>", "<|im_end|>", "<tool_call>", "<function=send_email>"):
        assert raw not in json.dumps(msg, ensure_ascii=False)
    assert "ignore all previous instructions" in body  # shown, as quoted data
    assert msg["note"] == UNTRUSTED_NOTE


def test_read_non_utf8_messages(mailbox: Mailbox) -> None:
    svc = service(mailbox)
    latin = call(svc, "read_email", id=_find(svc, "Café de Noël"))
    assert "Chère Alice," in latin["body"]
    assert "le café de Noël est à 15h." in latin["body"]
    assert "À bientôt," in latin["body"]
    japanese = call(svc, "read_email", id=_find(svc, "会議のお知らせ"))
    assert "アリスさん、明日の会議は十時からです。" in japanese["body"]


def test_large_message_lists_the_attachment_or_says_it_was_cut(mailbox: Mailbox) -> None:
    svc = service(mailbox)
    uid = _find(svc, "Holiday photos")
    whole = call(svc, "read_email", id=uid)
    assert "The photos from the trip are attached." in whole["body"]
    assert whole["attachments"] == [
        {"name": "photos.zip", "type": "application/zip", "size": "3.0 MB"}
    ]
    assert "truncated" not in whole
    capped = call(service(mailbox, max_message_bytes=200_000), "read_email", id=uid)
    assert "The photos from the trip are attached." in capped["body"]
    assert "only the first 195 KB were read" in capped["truncated"]


def test_body_is_clipped(mailbox: Mailbox) -> None:
    svc = service(mailbox)
    svc.max_body_chars = 200
    msg = call(svc, "read_email", id=_find(svc, "Weekly deals"))
    assert "[clipped:" in msg["body"]
    assert len(msg["body"]) < 400


def test_search_by_sender_subject_text_since_and_unread(mailbox: Mailbox) -> None:
    svc = service(mailbox)

    def subjects(**criteria: Any) -> list[str]:
        return [m["subject"] for m in call(svc, "search_emails", **criteria)["messages"]]

    assert subjects(sender="ana@example.com") == ["Réunion budget — ordre du jour"]
    assert subjects(subject="deals") == ["Weekly deals"]
    assert subjects(since="2 days ago", unread_only=True) == ["会議のお知らせ"]
    assert subjects(subject="Noël") == ["Café de Noël"]  # non-ASCII: matched on decoded headers
    assert subjects(text="ordre du jour") == ["Réunion budget — ordre du jour"]
    assert subjects(text="café") == ["Café de Noël"]  # non-ASCII text: CHARSET UTF-8 search
    assert subjects(folder="Archive") == ["Archived thing"]
    empty = call(svc, "search_emails", sender="nobody@example.com")
    assert empty["messages"] == [] and empty["summary"] == "No messages found."


def test_search_values_with_imap_specials_and_odd_folder_names_reach_the_server_intact(
    mailbox: Mailbox,
) -> None:
    t = samples.now()
    for subject, msgid in (
        ("Budget (urgent)", "<b-1@example.com>"),
        ("Budget", "<b-2@example.com>"),
    ):
        mailbox.server.deliver(
            mailbox.maildir,
            samples.simple(t, "Zoé <zoe@example.com>", subject, "x\n", msgid),
            when=t,
        )
    # a folder whose name needs modified UTF-7 and an escaped "&" on the wire
    mailbox.server.deliver(
        mailbox.maildir,
        samples.simple(t, "Bank <bank@example.com>", "Statement", "y\n", "<s-1@example.com>"),
        seen=True,
        when=t,
        folder="Re&AOc-us &- factures",  # Maildir++ keeps the wire name of "Reçus & factures"
    )
    svc = service(mailbox)

    def subjects(**criteria: Any) -> list[str]:
        return [m["subject"] for m in call(svc, "search_emails", **criteria)["messages"]]

    assert subjects(subject="(urgent)") == ["Budget (urgent)"]  # sent as a literal, not a list
    assert subjects(subject='"quoted" \\ back') == []
    assert subjects(text="{3}") == []
    [statement] = call(svc, "list_emails", folder="reçus & factures")["messages"]
    assert statement["subject"] == "Statement"
    moved = call(svc, "move_email", id=_find(svc, "Budget (urgent)"), to_folder="Reçus & factures")
    assert moved["to_folder"] == "Reçus & factures"
    conn = mailbox.imap()
    conn.select('"Re&AOc-us &- factures"', readonly=True)
    _, data = conn.search(None, "SUBJECT", '"Budget (urgent)"')
    assert len(data[0].split()) == 1
    conn.logout()


def test_mark_read_and_unread_changes_the_flag_on_the_server(mailbox: Mailbox) -> None:
    svc = service(mailbox)
    uid = _find(svc, "会議のお知らせ")
    result = call(svc, "mark_email", id=uid)
    assert result["marked"] == "read"
    assert result["inverse"] == {
        "tool": "mark_email",
        "arguments": {"id": uid, "read": False, "folder": "INBOX", "account": "home"},
    }
    conn = mailbox.imap()
    conn.select("INBOX", readonly=True)
    _, data = conn.uid("FETCH", str(uid), "(FLAGS)")
    assert b"\\Seen" in data[0]
    conn.logout()
    assert call(svc, "mark_email", id=uid)["note"] == "It was already read."
    assert call(svc, "mark_email", id=uid, read=False)["marked"] == "unread"
    with pytest.raises(ToolError, match="no message 9999 in INBOX"):
        call(svc, "mark_email", id=9999)


def test_move_to_archive(mailbox: Mailbox) -> None:
    svc = service(mailbox)
    uid = _find(svc, "Weekly deals")
    result = call(svc, "move_email", id=uid, to_folder="archive")
    assert result == {
        "moved": True,
        "id": uid,
        "subject": "Weekly deals",
        "from_folder": "INBOX",
        "to_folder": "Archive",
    }
    conn = mailbox.imap()
    conn.select("Archive", readonly=True)
    _, data = conn.search(None, "SUBJECT", '"Weekly deals"')
    assert data[0].split()
    conn.select("INBOX", readonly=True)
    _, data = conn.search(None, "SUBJECT", '"Weekly deals"')
    assert data == [b""]
    conn.logout()
    with pytest.raises(ToolError, match=r"no folder 'Nowhere' \(folders: .*Archive.*INBOX"):
        call(svc, "move_email", id=_find(svc, "Café de Noël"), to_folder="Nowhere")


def test_draft_is_saved_in_drafts_and_threads_a_reply(mailbox: Mailbox) -> None:
    svc = service(mailbox)
    original = _find(svc, "Réunion budget — ordre du jour")
    result = call(
        svc,
        "draft_email",
        to="Ana Lima <ana@example.com>",
        subject="Re: Réunion budget",
        body="Merci Ana,\nà jeudi.",
        reply_to_id=original,
    )
    assert result["draft_saved"] is True and result["folder"] == "Drafts"
    assert result["in_reply_to"] == "<budget-1@example.com>"
    conn = mailbox.imap()
    conn.select("Drafts", readonly=True)
    _, data = conn.uid("FETCH", str(result["id"]), "(FLAGS BODY.PEEK[])")
    conn.logout()
    flags, raw = data[0][0], data[0][1]
    assert b"\\Draft" in flags
    from email import message_from_bytes, policy

    msg = message_from_bytes(raw, policy=policy.default)
    assert msg["To"] == "Ana Lima <ana@example.com>"
    assert msg["In-Reply-To"] == "<budget-1@example.com>"
    assert text_of(msg) == "Merci Ana,\nà jeudi.\n"


def test_send_delivers_exactly_the_message(mailbox: Mailbox, smtp: SMTPServer) -> None:
    svc = service(mailbox, smtp)
    body = "Hi Bob,\n\nFriday at noon works — see you at the café.\n\nAlice"
    result = call(
        svc,
        "send_email",
        to="Bob <bob@example.com>",
        cc="carol@example.com",
        bcc="dave@example.com",
        subject="Lunch on Friday",
        body=body,
    )
    assert result["sent"] is True
    assert result["to"] == ["bob@example.com"] and result["bcc"] == ["dave@example.com"]
    [got] = smtp.received
    assert smtp.logins == [mailbox.user]
    assert got.mail_from == "alice@example.org"
    assert sorted(got.rcpt_tos) == ["bob@example.com", "carol@example.com", "dave@example.com"]
    msg = got.message
    assert msg["From"] == "Alice Martin <alice@example.org>"
    assert msg["To"] == "Bob <bob@example.com>"
    assert msg["Cc"] == "carol@example.com"
    assert msg["Bcc"] is None
    assert msg["Subject"] == "Lunch on Friday"
    assert msg["Message-ID"] == result["message_id"]
    assert text_of(msg) == body + "\n"  # exactly the body (a final newline ends the text)


def test_send_keeps_a_copy_when_asked(mailbox: Mailbox, smtp: SMTPServer) -> None:
    svc = service(mailbox, smtp, account={"sent_folder": "Sent"})
    result = call(svc, "send_email", to="bob@example.com", subject="Copy kept", body="Hello.")
    assert result["copy_saved_in"] == "Sent"
    assert [r.message["Subject"] for r in smtp.received] == ["Copy kept"]
    conn = mailbox.imap()
    conn.select("Sent", readonly=True)
    _, data = conn.search(None, "SUBJECT", '"Copy kept"')
    conn.logout()
    assert data[0].split()


def test_wrong_password_server_down_and_bad_address_are_clear(mailbox: Mailbox) -> None:
    wrong = service(mailbox, password="not-the-password")
    with pytest.raises(ToolError) as exc:
        call(wrong, "list_emails")
    assert "refused the user name or password" in str(exc.value)
    assert "not-the-password" not in str(exc.value)
    down = service(mailbox, account={"imap_port": free_port()})
    with pytest.raises(ToolError, match=r"Cannot reach the IMAP server 127\.0\.0\.1:"):
        call(down, "list_emails")
    with pytest.raises(ToolError, match="'bob' in to is not an email address"):
        call(service(mailbox), "send_email", to="bob", subject="x", body="y")


def test_tls_with_the_servers_own_ca(mailbox: Mailbox) -> None:
    ca = str(mailbox.server.certs.ca)
    over_tls = service(
        mailbox,
        account={"imap_port": mailbox.server.ssl_port, "imap_security": "ssl", "ca_file": ca},
    )
    assert call(over_tls, "list_emails", count=1)["messages"]
    untrusted = service(
        mailbox, account={"imap_port": mailbox.server.ssl_port, "imap_security": "ssl"}
    )
    with pytest.raises(ToolError, match="certificate this computer does not trust"):
        call(untrusted, "list_emails")
    starttls = service(mailbox, account={"imap_security": "starttls", "ca_file": ca})
    assert call(starttls, "list_emails", count=1)["messages"]


def test_smtp_starttls_with_the_servers_own_ca(mailbox: Mailbox) -> None:
    certs = mailbox.server.certs
    users = {mailbox.user: mailbox.password}
    with smtp_server(users, certs=certs, require_starttls=True) as smtp:
        svc = service(
            mailbox, smtp, account={"smtp_security": "starttls", "ca_file": str(certs.ca)}
        )
        call(svc, "send_email", to="bob@example.com", subject="Over TLS", body="Encrypted.")
        assert [r.message["Subject"] for r in smtp.received] == ["Over TLS"]


def test_plain_connections_only_to_this_computer() -> None:
    with pytest.raises(ValueError, match="imap_security none sends the password unencrypted"):
        MailAccount(
            name="x",
            address="a@example.org",
            username="a",
            imap_host="imap.example.org",
            imap_security="none",
            smtp_host="smtp.example.org",
        )
