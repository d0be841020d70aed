"""One mail account over IMAP (read, search, draft, move, flag) and SMTP (send), with timeouts."""

from __future__ import annotations

import base64
import contextlib
import imaplib
import re
import smtplib
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from email import policy
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from typing import Any

from botpsy_desktop.adapters.email.mime import ParsedMessage, header, parse
from botpsy_desktop.core.accounts import MailAccount
from botpsy_desktop.core.errors import BotpsyError, ToolError

PasswordProvider = Callable[[], str]
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
SUMMARY_HEADERS = "FROM TO CC SUBJECT DATE MESSAGE-ID"


# --- mailbox names (RFC 3501 modified UTF-7) -----------------------------------------------


def encode_mailbox(name: str) -> str:
    out: list[str] = []
    pending: list[str] = []

    def flush() -> None:
        if pending:
            raw = "".join(pending).encode("utf-16-be")
            out.append(
                "&" + base64.b64encode(raw).decode("ascii").rstrip("=").replace("/", ",") + "-"
            )
            pending.clear()

    for ch in name:
        if 0x20 <= ord(ch) <= 0x7E:
            flush()
            out.append("&-" if ch == "&" else ch)
        else:
            pending.append(ch)
    flush()
    return "".join(out)


def decode_mailbox(name: str) -> str:
    def one(m: re.Match[str]) -> str:
        chunk = m.group(1)
        if not chunk:
            return "&"
        padded = chunk.replace(",", "/") + "=" * (-len(chunk) % 4)
        try:
            return base64.b64decode(padded).decode("utf-16-be")
        except (ValueError, UnicodeDecodeError):
            return m.group(0)

    return re.sub(r"&([A-Za-z0-9+,]*)-", one, name)


