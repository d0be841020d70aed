"""A small read-write IMAP4rev1 stand-in on 127.0.0.1 serving a case's mailbox from memory.

Why a server of our own: `botpsy eval` runs where users and CI run it, Linux, Windows and macOS,
from a pip install. Dovecot (what the mail tests use) has no Windows build, is a system package
on Linux, and changed its configuration language incompatibly in 2.4, so it could only ever be a
second back end beside this one. The maintained pure-Python choices do not fit: pymap has had no
commit since April 2024 (tested on Python 3.11 and 3.12 only); Twisted's IMAP4Server offers no MOVE,
UIDPLUS or SPECIAL-USE, so moves would end as copies and the move cases could not be scored on
the state a real server reaches. This one answers only what the app's mail client sends and
says BAD, with the list of what it supports, to anything else; tests/eval/test_eval_imap.py runs
the app's mail tools on it and on a real Dovecot and requires the same answers.
"""

from __future__ import annotations

import contextlib
import re
import socketserver
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from email import policy
from email.parser import BytesParser
from typing import Any

from imapclient import imap_utf7

CAPABILITIES = "IMAP4rev1 MOVE UIDPLUS SPECIAL-USE"
UIDVALIDITY = 1
STANDARD_FOLDERS: tuple[tuple[str, str | None], ...] = (
    ("INBOX", None),
    ("Sent", "\\Sent"),
    ("Drafts", "\\Drafts"),
    ("Archive", "\\Archive"),
    ("Trash", "\\Trash"),
)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MAX_LINE = 64 * 1024
_MAX_LITERAL = 50_000_000
_ANSWERED = (
    "CAPABILITY, NOOP, LOGOUT, LOGIN, LIST, STATUS, SELECT, EXAMINE, APPEND, EXPUNGE, CLOSE, "
    "UID SEARCH/FETCH/STORE/COPY/MOVE/EXPUNGE, SEARCH, FETCH, STORE"
)


class Bad(Exception):
    """A command this server does not understand: answered BAD with the text."""


class No(Exception):
    """A command understood but refused: answered NO with the text."""


@dataclass
class Message:
    """One stored message: its UID, raw RFC 5322 bytes (CRLF), flags and internal date."""

    uid: int
    raw: bytes
    flags: set[str]
    internal: datetime
    _index: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def has(self, flag: str) -> bool:
        return flag.casefold() in {f.casefold() for f in self.flags}

    def searchable(self) -> dict[str, str]:
        """Its decoded header fields and text, case-folded, for SEARCH (worked out once)."""
        if self._index is None:
            self._index = _searchable(self.raw)
        return self._index


@dataclass
class Folder:
    name: str
    use: str | None = None
    messages: list[Message] = field(default_factory=list)
    next_uid: int = 1


class Mailbox:
    """The folders and messages the server holds; every access takes the lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.folders: dict[str, Folder] = {n: Folder(n, use) for n, use in STANDARD_FOLDERS}

    def folder(self, name: str) -> Folder | None:
        """A folder by name (INBOX in any case, the others exactly, then in any case)."""
        if name.casefold() == "inbox":
            return self.folders["INBOX"]
        if name in self.folders:
            return self.folders[name]
        same = [f for n, f in self.folders.items() if n.casefold() == name.casefold()]
        return same[0] if len(same) == 1 else None

    def add(
        self,
        folder: str,
        raw: bytes,
        flags: Iterable[str] = (),
        internal: datetime | None = None,
    ) -> int:
        """Store a message (the folder is created if it is new); its UID."""
        with self.lock:
            box = self.folder(folder)
            if box is None:
                box = self.folders[folder] = Folder(folder)
            uid = box.next_uid
            box.next_uid += 1
            raw = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
            box.messages.append(Message(uid, raw, set(flags), internal or datetime.now(UTC)))
            return uid

    def messages(self, folder: str) -> list[Message]:
        """A copy of a folder's messages (empty for a folder that does not exist)."""
        with self.lock:
            box = self.folder(folder)
            return list(box.messages) if box else []


# --- parsing commands ------------------------------------------------------------------------


class Quoted(str):
    """A quoted string token (an atom is a plain str)."""


