"""MIME in and out: plain text from any message (HTML reduced, charsets handled), new messages."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import formataddr, formatdate, make_msgid
from html.parser import HTMLParser
from typing import Any


@dataclass(frozen=True)
class Attachment:
    name: str
    content_type: str
    size: int
    inline: bool = False


@dataclass
class ParsedMessage:
    """What a message says, as text: headers, the body and the attachments (never opened)."""

    headers: dict[str, str]
    text: str
    from_html: bool
    attachments: list[Attachment] = field(default_factory=list)
    defects: int = 0


def parse(raw: bytes) -> ParsedMessage:
    """Read a message: headers decoded, the plain-text body (or its HTML as text), attachments."""
    msg = BytesParser(policy=policy.default).parsebytes(raw)
    headers = {
        name: header(msg, name)
        for name in ("From", "To", "Cc", "Reply-To", "Date", "Subject", "Message-ID")
        if msg.get(name) is not None
    }
    body = _body_part(msg)
    text, from_html = "", False
    if body is not None:
        text = part_text(body)
        if body.get_content_type() == "text/html":
            text, from_html = html_to_text(text), True
    attachments = [_attachment(p) for p in _leaves(msg) if p is not body and _is_attachment(p)]
    defects = sum(len(p.defects) for p in msg.walk())
    return ParsedMessage(headers, text, from_html, attachments, defects)


def header(msg: Message, name: str) -> str:
    """A header decoded to text, on one line; a malformed one is shown as it was sent."""
    try:
        value = msg.get(name)
        text = "" if value is None else str(value)
    except Exception:  # the header parser's own errors on broken encoded words
        text = next((str(v) for k, v in msg.raw_items() if k.lower() == name.lower()), "")
    return " ".join(text.split())


def _body_part(msg: EmailMessage) -> Message | None:
    try:
        found = msg.get_body(preferencelist=("plain", "html"))
    except Exception:
        found = None
    if found is not None:
        return found
    for part in msg.walk():  # a message whose only text part is oddly marked
        if part.get_content_maintype() == "text" and not _is_attachment(part):
            return part
    return None


def _leaves(msg: Message) -> list[Message]:
    out: list[Message] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        out.append(part)
    return out


def _is_attachment(part: Message) -> bool:
    disposition = (part.get_content_disposition() or "").lower()
    if disposition == "attachment" or part.get_filename():
        return True
    return part.get_content_maintype() not in ("text", "multipart")


def _attachment(part: Message) -> Attachment:
    name = part.get_filename() or f"(unnamed {part.get_content_type()})"
    try:
        payload = part.get_payload(decode=True)
        size = len(payload) if isinstance(payload, bytes) else 0
    except Exception:
        size = 0
    inline = (part.get_content_disposition() or "").lower() == "inline"
    return Attachment(" ".join(str(name).split()), part.get_content_type(), size, inline)


def part_text(part: Message) -> str:
    """A text part's content as str, whatever its charset claims; never raises."""
    try:
        payload = part.get_payload(decode=True)
    except Exception:
        payload = None
    if not isinstance(payload, bytes):
        raw: Any = part.get_payload()
        return raw if isinstance(raw, str) else ""
    charset = (part.get_content_charset() or "us-ascii").lower()
    if charset in ("us-ascii", "ascii") and not payload.isascii():
        charset = "utf-8"  # 8-bit text sent as ASCII is usually UTF-8, else Windows-1252
    try:
        return payload.decode(charset)
    except LookupError:  # an unknown charset name
        pass
    except UnicodeDecodeError:
        return payload.decode(charset, errors="replace")
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload.decode("windows-1252", errors="replace")


class _HtmlText(HTMLParser):
    SKIP = frozenset({"script", "style", "head", "title", "template", "noscript", "svg"})
    BLOCK = frozenset(
        [
            "p",
            "div",
            "br",
            "tr",
            "table",
            "ul",
            "ol",
            "blockquote",
            "section",
            "article",
            "header",
            "footer",
            "hr",
            "h1",
            "h2",
            "h3",
            "h4",
            "h5",
            "h6",
            "pre",
            "dl",
            "dt",
            "dd",
            "form",
        ]
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0
        self.links: list[tuple[str, int]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag == "li":
            self.parts.append("\n- ")
        elif tag in ("td", "th"):
            self.parts.append(" ")
        elif tag in self.BLOCK:
            self.parts.append("\n")
        elif tag == "a":
            href = dict(attrs).get("href") or ""
            self.links.append((href, len(self.parts)))
        elif tag == "img":
            alt = (dict(attrs).get("alt") or "").strip()
            if alt and not self.skipping:
                self.parts.append(f"[image: {alt}]")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "a":
            self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCK or tag == "li":
            self.parts.append("\n")
        elif tag == "a" and self.links:
            href, start = self.links.pop()
            shown = "".join(self.parts[start:]).strip()
            if href.startswith(("http://", "https://", "mailto:")) and href not in shown:
                self.parts.append(f" <{href}>")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    """HTML as readable plain text: scripts and styles dropped, blocks on their own lines."""
    parser = _HtmlText()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # pathological markup: keep what was read
        pass
    text = "".join(parser.parts).replace("\xa0", " ")
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def build(
    *,
    sender: str,
    sender_name: str,
    to: list[tuple[str, str]],
    cc: list[tuple[str, str]],
    subject: str,
    body: str,
    in_reply_to: str = "",
    references: str = "",
) -> EmailMessage:
    """A new plain-text message (UTF-8), exactly ``body``; From, Date and Message-ID set."""
    msg = EmailMessage(policy=policy.SMTP)
    msg["From"] = formataddr((sender_name, sender)) if sender_name else sender
    msg["To"] = ", ".join(formataddr(p) for p in to)
    if cc:
        msg["Cc"] = ", ".join(formataddr(p) for p in cc)
    msg["Subject"] = subject
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid(domain=sender.rpartition("@")[2] or None)
    if in_reply_to:
        msg["In-Reply-To"] = in_reply_to
        msg["References"] = f"{references} {in_reply_to}".strip()
    msg.set_content(body)
    return msg