def quote(text: str) -> str:
    """An IMAP quoted string (ASCII only)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _unquote(token: str) -> str:
    if len(token) >= 2 and token[0] == token[-1] == '"':
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Folder:
    name: str
    flags: frozenset[str]

    @property
    def selectable(self) -> bool:
        return "\\noselect" not in self.flags and "\\nonexistent" not in self.flags


@dataclass(frozen=True)
class Summary:
    """One message in a list: who, what, when, how big, read or not."""

    uid: int
    sender: str
    to: str
    subject: str
    date: str
    size: int
    seen: bool
    flagged: bool


@dataclass(frozen=True)
class Fetched:
    uid: int
    size: int
    seen: bool
    message: ParsedMessage
    truncated: bool


@dataclass(frozen=True)
class Search:
    sender: str = ""
    subject: str = ""
    text: str = ""
    since: date | None = None
    unread: bool = False


class MailClient:
    """The IMAP and SMTP sides of one account. Each operation connects, works and logs out.

    ``password()`` is asked at the moment of connecting (the keyring), so a missing password is a
    clear error when a tool runs. Errors come back as ToolError sentences; the password never
    appears in one.
    """

    def __init__(
        self,
        account: MailAccount,
        password: PasswordProvider,
        *,
        timeout_s: float = 20.0,
        max_message_bytes: int = 10_000_000,
    ) -> None:
        self.account = account
        self._password = password
        self.timeout_s = timeout_s
        self.max_message_bytes = max_message_bytes

    @property
    def name(self) -> str:
        return self.account.name

    # --- connecting ---------------------------------------------------------------------------

    def _tls(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        if self.account.ca_file:
            try:
                context.load_verify_locations(self.account.ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise ToolError(
                    f"Cannot load the certificate file {self.account.ca_file} of account "
                    f"'{self.name}': {exc}.",
                    "Fix the account's ca_file or remove it.",
                ) from None
        return context

    @contextmanager
    def imap(self) -> Iterator[imaplib.IMAP4]:
        """A logged-in IMAP connection, logged out afterwards."""
        a = self.account
        where = f"the IMAP server {a.imap_host}:{a.imap_port_or_default} of account '{a.name}'"
        password = self._password()
        conn: imaplib.IMAP4 | None = None
        try:
            with self._errors(where, "imap"):
                if a.imap_security == "ssl":
                    conn = imaplib.IMAP4_SSL(
                        a.imap_host,
                        a.imap_port_or_default,
                        ssl_context=self._tls(),
                        timeout=self.timeout_s,
                    )
                else:
                    conn = imaplib.IMAP4(
                        a.imap_host, a.imap_port_or_default, timeout=self.timeout_s
                    )
                    if a.imap_security == "starttls":
                        conn.starttls(ssl_context=self._tls())
                try:
                    conn.login(a.username, password)
                except imaplib.IMAP4.error as exc:
                    raise ToolError(
                        f"{where[0].upper()}{where[1:]} refused the user name or password "
                        f"({_server_text(exc)}).",
                        f"Check them with `botpsy account test {a.name}`; Gmail, iCloud and "
                        "Fastmail need an app password.",
                    ) from None
                yield conn
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):  # the connection may already be gone
                    conn.logout()

    @contextmanager
    def _errors(self, where: str, side: str) -> Iterator[None]:
        cap = where[0].upper() + where[1:]
        try:
            yield
        except BotpsyError:
            raise
        except ssl.SSLCertVerificationError as exc:
            raise ToolError(
                f"{cap} has a certificate this computer does not trust ({exc.verify_message}).",
                "If the server uses its own certificate, set the account's ca_file to it.",
            ) from None
        except TimeoutError:
            raise ToolError(
                f"{cap} did not answer within {self.timeout_s:g} s.",
                "Check the network, or try again later.",
            ) from None
        except ssl.SSLError as exc:
            raise ToolError(
                f"The secure connection to {where} failed ({exc.reason or exc}).",
                f"Check the account's {side}_security (ssl or starttls) and port.",
            ) from None
        except (imaplib.IMAP4.abort, smtplib.SMTPServerDisconnected) as exc:
            if "timed out" in str(exc):  # smtplib reports a read timeout as a disconnect
                raise ToolError(
                    f"{cap} did not answer within {self.timeout_s:g} s.",
                    "Check the network, or try again later.",
                ) from None
            raise ToolError(
                f"{cap} closed the connection ({_server_text(exc)}).",
                "Try again; if it keeps happening, check the account's security and port.",
            ) from None
        except imaplib.IMAP4.error as exc:
            raise ToolError(
                f"{cap} answered with an error: {_server_text(exc)}.", "Check the request."
            ) from None
        except smtplib.SMTPException as exc:
            raise ToolError(f"{cap} answered with an error: {_server_text(exc)}.") from None
        except OSError as exc:
            raise ToolError(
                f"Cannot reach {where}: {exc.strerror or exc}.",
                "Check the network, the host and port, and that the server is running.",
            ) from None

    # --- folders --------------------------------------------------------------------------

    def folders(self, conn: imaplib.IMAP4) -> list[Folder]:
        typ, data = conn.list()
        _ok(typ, data, "LIST")
        found: list[Folder] = []
        for item in data:
            if item is None:
                continue
            if isinstance(item, tuple):
                head, literal = (
                    item[0].decode("utf-8", "replace"),
                    item[1].decode("utf-8", "replace"),
                )
                m = re.match(r"\((?P<flags>[^)]*)\)\s+(?P<delim>\"(?:[^\"\\]|\\.)*\"|NIL)", head)
                name = literal
            else:
                line = item.decode("utf-8", "replace")
                m = re.match(
                    r"\((?P<flags>[^)]*)\)\s+(?P<delim>\"(?:[^\"\\]|\\.)*\"|NIL)\s+(?P<name>.+)$",
                    line,
                )
                name = _unquote(m.group("name").strip()) if m else ""
            if not m or not name:
                continue
            flags = frozenset(f.lower() for f in m.group("flags").split())
            found.append(Folder(decode_mailbox(name), flags))
        return found

    def find_folder(self, conn: imaplib.IMAP4, name: str) -> str:
        """The server's name for a folder the user named (any case; INBOX as INBOX)."""
        wanted = name.strip().strip("/")
        if wanted.casefold() == "inbox":
            return "INBOX"
        folders = [f for f in self.folders(conn) if f.selectable]
        for f in folders:
            if f.name == wanted:
                return f.name
        same = [f for f in folders if f.name.casefold() == wanted.casefold()]
        if len(same) == 1:
            return same[0].name
        special = {
            "drafts": "\\drafts",
            "sent": "\\sent",
            "trash": "\\trash",
            "junk": "\\junk",
            "spam": "\\junk",
            "archive": "\\archive",
        }.get(wanted.casefold())
        if special:
            by_use = [f for f in folders if special in f.flags]
            if by_use:
                return by_use[0].name
        names = ", ".join(sorted(f.name for f in folders))
        raise ToolError(
            f"Account '{self.name}' has no folder {name!r} (folders: {names}).",
            "Use one of those names.",
        )

    def special_folder(self, conn: imaplib.IMAP4, use: str, configured: str | None) -> str:
        if configured:
            return self.find_folder(conn, configured)
        for f in self.folders(conn):
            if use in f.flags and f.selectable:
                return f.name
        return self.find_folder(conn, use.strip("\\"))

    def select(self, conn: imaplib.IMAP4, folder: str, *, readonly: bool) -> str:
        name = self.find_folder(conn, folder)
        typ, data = conn.select(quote(encode_mailbox(name)), readonly=readonly)
        _ok(typ, data, f"SELECT {name}")
        return name

    # --- reading ----------------------------------------------------------------------------

    def uids(self, conn: imaplib.IMAP4, criteria: Search | None) -> list[int]:
        args: list[str] = []
        literal: bytes | None = None
        if criteria is not None:
            if criteria.unread:
                args.append("UNSEEN")
            if criteria.since is not None:
                d = criteria.since
                args += ["SINCE", f"{d.day:02d}-{_MONTHS[d.month - 1]}-{d.year}"]
            for key, value in (("FROM", criteria.sender), ("SUBJECT", criteria.subject)):
                if value and value.isascii():
                    args += [key, quote(value)]
            if criteria.text:
                if criteria.text.isascii():
                    args += ["TEXT", quote(criteria.text)]
                else:
                    literal = criteria.text.encode("utf-8")
        if literal is not None:
            conn.literal = literal  # type: ignore[assignment]  # imaplib sends it last
            typ, data = conn.uid("SEARCH", "CHARSET", "UTF-8", *(args or ["ALL"]), "TEXT")
        else:
            typ, data = conn.uid("SEARCH", *(args or ["ALL"]))
        _ok(typ, data, "SEARCH")
        found = [int(x) for chunk in data if chunk for x in chunk.split()]
        return sorted(found)

    def summaries(self, conn: imaplib.IMAP4, uids: list[int]) -> list[Summary]:
        if not uids:
            return []
        typ, data = conn.uid(
            "FETCH",
            ",".join(str(u) for u in uids),
            f"(UID FLAGS RFC822.SIZE BODY.PEEK[HEADER.FIELDS ({SUMMARY_HEADERS})])",
        )
        _ok(typ, data, "FETCH")
        out: list[Summary] = []
        parser = BytesHeaderParser(policy=policy.default)
        for meta, literals in _fetch_groups(data):
            uid = _int(r"UID (\d+)", meta)
            if uid is None:
                continue
            flags = _flags(meta)
            msg = parser.parsebytes(literals[0] if literals else b"")
            out.append(
                Summary(
                    uid=uid,
                    sender=header(msg, "From"),
                    to=header(msg, "To"),
                    subject=header(msg, "Subject"),
                    date=header(msg, "Date"),
                    size=_int(r"RFC822\.SIZE (\d+)", meta) or 0,
                    seen="\\seen" in flags,
                    flagged="\\flagged" in flags,
                )
            )
        out.sort(key=lambda s: s.uid, reverse=True)
        return out

    def fetch(self, conn: imaplib.IMAP4, uid: int) -> Fetched:
        typ, data = conn.uid("FETCH", str(uid), "(UID FLAGS RFC822.SIZE)")
        _ok(typ, data, "FETCH")
        groups = [g for g in _fetch_groups(data) if _int(r"UID (\d+)", g[0]) == uid]
        if not groups:
            raise ToolError(
                f"There is no message {uid} in this folder.", "List the messages again."
            )
        meta = groups[0][0]
        size = _int(r"RFC822\.SIZE (\d+)", meta) or 0
        truncated = size > self.max_message_bytes
        part = f"BODY.PEEK[]<0.{self.max_message_bytes}>" if truncated else "BODY.PEEK[]"
        typ, data = conn.uid("FETCH", str(uid), f"(UID {part})")
        _ok(typ, data, "FETCH")
        raw = b"".join(lit for meta2, lits in _fetch_groups(data) for lit in lits)
        return Fetched(uid, size, "\\seen" in _flags(meta), parse(raw), truncated)

    def header_of(self, conn: imaplib.IMAP4, uid: int, *names: str) -> dict[str, str]:
        typ, data = conn.uid(
            "FETCH", str(uid), f"(UID BODY.PEEK[HEADER.FIELDS ({' '.join(names).upper()})])"
        )
        _ok(typ, data, "FETCH")
        groups = [g for g in _fetch_groups(data) if _int(r"UID (\d+)", g[0]) == uid]
        if not groups:
            raise ToolError(
                f"There is no message {uid} in this folder.", "List the messages again."
            )
        msg = BytesHeaderParser(policy=policy.default).parsebytes(b"".join(groups[0][1]))
        return {n: header(msg, n) for n in names}

    # --- changing --------------------------------------------------------------------------------

    def append(
        self, conn: imaplib.IMAP4, folder: str, message: EmailMessage, flags: str
    ) -> int | None:
        raw = message.as_bytes()
        typ, data = conn.append(
            quote(encode_mailbox(folder)), flags, imaplib.Time2Internaldate(time.time()), raw
        )
        _ok(typ, data, f"APPEND {folder}")
        text = b" ".join(d for d in data if isinstance(d, bytes)).decode("ascii", "replace")
        m = re.search(r"APPENDUID \d+ (\d+)", text)
        return int(m.group(1)) if m else None

    def move(self, conn: imaplib.IMAP4, uid: int, target: str) -> bool:
        """Move a message; False when the server could only copy it and flag the original
        deleted (no MOVE, no UIDPLUS: expunging could remove other deleted messages too)."""
        box = quote(encode_mailbox(target))
        caps = self.capabilities(conn)
        if "MOVE" in caps:
            typ, data = conn.uid("MOVE", str(uid), box)
            _ok(typ, data, "MOVE")
            return True
        typ, data = conn.uid("COPY", str(uid), box)
        _ok(typ, data, "COPY")
        typ, data = conn.uid("STORE", str(uid), "+FLAGS.SILENT", "(\\Deleted)")
        _ok(typ, data, "STORE")
        if "UIDPLUS" in caps:
            typ, data = conn.uid("EXPUNGE", str(uid))
            _ok(typ, data, "EXPUNGE")
            return True
        return False

    @staticmethod
    def capabilities(conn: imaplib.IMAP4) -> set[str]:
        """What the server offers once logged in (servers announce more after login)."""
        typ, data = conn.capability()
        _ok(typ, data, "CAPABILITY")
        text = b" ".join(d for d in data if isinstance(d, bytes)).decode("ascii", "replace")
        return set(text.upper().split())

    def set_seen(self, conn: imaplib.IMAP4, uid: int, seen: bool) -> None:
        typ, data = conn.uid(
            "STORE", str(uid), "+FLAGS.SILENT" if seen else "-FLAGS.SILENT", "(\\Seen)"
        )
        _ok(typ, data, "STORE")

    def flags_of(self, conn: imaplib.IMAP4, uid: int) -> set[str] | None:
        """The message's flags (lowercase), or None if there is no such message."""
        typ, data = conn.uid("FETCH", str(uid), "(UID FLAGS)")
        _ok(typ, data, "FETCH")
        for meta, _ in _fetch_groups(data):
            if _int(r"UID (\d+)", meta) == uid:
                return _flags(meta)
        return None

    def exists(self, conn: imaplib.IMAP4, uid: int) -> bool:
        typ, data = conn.uid("SEARCH", "UID", str(uid))
        _ok(typ, data, "SEARCH")
        return any(str(uid).encode() in (d or b"").split() for d in data)

    # --- sending ---------------------------------------------------------------------------------

    def send(self, message: EmailMessage, recipients: list[str]) -> None:
        a = self.account
        where = f"the SMTP server {a.smtp_host}:{a.smtp_port_or_default} of account '{a.name}'"
        password = self._password()
        with self._errors(where, "smtp"):
            server: smtplib.SMTP
            if a.smtp_security == "ssl":
                server = smtplib.SMTP_SSL(
                    a.smtp_host, a.smtp_port_or_default, timeout=self.timeout_s, context=self._tls()
                )
            else:
                server = smtplib.SMTP(a.smtp_host, a.smtp_port_or_default, timeout=self.timeout_s)
            with server:
                server.ehlo()
                if a.smtp_security == "starttls":
                    server.starttls(context=self._tls())
                    server.ehlo()
                try:
                    server.login(a.username, password)
                except smtplib.SMTPNotSupportedError:
                    pass  # a server that takes mail without logging in (local relays)
                except smtplib.SMTPAuthenticationError as exc:
                    raise ToolError(
                        f"{where[0].upper()}{where[1:]} refused the user name or password "
                        f"({_server_text(exc)}).",
                        f"Check them with `botpsy account test {a.name}`; Gmail, iCloud and "
                        "Fastmail need an app password.",
                    ) from None
                try:
                    refused = server.send_message(message, from_addr=a.address, to_addrs=recipients)
                except smtplib.SMTPRecipientsRefused as exc:
                    raise ToolError(
                        "The SMTP server refused every recipient: "
                        + "; ".join(f"{r}: {_smtp_text(v)}" for r, v in exc.recipients.items())
                        + ". Nothing was sent.",
                        "Check the addresses.",
                    ) from None
                except smtplib.SMTPSenderRefused as exc:
                    raise ToolError(
                        f"The SMTP server refused the sender {a.address} "
                        f"({_smtp_text((exc.smtp_code, exc.smtp_error))}). Nothing was sent.",
                        "Check the account's address: it must be one the server lets you send as.",
                    ) from None
                if refused:
                    raise ToolError(
                        "Sent, but the SMTP server refused some recipients: "
                        + "; ".join(f"{r}: {_smtp_text(v)}" for r, v in refused.items())
                        + ".",
                        "Tell the user which recipients did not get it.",
                    )

    def check_imap(self) -> str:
        """Log in, count the folders and INBOX's messages: one line for `account test`."""
        with self.imap() as conn:
            folders = [f for f in self.folders(conn) if f.selectable]
            typ, data = conn.status("INBOX", "(MESSAGES UNSEEN)")
            _ok(typ, data, "STATUS INBOX")
            text = b" ".join(d for d in data if isinstance(d, bytes)).decode("ascii", "replace")
            total, unseen = _int(r"MESSAGES (\d+)", text), _int(r"UNSEEN (\d+)", text)
        return f"IMAP ok (INBOX: {total} messages, {unseen} unread; {len(folders)} folders)"

    def check_smtp(self) -> str:
        a = self.account
        where = f"the SMTP server {a.smtp_host}:{a.smtp_port_or_default} of account '{a.name}'"
        password = self._password()
        with self._errors(where, "smtp"):
            server: smtplib.SMTP
            if a.smtp_security == "ssl":
                server = smtplib.SMTP_SSL(
                    a.smtp_host, a.smtp_port_or_default, timeout=self.timeout_s, context=self._tls()
                )
            else:
                server = smtplib.SMTP(a.smtp_host, a.smtp_port_or_default, timeout=self.timeout_s)
            with server:
                server.ehlo()
                if a.smtp_security == "starttls":
                    server.starttls(context=self._tls())
                    server.ehlo()
                if not server.has_extn("auth"):
                    return "SMTP ok (no login needed)"
                try:
                    server.login(a.username, password)
                except smtplib.SMTPAuthenticationError as exc:
                    raise ToolError(
                        f"{where[0].upper()}{where[1:]} refused the user name or password "
                        f"({_server_text(exc)}).",
                        "Check them; Gmail, iCloud and Fastmail need an app password.",
                    ) from None
                return "SMTP ok (login accepted)"