def tokenize(text: str, literals: Sequence[bytes]) -> list[Any]:
    """Tokens of one command: atoms (str), quoted strings, literals (bytes), lists."""
    stack: list[list[Any]] = [[]]
    pos = 0
    while pos < len(text):
        c = text[pos]
        if c == " ":
            pos += 1
        elif c == "(":
            stack.append([])
            pos += 1
        elif c == ")":
            if len(stack) == 1:
                raise Bad("Unbalanced ')' in the command.")
            done = stack.pop()
            stack[-1].append(done)
            pos += 1
        elif c == '"':
            out: list[str] = []
            pos += 1
            while True:
                if pos >= len(text):
                    raise Bad("A quoted string is not closed.")
                ch = text[pos]
                if ch == "\\" and pos + 1 < len(text):
                    out.append(text[pos + 1])
                    pos += 2
                elif ch == '"':
                    pos += 1
                    break
                else:
                    out.append(ch)
                    pos += 1
            stack[-1].append(Quoted("".join(out)))
        elif c == "\x00":
            m = re.match(r"\x00(\d+)\x00", text[pos:])
            if not m:
                raise Bad("A literal marker is malformed.")
            stack[-1].append(literals[int(m.group(1))])
            pos += m.end()
        else:
            start, depth = pos, 0
            while pos < len(text):
                ch = text[pos]
                if ch == "[":
                    depth += 1
                elif ch == "]":
                    depth = max(0, depth - 1)
                elif depth == 0 and ch in " ()":
                    break
                pos += 1
            stack[-1].append(text[start:pos])
    if len(stack) != 1:
        raise Bad("Unbalanced '(' in the command.")
    return stack[0]


def _string(token: Any, what: str) -> str:
    if isinstance(token, bytes):
        return token.decode("utf-8", "replace")
    if isinstance(token, str):
        return str(token)
    raise Bad(f"{what} must be a string, not a list.")


def _wire_name(name: str) -> str:
    """A folder name as IMAP sends it (modified UTF-7, RFC 3501 5.1.3)."""
    return str(imap_utf7.encode(name).decode("ascii"))


def _folder_name(wire: str) -> str:
    """A folder name a client sent; one that is not valid modified UTF-7 is taken as it is."""
    if not wire.isascii():
        return wire
    try:
        return str(imap_utf7.decode(wire.encode("ascii")))
    except (UnicodeError, ValueError):
        return wire


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_set(text: str, largest: int) -> set[int]:
    """A sequence or UID set ("1,3:5,7:*") as numbers; ``*`` is ``largest``."""
    out: set[int] = set()
    try:
        for part in text.split(","):
            if ":" in part:
                a, b = (largest if x == "*" else int(x) for x in part.split(":", 1))
                out.update(range(min(a, b), max(a, b) + 1))
            else:
                out.add(largest if part == "*" else int(part))
    except ValueError:
        raise Bad(f"{text!r} is not a message set (like 1,3:5,7:*).") from None
    return out


def _imap_date(text: str) -> date:
    m = re.fullmatch(r"(\d{1,2})-([A-Za-z]{3})-(\d{4})", text)
    months = [x.casefold() for x in _MONTHS]
    if not m or m.group(2).casefold() not in months:
        raise Bad(f"{text!r} is not an IMAP date (like 09-Mar-2026).")
    return date(int(m.group(3)), months.index(m.group(2).casefold()) + 1, int(m.group(1)))


def _internal_date(at: datetime) -> str:
    offset = at.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "+" if minutes >= 0 else "-"
    hh, mm = divmod(abs(minutes), 60)
    return (
        f"{at.day:02d}-{_MONTHS[at.month - 1]}-{at.year} "
        f"{at.hour:02d}:{at.minute:02d}:{at.second:02d} {sign}{hh:02d}{mm:02d}"
    )


def _parse_internal_date(text: str) -> datetime:
    try:
        return datetime.strptime(text.strip(), "%d-%b-%Y %H:%M:%S %z")
    except ValueError:
        raise Bad(f"{text!r} is not an IMAP date-time.") from None


def _split(raw: bytes) -> tuple[bytes, bytes]:
    """Header (with its blank line) and body of a raw message."""
    at = raw.find(b"\r\n\r\n")
    if at < 0:
        return raw, b""
    return raw[: at + 4], raw[at + 4 :]


