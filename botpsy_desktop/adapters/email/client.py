"""One mail account over IMAP (read, search, draft, move, flag) and SMTP (send), with timeouts.

IMAP goes through IMAPClient: it builds and quotes the commands, sends 8-bit and odd search
values as literals, encodes and decodes folder names (modified UTF-7, RFC 3501) and parses the
LIST, FETCH, SEARCH and STATUS answers. smtplib sends. Written here on purpose, because
IMAPClient leaves them to the caller: the app's error sentences, and reading the UID of a saved
draft from the APPENDUID response code (RFC 4315), which IMAPClient returns as the server's text.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from botpsy_desktop.core.accounts import MailAccount
from botpsy_desktop.core.errors import BotpsyError, ToolError

if TYPE_CHECKING:
    # imapclient (~9 MiB), smtplib and ssl (~4 MiB with OpenSSL) are imported where a
    # connection is made, not when the app starts
    # the email package and mime.py (~2 MiB with html.parser) where mail is read or written
    import smtplib
    import ssl
    from email.message import EmailMessage

    from imapclient import IMAPClient

    from botpsy_desktop.adapters.email.mime import ParsedMessage

PasswordProvider = Callable[[], str]
SUMMARY_HEADERS = "FROM TO CC SUBJECT DATE MESSAGE-ID"
# IMAPClient sends a search value as a bare atom unless it has a space, quote or backslash, so
# "(urgent)" would reach the server as a parenthesised list; such values go as literals.
_NOT_ATOM = re.compile(r"[(){%*\]\x00-\x1f\x7f]")
_APPENDUID = re.compile(rb"\[APPENDUID \d+ (\d+)\]")


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
        import ssl

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
    def imap(self) -> Iterator[IMAPClient]:
        """A logged-in IMAP connection (UIDs throughout), logged out afterwards."""
        from imapclient import IMAPClient
        from imapclient.exceptions import CapabilityError, LoginError

        a = self.account
        where = f"the IMAP server {a.imap_host}:{a.imap_port_or_default} of account '{a.name}'"
        cap = where[0].upper() + where[1:]
        password = self._password()
        conn: IMAPClient | None = None
        try:
            with self._errors(where, "imap"):
                secure = a.imap_security == "ssl"
                conn = IMAPClient(
                    a.imap_host,
                    a.imap_port_or_default,
                    ssl=secure,
                    ssl_context=self._tls() if secure else None,
                    timeout=self.timeout_s,
                )
                if a.imap_security == "starttls":
                    try:
                        conn.starttls(self._tls())
                    except CapabilityError:
                        raise ToolError(
                            f"{cap} does not offer STARTTLS.",
                            "Check the account's imap_security (ssl or starttls) and port.",
                        ) from None
                try:
                    conn.login(a.username, password)
                except LoginError as exc:
                    raise ToolError(
                        f"{cap} refused the user name or password ({_server_text(exc)}).",
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
        import smtplib
        import ssl

        from imapclient.exceptions import IMAPClientAbortError, IMAPClientError

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
        except (IMAPClientAbortError, smtplib.SMTPServerDisconnected) as exc:
            if "timed out" in str(exc):  # smtplib reports a read timeout as a disconnect
                raise ToolError(
                    f"{cap} did not answer within {self.timeout_s:g} s.",
                    "Check the network, or try again later.",
                ) from None
            raise ToolError(
                f"{cap} closed the connection ({_server_text(exc)}).",
                "Try again; if it keeps happening, check the account's security and port.",
            ) from None
        except IMAPClientError as exc:
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

    def folders(self, conn: IMAPClient) -> list[Folder]:
        with _refused("LIST"):
            try:
                listed = conn.list_folders()
            except UnicodeError:  # a name that is not modified UTF-7: taken as the server sent it
                conn.folder_encode = False
                try:
                    listed = conn.list_folders()
                finally:
                    conn.folder_encode = True
        found: list[Folder] = []
        for flags, _delimiter, name in listed:
            if isinstance(name, bytes):
                name = _folder_name(name)
            if not name:
                continue
            found.append(Folder(str(name), frozenset(_text(f).lower() for f in flags)))
        return found

    def find_folder(self, conn: IMAPClient, name: str) -> str:
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

    def special_folder(self, conn: IMAPClient, use: str, configured: str | None) -> str:
        if configured:
            return self.find_folder(conn, configured)
        for f in self.folders(conn):
            if use in f.flags and f.selectable:
                return f.name
        return self.find_folder(conn, use.strip("\\"))

    def select(self, conn: IMAPClient, folder: str, *, readonly: bool) -> str:
        name = self.find_folder(conn, folder)
        with _refused(f"SELECT {name}"):
            conn.select_folder(name, readonly=readonly)
        return name

    # --- reading ----------------------------------------------------------------------------

    def uids(self, conn: IMAPClient, criteria: Search | None) -> list[int]:
        keys: list[Any] = []
        utf8 = False
        if criteria is not None:
            if criteria.unread:
                keys.append("UNSEEN")
            if criteria.since is not None:
                keys += ["SINCE", criteria.since]
            # a non-ASCII sender or subject is matched here afterwards (tools._local_match)
            for key, value in (("FROM", criteria.sender), ("SUBJECT", criteria.subject)):
                if value and value.isascii():
                    keys += [key, _search_value(value)]
            if criteria.text:
                keys += ["TEXT", _search_value(criteria.text)]
                utf8 = not criteria.text.isascii()
        with _refused("SEARCH"):
            found = conn.search(keys or ["ALL"], "UTF-8" if utf8 else None)
        return sorted(int(u) for u in found)

    def summaries(self, conn: IMAPClient, uids: list[int]) -> list[Summary]:
        if not uids:
            return []
        with _refused("FETCH"):
            data = conn.fetch(
                uids,
                ["UID", "FLAGS", "RFC822.SIZE", f"BODY.PEEK[HEADER.FIELDS ({SUMMARY_HEADERS})]"],
            )
        from email import policy
        from email.parser import BytesHeaderParser

        from botpsy_desktop.adapters.email.mime import header

        out: list[Summary] = []
        parser = BytesHeaderParser(policy=policy.default)
        for uid, item in data.items():
            flags = _flags(item)
            msg = parser.parsebytes(_section(item))
            out.append(
                Summary(
                    uid=int(uid),
                    sender=header(msg, "From"),
                    to=header(msg, "To"),
                    subject=header(msg, "Subject"),
                    date=header(msg, "Date"),
                    size=int(item.get(b"RFC822.SIZE") or 0),
                    seen="\\seen" in flags,
                    flagged="\\flagged" in flags,
                )
            )
        out.sort(key=lambda s: s.uid, reverse=True)
        return out

    def fetch(self, conn: IMAPClient, uid: int) -> Fetched:
        from botpsy_desktop.adapters.email.mime import parse

        with _refused("FETCH"):
            meta = conn.fetch([uid], ["UID", "FLAGS", "RFC822.SIZE"]).get(uid)
        if meta is None:
            raise ToolError(
                f"There is no message {uid} in this folder.", "List the messages again."
            )
        size = int(meta.get(b"RFC822.SIZE") or 0)
        truncated = size > self.max_message_bytes
        part = f"BODY.PEEK[]<0.{self.max_message_bytes}>" if truncated else "BODY.PEEK[]"
        with _refused("FETCH"):
            body = conn.fetch([uid], ["UID", part]).get(uid) or {}
        return Fetched(uid, size, "\\seen" in _flags(meta), parse(_section(body)), truncated)

    def header_of(self, conn: IMAPClient, uid: int, *names: str) -> dict[str, str]:
        fields = " ".join(names).upper()
        with _refused("FETCH"):
            item = conn.fetch([uid], ["UID", f"BODY.PEEK[HEADER.FIELDS ({fields})]"]).get(uid)
        if item is None:
            raise ToolError(
                f"There is no message {uid} in this folder.", "List the messages again."
            )
        from email import policy
        from email.parser import BytesHeaderParser

        from botpsy_desktop.adapters.email.mime import header

        msg = BytesHeaderParser(policy=policy.default).parsebytes(_section(item))
        return {n: header(msg, n) for n in names}

    # --- changing --------------------------------------------------------------------------------

    def append(
        self, conn: IMAPClient, folder: str, message: EmailMessage, flags: Sequence[str]
    ) -> int | None:
        """Save a message in a folder; its UID when the server says (UIDPLUS)."""
        with _refused(f"APPEND {folder}"):
            answer = conn.append(folder, message.as_bytes(), flags, datetime.now(UTC))
        m = _APPENDUID.search(answer if isinstance(answer, bytes) else str(answer).encode())
        return int(m.group(1)) if m else None

    def move(self, conn: IMAPClient, uid: int, target: str) -> bool:
        """Move a message; False when the server could only copy it and flag the original
        deleted (no MOVE, no UIDPLUS: expunging could remove other deleted messages too)."""
        from imapclient import DELETED

        caps = self.capabilities(conn)
        if "MOVE" in caps:
            with _refused("MOVE"):
                conn.move([uid], target)
            return True
        with _refused("COPY"):
            conn.copy([uid], target)
        with _refused("STORE"):
            conn.add_flags([uid], [DELETED], silent=True)
        if "UIDPLUS" in caps:
            with _refused("EXPUNGE"):
                conn.uid_expunge([uid])
            return True
        return False

    @staticmethod
    def capabilities(conn: IMAPClient) -> set[str]:
        """What the server offers once logged in (servers announce more after login)."""
        with _refused("CAPABILITY"):
            return {_text(c).upper() for c in conn.capabilities()}

    def set_seen(self, conn: IMAPClient, uid: int, seen: bool) -> None:
        from imapclient import SEEN

        with _refused("STORE"):
            if seen:
                conn.add_flags([uid], [SEEN], silent=True)
            else:
                conn.remove_flags([uid], [SEEN], silent=True)

    def flags_of(self, conn: IMAPClient, uid: int) -> set[str] | None:
        """The message's flags (lowercase), or None if there is no such message."""
        with _refused("FETCH"):
            got = conn.get_flags([uid])
        if uid not in got:
            return None
        return {_text(f).lower() for f in got[uid]}

    def exists(self, conn: IMAPClient, uid: int) -> bool:
        with _refused("SEARCH"):
            return uid in {int(u) for u in conn.search(["UID", uid])}

    # --- sending ---------------------------------------------------------------------------------

    def send(self, message: EmailMessage, recipients: list[str]) -> None:
        import smtplib

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
            with _refused("STATUS INBOX"):
                status = conn.folder_status("INBOX", ["MESSAGES", "UNSEEN"])
            total, unseen = status.get(b"MESSAGES"), status.get(b"UNSEEN")
        return f"IMAP ok (INBOX: {total} messages, {unseen} unread; {len(folders)} folders)"

    def check_smtp(self) -> str:
        import smtplib

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