# --- IMAP response parsing -------------------------------------------------------------------


def _fetch_groups(data: list[Any]) -> list[tuple[str, list[bytes]]]:
    """imaplib FETCH data as (the response text without literals, the literals) per message."""
    groups: list[tuple[list[str], list[bytes]]] = []
    for item in data:
        if isinstance(item, tuple):
            head = item[0].decode("utf-8", "replace")
            if re.match(r"\d+ \(", head) or not groups:
                groups.append(([head], [item[1]]))
            else:
                groups[-1][0].append(head)
                groups[-1][1].append(item[1])
        elif isinstance(item, bytes):
            text = item.decode("utf-8", "replace")
            if re.match(r"\d+ \(", text):
                groups.append(([text], []))
            elif groups:
                groups[-1][0].append(text)
    return [(" ".join(texts), literals) for texts, literals in groups]


def _int(pattern: str, text: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def _flags(meta: str) -> set[str]:
    m = re.search(r"FLAGS \(([^)]*)\)", meta)
    return {f.lower() for f in m.group(1).split()} if m else set()


def _ok(typ: str, data: list[Any], what: str) -> None:
    if typ != "OK":
        text = b" ".join(d for d in data if isinstance(d, bytes)).decode("utf-8", "replace")
        raise ToolError(f"The IMAP server refused {what}: {text[:200] or typ}.")


def _server_text(exc: BaseException) -> str:
    text = str(exc.args[0] if exc.args else exc)
    if text.startswith(("b'", 'b"')):
        text = text[2:-1]
    return " ".join(text.split())[:200] or type(exc).__name__


def _smtp_text(value: Any) -> str:
    if isinstance(value, tuple) and len(value) == 2:
        code, message = value
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        return f"{code} {' '.join(str(message).split())}"[:200]
    return str(value)[:200]