def _header_fields(raw: bytes, names: Sequence[str], *, exclude: bool = False) -> bytes:
    header, _ = _split(raw)
    wanted = {n.casefold() for n in names}
    out: list[bytes] = []
    keep = False
    for line in header.split(b"\r\n"):
        if not line:
            continue
        if line[:1] in (b" ", b"\t"):
            if keep:
                out.append(line)
            continue
        name = line.split(b":", 1)[0].decode("ascii", "replace").strip().casefold()
        keep = (name in wanted) != exclude
        if keep:
            out.append(line)
    return b"".join(x + b"\r\n" for x in out) + b"\r\n"


def _searchable(raw: bytes) -> dict[str, str]:
    """The decoded header fields and text of a message, case-folded, for SEARCH."""
    msg = BytesParser(policy=policy.default).parsebytes(raw)
    out = {k: str(msg.get(k, "")).casefold() for k in ("from", "to", "cc", "subject")}
    parts: list[str] = [str(v) for v in msg.values()]
    for part in msg.walk():
        if part.get_content_maintype() == "text" and not part.is_multipart():
            try:
                parts.append(str(part.get_content()))
            except (LookupError, ValueError):
                parts.append(str(part.get_payload(decode=False) or ""))
    out["text"] = "\n".join(parts).casefold()
    out["body"] = "\n".join(parts[len(msg.values()) :]).casefold()
    return out


# --- the server ------------------------------------------------------------------------------