# --- IMAPClient's answers -------------------------------------------------------------------


@contextmanager
def _refused(what: str) -> Iterator[None]:
    """A NO or BAD answer to one command as a ToolError; a lost connection passes on."""
    from imapclient.exceptions import IMAPClientAbortError, IMAPClientError

    try:
        yield
    except IMAPClientAbortError:
        raise
    except IMAPClientError as exc:
        text = re.sub(r"^[a-z ]+ failed: ", "", _server_text(exc), flags=re.IGNORECASE)
        raise ToolError(f"The IMAP server refused {what}: {text.rstrip('.')}.") from None


def _search_value(value: str) -> Any:
    from imapclient.imapclient import _literal

    return _literal(value.encode("utf-8")) if _NOT_ATOM.search(value) else value


def _section(item: dict[bytes, Any]) -> bytes:
    """The BODY[...] data of one FETCH answer (the server names the section as it likes)."""
    for key, value in item.items():
        if key.startswith(b"BODY[") and isinstance(value, bytes):
            return value
    return b""


def _flags(item: dict[bytes, Any]) -> set[str]:
    return {_text(f).lower() for f in item.get(b"FLAGS") or ()}


def _folder_name(raw: bytes) -> str:
    from imapclient import imap_utf7

    try:
        return str(imap_utf7.decode(raw))
    except (UnicodeError, ValueError):
        return raw.decode("utf-8", "replace")


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


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