class _Handler(socketserver.StreamRequestHandler):
    server: ImapServer
    timeout = 30
    wbufsize = 1 << 16  # one write per response: small writes would wait on delayed ACKs
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.user: str | None = None
        self.selected: str | None = None
        self.readonly = False

    # -- wire --
    def send(self, line: str | bytes) -> None:
        data = line.encode("utf-8") if isinstance(line, str) else line
        self.wfile.write(data + b"\r\n")

    def read_command(self) -> tuple[str, list[bytes]] | None:
        text = b""
        literals: list[bytes] = []
        while True:
            line = self.rfile.readline(_MAX_LINE)
            if not line:
                return None
            if not line.endswith(b"\n"):
                raise Bad(f"A command line is longer than {_MAX_LINE} bytes.")
            line = line.rstrip(b"\r\n")
            m = re.search(rb"\{(\d+)(\+?)\}$", line)
            if not m:
                return (text + line).decode("utf-8", "surrogateescape"), literals
            size = int(m.group(1))
            if size > _MAX_LITERAL:
                raise Bad(f"A literal of {size} bytes is more than this server takes.")
            if not m.group(2):
                self.send("+ Ready for the literal")
                self.wfile.flush()
            literals.append(self.rfile.read(size))
            text += line[: m.start()] + b"\x00%d\x00" % (len(literals) - 1)

    def handle(self) -> None:
        try:
            self.serve()
        except OSError:
            return  # the client went away (or timed out) mid-command

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # flushing to a client that went away
            super().finish()

    def serve(self) -> None:
        self.send("* OK [CAPABILITY " + CAPABILITIES + "] botpsy sandbox IMAP ready")
        self.wfile.flush()
        while True:
            try:
                got = self.read_command()
            except Bad as exc:
                self.send(f"* BAD {exc}")
                self.wfile.flush()
                return
            if got is None:
                return
            text, literals = got
            tag = text.split(" ", 1)[0] if text.strip() else "*"
            try:
                tokens = tokenize(text, literals)
                if len(tokens) < 2 or not isinstance(tokens[1], str):
                    raise Bad("A command is a tag, then a command name.")
                name = tokens[1].upper()
                if name == "LOGOUT":
                    self.send("* BYE botpsy sandbox IMAP logging out")
                    self.send(f"{tag} OK LOGOUT completed")
                    self.wfile.flush()
                    return
                done = self.dispatch(name, tokens[2:])
                self.send(f"{tag} OK {done}")
            except Bad as exc:
                self.send(f"{tag} BAD {exc}")
            except No as exc:
                self.send(f"{tag} NO {exc}")
            self.wfile.flush()

    # -- commands --
    def dispatch(self, name: str, args: list[Any]) -> str:
        if name == "CAPABILITY":
            self.send("* CAPABILITY " + CAPABILITIES)
            return "CAPABILITY completed"
        if name == "NOOP":
            return "NOOP completed"
        if name == "LOGIN":
            return self.login(args)
        if name in ("AUTHENTICATE", "STARTTLS"):
            raise Bad(f"{name} is not offered here; use LOGIN (plain TCP on 127.0.0.1).")
        if self.user is None and name in _AUTHENTICATED | _SELECTED:
            raise Bad(f"Log in (LOGIN) before {name}.")
        if name == "LIST":
            return self.list_folders(args)
        if name == "STATUS":
            return self.status(args)
        if name in ("SELECT", "EXAMINE"):
            return self.select(args, readonly=name == "EXAMINE")
        if name == "APPEND":
            return self.append(args)
        if name in _SELECTED and self.selected is None:
            raise Bad(f"Select a folder (SELECT or EXAMINE) before {name}.")
        if name == "UID":
            if not args or not isinstance(args[0], str):
                raise Bad("UID needs a command: SEARCH, FETCH, STORE, COPY, MOVE or EXPUNGE.")
            sub = args[0].upper()
            if sub not in ("SEARCH", "FETCH", "STORE", "COPY", "MOVE", "EXPUNGE"):
                raise Bad(
                    f"UID {sub} is not supported; UID SEARCH/FETCH/STORE/COPY/MOVE/EXPUNGE are."
                )
            return self.selected_command(sub, args[1:], by_uid=True)
        if name in ("SEARCH", "FETCH", "STORE", "COPY", "MOVE", "EXPUNGE", "CLOSE"):
            return self.selected_command(name, args, by_uid=False)
        raise Bad(f"Unknown or unsupported command {name}; this server answers {_ANSWERED}.")

    def login(self, args: list[Any]) -> str:
        if len(args) != 2:
            raise Bad("LOGIN takes a user name and a password.")
        user, password = _string(args[0], "The user name"), _string(args[1], "The password")
        if (user, password) != (self.server.username, self.server.password):
            raise No("[AUTHENTICATIONFAILED] Wrong user name or password.")
        self.user = user
        self.send("* CAPABILITY " + CAPABILITIES)
        return "LOGIN completed"

    def list_folders(self, args: list[Any]) -> str:
        if len(args) != 2:
            raise Bad('LIST takes a reference and a pattern (LIST "" *).')
        pattern = _string(args[1], "The pattern")
        rx = re.compile(
            "^" + re.escape(pattern).replace(r"\*", ".*").replace("%", "[^/]*") + "$",
            re.IGNORECASE,
        )
        with self.server.mailbox.lock:
            folders = list(self.server.mailbox.folders.values())
        for f in folders:
            if pattern and not rx.match(f.name):
                continue
            flags = "\\HasNoChildren" + (f" {f.use}" if f.use else "")
            self.send(f'* LIST ({flags}) "/" {_quote(_wire_name(f.name))}')
        return "LIST completed"

    def _folder(self, token: Any) -> Folder:
        name = _folder_name(_string(token, "The folder"))
        found = self.server.mailbox.folder(name)
        if found is None:
            raise No(f"[NONEXISTENT] There is no folder {name!r}.")
        return found

    def status(self, args: list[Any]) -> str:
        if len(args) != 2 or not isinstance(args[1], list):
            raise Bad("STATUS takes a folder and a list of items.")
        box = self._folder(args[0])
        with self.server.mailbox.lock:
            values = {
                "MESSAGES": len(box.messages),
                "UNSEEN": sum(not m.has("\\Seen") for m in box.messages),
                "RECENT": 0,
                "UIDNEXT": box.next_uid,
                "UIDVALIDITY": UIDVALIDITY,
            }
        items = []
        for item in args[1]:
            key = str(item).upper()
            if key not in values:
                raise Bad(f"STATUS item {key} is not supported.")
            items.append(f"{key} {values[key]}")
        self.send(f"* STATUS {_quote(_wire_name(box.name))} ({' '.join(items)})")
        return "STATUS completed"

    def select(self, args: list[Any], *, readonly: bool) -> str:
        if len(args) != 1:
            raise Bad("SELECT and EXAMINE take one folder.")
        box = self._folder(args[0])
        with self.server.mailbox.lock:
            count = len(box.messages)
            unseen = [i + 1 for i, m in enumerate(box.messages) if not m.has("\\Seen")]
            next_uid = box.next_uid
        self.selected, self.readonly = box.name, readonly
        self.send("* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)")
        self.send(f"* {count} EXISTS")
        self.send("* 0 RECENT")
        if unseen:
            self.send(f"* OK [UNSEEN {unseen[0]}] First unseen")
        self.send(f"* OK [UIDVALIDITY {UIDVALIDITY}] UIDs valid")
        self.send(f"* OK [UIDNEXT {next_uid}] Predicted next UID")
        mode = "READ-ONLY" if readonly else "READ-WRITE"
        return f"[{mode}] {'EXAMINE' if readonly else 'SELECT'} completed"

    def append(self, args: list[Any]) -> str:
        if len(args) < 2 or not isinstance(args[-1], bytes):
            raise Bad("APPEND takes a folder, optional flags and date, and the message literal.")
        box = self._folder(args[0])
        flags: list[str] = []
        internal: datetime | None = None
        for extra in args[1:-1]:
            if isinstance(extra, list):
                flags = [str(f) for f in extra]
            else:
                internal = _parse_internal_date(_string(extra, "The date"))
        uid = self.server.mailbox.add(box.name, args[-1], flags, internal)
        return f"[APPENDUID {UIDVALIDITY} {uid}] APPEND completed"

    # -- the selected folder --
    def selected_command(self, name: str, args: list[Any], *, by_uid: bool) -> str:
        mailbox = self.server.mailbox
        with mailbox.lock:
            box = mailbox.folder(self.selected or "")
            if box is None:
                raise No("The selected folder no longer exists.")
            if name == "CLOSE":
                if not self.readonly:
                    self._expunge(box, None, report=False)
                self.selected = None
                return "CLOSE completed"
            if name == "SEARCH":
                found = self._search(box, args)
                numbers = (
                    [m.uid for m in found] if by_uid else [box.messages.index(m) + 1 for m in found]
                )
                self.send("* SEARCH" + "".join(f" {n}" for n in numbers))
                return f"{'UID ' if by_uid else ''}SEARCH completed"
            if name == "EXPUNGE":
                if self.readonly:
                    raise No("The folder is open read-only (EXAMINE); SELECT it to expunge.")
                only = None
                if by_uid:
                    if len(args) != 1:
                        raise Bad("UID EXPUNGE takes a UID set.")
                    only = self._targets(box, _string(args[0], "The set"), by_uid=True)
                self._expunge(box, only, report=True)
                return "EXPUNGE completed"
            if not args:
                raise Bad(f"{name} takes a message set first.")
            targets = self._targets(box, _string(args[0], "The message set"), by_uid=by_uid)
            rest = args[1:]
            if name == "FETCH":
                if len(rest) != 1:
                    raise Bad("FETCH takes a message set and the items (one item or a list).")
                items = rest[0] if isinstance(rest[0], list) else [rest[0]]
                for m in targets:
                    self._fetch(box, m, [str(i) for i in items], by_uid=by_uid)
                return "FETCH completed"
            if name == "STORE":
                return self._store(box, targets, rest, by_uid=by_uid)
            if len(rest) != 1:
                raise Bad(f"{name} takes a message set and a folder.")
            target = self._folder(rest[0])
            if name == "MOVE" and self.readonly:
                raise No("The folder is open read-only (EXAMINE); SELECT it to move messages.")
            if target is box:
                raise No(f"The messages are already in {box.name}.")
            pairs = []
            for m in targets:
                uid = mailbox.add(target.name, m.raw, m.flags - {"\\Recent"}, m.internal)
                pairs.append((m.uid, uid))
            code = ""
            if pairs:
                src = ",".join(str(a) for a, _ in pairs)
                dst = ",".join(str(b) for _, b in pairs)
                code = f"[COPYUID {UIDVALIDITY} {src} {dst}] "
            if name == "COPY":
                return f"{code}COPY completed"
            self.send(f"* OK {code}Moved")
            self._expunge(box, targets, report=True, all_deleted=False)
            return "MOVE completed"

    def _targets(self, box: Folder, text: str, *, by_uid: bool) -> list[Message]:
        if by_uid:
            largest = box.messages[-1].uid if box.messages else 0
            wanted = parse_set(text, largest)
            return [m for m in box.messages if m.uid in wanted]
        wanted = parse_set(text, len(box.messages))
        return [m for i, m in enumerate(box.messages) if i + 1 in wanted]

    def _expunge(
        self,
        box: Folder,
        only: list[Message] | None,
        *,
        report: bool,
        all_deleted: bool = True,
    ) -> None:
        chosen = {id(m) for m in only} if only is not None else None
        i = 0
        while i < len(box.messages):
            m = box.messages[i]
            picked = chosen is None or id(m) in chosen
            if picked and (m.has("\\Deleted") or not all_deleted):
                del box.messages[i]
                if report:
                    self.send(f"* {i + 1} EXPUNGE")
            else:
                i += 1

    def _store(self, box: Folder, targets: list[Message], rest: list[Any], *, by_uid: bool) -> str:
        if self.readonly:
            raise No("The folder is open read-only (EXAMINE); SELECT it to change flags.")
        if len(rest) != 2:
            raise Bad("STORE takes a message set, FLAGS/+FLAGS/-FLAGS[.SILENT] and flags.")
        how = _string(rest[0], "The STORE item").upper()
        m = re.fullmatch(r"([+-]?)FLAGS(\.SILENT)?", how)
        if not m:
            raise Bad(f"STORE item {how} is not supported; FLAGS, +FLAGS and -FLAGS are.")
        given = rest[1] if isinstance(rest[1], list) else [rest[1]]
        flags = {str(f) for f in given}
        for msg in targets:
            if m.group(1) == "+":
                msg.flags |= flags
            elif m.group(1) == "-":
                drop = {f.casefold() for f in flags}
                msg.flags = {f for f in msg.flags if f.casefold() not in drop}
            else:
                msg.flags = set(flags)
            if not m.group(2):
                uid = f"UID {msg.uid} " if by_uid else ""
                seq = box.messages.index(msg) + 1
                self.send(f"* {seq} FETCH ({uid}FLAGS ({' '.join(sorted(msg.flags))}))")
        return "STORE completed"

    def _search(self, box: Folder, args: list[Any]) -> list[Message]:
        tokens = list(args)
        if tokens and isinstance(tokens[0], str) and tokens[0].upper() == "CHARSET":
            if len(tokens) < 2 or _string(tokens[1], "The charset").upper() not in (
                "UTF-8",
                "US-ASCII",
            ):
                raise No("[BADCHARSET (UTF-8 US-ASCII)] Only UTF-8 and US-ASCII are supported.")
            tokens = tokens[2:]
        if not tokens:
            raise Bad("SEARCH needs criteria (ALL for every message).")
        tests: list[Any] = []
        i = 0
        while i < len(tokens):
            key = tokens[i]
            if not isinstance(key, str) or isinstance(key, Quoted):
                raise Bad(f"SEARCH criterion {key!r} is not supported.")
            key = key.upper()
            if key in ("ALL", "UNSEEN", "SEEN", "FLAGGED", "UNFLAGGED", "DELETED", "DRAFT"):
                tests.append((key, None))
                i += 1
                continue
            if key in (
                "FROM",
                "TO",
                "CC",
                "SUBJECT",
                "TEXT",
                "BODY",
                "SINCE",
                "BEFORE",
                "ON",
                "UID",
            ):
                if i + 1 >= len(tokens):
                    raise Bad(f"SEARCH {key} needs a value.")
                value = _string(tokens[i + 1], f"The value of {key}")
                if key in ("SINCE", "BEFORE", "ON"):
                    tests.append((key, _imap_date(value)))
                elif key == "UID":
                    largest = box.messages[-1].uid if box.messages else 0
                    tests.append((key, parse_set(value, largest)))
                else:
                    tests.append((key, value.casefold()))
                i += 2
                continue
            raise Bad(
                f"SEARCH criterion {key} is not supported; ALL, UNSEEN, SEEN, FLAGGED, "
                "UNFLAGGED, DELETED, DRAFT, FROM, TO, CC, SUBJECT, TEXT, BODY, SINCE, BEFORE, "
                "ON and UID are."
            )
        return [m for m in box.messages if all(_passes(m, k, v) for k, v in tests)]

    def _fetch(self, box: Folder, msg: Message, items: list[str], *, by_uid: bool) -> None:
        parts: list[bytes] = []
        upper = [i.upper() for i in items]
        if by_uid and "UID" not in upper:
            upper.insert(0, "UID")
            items.insert(0, "UID")
        seen_now = False
        for item, key in zip(items, upper, strict=True):
            if key == "UID":
                parts.append(f"UID {msg.uid}".encode())
            elif key == "FLAGS":
                continue  # added last: a BODY[] fetch may set \Seen
            elif key == "RFC822.SIZE":
                parts.append(f"RFC822.SIZE {len(msg.raw)}".encode())
            elif key == "INTERNALDATE":
                parts.append(f'INTERNALDATE "{_internal_date(msg.internal)}"'.encode())
            elif key.startswith(("BODY[", "BODY.PEEK[")):
                name, data = self._section(msg, item)
                if key.startswith("BODY[") and not self.readonly and not msg.has("\\Seen"):
                    msg.flags.add("\\Seen")
                    seen_now = True
                parts.append(name.encode() + b" {%d}\r\n" % len(data) + data)
            else:
                raise Bad(
                    f"FETCH item {item} is not supported; UID, FLAGS, RFC822.SIZE, "
                    "INTERNALDATE, BODY[...] and BODY.PEEK[...] (with <offset.count>) are."
                )
        if "FLAGS" in upper or seen_now:
            parts.append(f"FLAGS ({' '.join(sorted(msg.flags))})".encode())
        seq = box.messages.index(msg) + 1
        self.send(b"* %d FETCH (" % seq + b" ".join(parts) + b")")

    def _section(self, msg: Message, item: str) -> tuple[str, bytes]:
        m = re.fullmatch(
            r"BODY(?:\.PEEK)?\[(.*)\](?:<(\d+)(?:\.(\d+))?>)?", item, re.IGNORECASE | re.S
        )
        if not m:
            raise Bad(f"FETCH item {item} is malformed.")
        section = m.group(1).strip()
        upper = section.upper()
        header, body = _split(msg.raw)
        if upper == "":
            data = msg.raw
        elif upper == "HEADER":
            data = header
        elif upper == "TEXT":
            data = body
        else:
            fm = re.fullmatch(r"HEADER\.FIELDS(\.NOT)?\s*\(([^)]*)\)", section, re.IGNORECASE)
            if not fm:
                raise Bad(
                    f"FETCH section [{section}] is not supported; [], [HEADER], [TEXT] and "
                    "[HEADER.FIELDS (...)] are."
                )
            data = _header_fields(msg.raw, fm.group(2).split(), exclude=bool(fm.group(1)))
            section = f"HEADER.FIELDS{(fm.group(1) or '').upper()} ({fm.group(2).upper()})"
        name = f"BODY[{section}]"
        if m.group(2) is not None:
            start = int(m.group(2))
            end = start + int(m.group(3)) if m.group(3) is not None else len(data)
            data = data[start:end]
            name += f"<{start}>"
        return name, data


_AUTHENTICATED = {"LIST", "STATUS", "SELECT", "EXAMINE", "APPEND"}
_SELECTED = {"UID", "SEARCH", "FETCH", "STORE", "COPY", "MOVE", "EXPUNGE", "CLOSE"}


def _passes(msg: Message, key: str, value: Any) -> bool:
    if key == "ALL":
        return True
    flag = {
        "SEEN": "\\Seen",
        "UNSEEN": "\\Seen",
        "FLAGGED": "\\Flagged",
        "UNFLAGGED": "\\Flagged",
        "DELETED": "\\Deleted",
        "DRAFT": "\\Draft",
    }.get(key)
    if flag is not None:
        return msg.has(flag) != key.startswith("UN")
    day = msg.internal.date()
    if key == "SINCE":
        return bool(day >= value)
    if key == "BEFORE":
        return bool(day < value)
    if key == "ON":
        return bool(day == value)
    if key == "UID":
        return msg.uid in value
    fields = msg.searchable()
    return str(value) in fields[key.lower()]


class ImapServer(socketserver.ThreadingTCPServer):
    """The stand-in: ``with ImapServer(mailbox, user, password) as server: server.port``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mailbox: Mailbox, username: str, password: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.mailbox = mailbox
        self.username = username
        self.password = password
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> ImapServer:
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self.shutdown()
            self._thread.join()
        self.server_close()

    def __enter__(self) -> ImapServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
