"""Text of the formats people keep, page by page or section by section, or why it cannot be read.

Which extractor for which format, and why:

- **Plain text, Markdown, CSV**: the files tools' own decoder (adapters/files/kinds.py), so a
  file that ``read_text_file`` reads is indexed with the same text. Markdown is cut at its
  headings (the heading names the passage), other text at blank lines, ``lines A-B``.
- **PDF**: pypdf (pinned in pyproject.toml): pure Python (no native library to crash the
  process or to ship), maintained, and it reads encrypted files well enough to say so. One
  passage per page, ``page N``. A password-protected PDF (one that does not open with the
  empty password) is not indexed, with that reason; a PDF with no text layer (a scan) says so.
- **docx, xlsx, pptx, odt, ods, odp**: these are zip archives of XML. The stdlib's ``zipfile``
  and ``xml.etree.ElementTree`` read only the parts with the text, in a streaming way, with no
  extra dependency. python-docx, openpyxl and odfpy would each add a package (and openpyxl a
  whole workbook model in memory) to get the same words; none of them gives pages anyway.
  Every part's declared size is checked *before* it is read (a zip bomb declares gigabytes
  or a compression ratio no document has), every read is bounded anyway (a declared size can
  lie), and a part with a document type declaration is refused (Office and OpenDocument never
  use one; entity tricks need one). Passages: Word and Writer paragraphs grouped under their
  headings (``section "Heading"``), spreadsheet sheets (``sheet "Name"``, rows as lines),
  slides (``slide N``).
- **HTML**: the stdlib's ``html.parser`` (tolerant of broken markup, no dependency); scripts and
  styles left out, the title and headings cut sections.
- **E-mail (.eml)**: the stdlib's ``email`` package with its modern policy: sender, recipients,
  date and subject as the first passage's head, then the text part (or the HTML part's text).

Everything here is plain functions of a path that raise :class:`Unreadable` with a short reason
the index records; the index runs them in a separate process (worker.py) with a time limit, so
a file that makes a parser loop or allocate without end costs that file, never the index.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from botpsy_desktop.adapters.files.kinds import decode_text

if TYPE_CHECKING:
    # the email package, ElementTree and html.parser (~2 MiB) are imported where a file of
    # their kind is read: the app's process imports this module for ``kind_of``
    from xml.etree import ElementTree

    from botpsy_desktop.adapters.documents.html_text import HtmlText

MAX_TEXT_CHARS = 5_000_000
"""Text kept per file; a longer one is indexed up to here (and says so)."""

PASSAGE_CHARS = 1_500
"""A passage longer than this is cut at a line or word break into several with the same place."""

MAX_PART_BYTES = 64 * 1024 * 1024
"""The most an archive's text part may unpack to (a 500-page docx is about 5 MB of XML)."""

MAX_TOTAL_UNPACKED = 256 * 1024 * 1024
"""The most all the parts read from one archive may unpack to, together."""

MAX_RATIO = 200
"""A part that unpacks to more than this many times its packed size (and more than a MiB) is
a zip bomb: XML compresses about 5 to 20 times, never hundreds."""

SUFFIXES = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "text",
    ".org": "text",
    ".csv": "text",
    ".tsv": "text",
    ".log": "text",
    ".pdf": "pdf",
    ".docx": "docx",
    ".xlsx": "xlsx",
    ".pptx": "pptx",
    ".odt": "odf",
    ".ods": "odf",
    ".odp": "odf",
    ".html": "html",
    ".htm": "html",
    ".eml": "eml",
}
"""The file name endings indexed, and their extractor."""


class Unreadable(Exception):
    """A file the index cannot take text from; ``str()`` is the reason, in a few words."""


@dataclass(frozen=True)
class Passage:
    """A run of a document's text and where it is: ``page 3``, ``sheet "Budget"``, ``slide 2``,
    ``section "Termination"``, ``lines 10-42``."""

    place: str
    text: str


@dataclass(frozen=True)
class Extracted:
    """What came out of one file: its passages, and a note when not all of it did."""

    passages: list[Passage]
    note: str = ""


def kind_of(path: str | os.PathLike[str]) -> str | None:
    """The extractor for a file name, or None when its kind is not indexed."""
    return SUFFIXES.get(os.path.splitext(os.fspath(path))[1].casefold())


def extract(path: str | os.PathLike[str], max_bytes: int) -> Extracted:
    """The text of the file at ``path`` (at most ``max_bytes`` large), or Unreadable."""
    kind = kind_of(path)
    if kind is None:
        raise Unreadable("not a kind of file the index reads")
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise Unreadable(f"cannot be opened ({exc.strerror or exc})") from None
    if size > max_bytes:
        raise Unreadable(f"larger than the limit ({size:,} bytes > {max_bytes:,})")
    try:
        passages = _EXTRACTORS[kind](Path(path))
    except Unreadable:
        raise
    except MemoryError:
        raise Unreadable("too large to read in the memory allowed") from None
    except RecursionError:
        raise Unreadable("nested too deeply to read") from None
    except (OSError, zipfile.BadZipFile) as exc:
        raise Unreadable(f"damaged or unreadable ({_short(exc)})") from None
    except Exception as exc:  # a parser's own error on a damaged file: the file's problem
        raise Unreadable(f"damaged or unreadable ({type(exc).__name__}: {_short(exc)})") from None
    return _bounded(passages)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _bounded(passages: list[Passage]) -> Extracted:
    """Passages cut to PASSAGE_CHARS, empty ones dropped, the whole kept to MAX_TEXT_CHARS."""
    out: list[Passage] = []
    total = 0
    for p in passages:
        text = p.text.encode("utf-8", "replace").decode("utf-8")  # no lone surrogates
        for piece in _pieces(text):
            if total + len(piece) > MAX_TEXT_CHARS:
                note = f"only the first {MAX_TEXT_CHARS:,} characters are indexed"
                return Extracted(out, note)
            total += len(piece)
            out.append(Passage(p.place, piece))
    return Extracted(out)


def _pieces(text: str) -> Iterator[str]:
    text = text.strip()
    while len(text) > PASSAGE_CHARS:
        cut = text.rfind("\n", PASSAGE_CHARS // 2, PASSAGE_CHARS)
        if cut < 0:
            cut = text.rfind(" ", PASSAGE_CHARS // 2, PASSAGE_CHARS)
        if cut < 0:
            cut = PASSAGE_CHARS
        yield text[:cut].strip()
        text = text[cut:].strip()
    if text:
        yield text


# --- text and Markdown ---------------------------------------------------------------------

_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    decoded = decode_text(data, final=True)
    if decoded is None:
        raise Unreadable("not text (binary content)")
    return decoded.text


def _text(path: Path) -> list[Passage]:
    return _by_lines(_read_text(path), markdown=False)


def _markdown(path: Path) -> list[Passage]:
    return _by_lines(_read_text(path), markdown=True)


def _by_lines(text: str, *, markdown: bool) -> list[Passage]:
    """Blocks of about a passage each at blank lines (``lines A-B``); Markdown headings start a
    new block named by the heading."""
    out: list[Passage] = []
    block: list[str] = []
    start = 1
    heading = ""

    def flush(end: int) -> None:
        body = "\n".join(block).strip()
        if body:
            where = f"lines {start}-{end}"
            out.append(Passage(f'section "{heading}", {where}' if heading else where, body))
        block.clear()

    size = 0
    for number, line in enumerate(text.splitlines(), 1):
        found = _HEADING.match(line) if markdown else None
        if found or (not line.strip() and size >= PASSAGE_CHARS // 2):
            flush(number - 1)
            start, size = number, 0
            if found:
                heading = found.group(1)[:80]
        block.append(line)
        size += len(line) + 1
    flush(start + len(block) - 1)
    return out


# --- PDF -----------------------------------------------------------------------------------


def _pdf(path: Path) -> list[Passage]:
    import logging

    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # damaged files warn at every object
    try:
        reader = PdfReader(path, strict=False)
        if reader.is_encrypted:
            try:
                opened = bool(reader.decrypt(""))
            except Exception:  # an algorithm pypdf cannot do without an extra package
                opened = False
            if not opened:
                raise Unreadable("password-protected PDF")
        out = []
        for number, page in enumerate(reader.pages, 1):
            text = page.extract_text() or ""
            if text.strip():
                out.append(Passage(f"page {number}", text))
    except FileNotDecryptedError:
        raise Unreadable("password-protected PDF") from None
    except PdfReadError as exc:
        raise Unreadable(f"damaged PDF ({_short(exc)})") from None
    if not out:
        raise Unreadable("no text in this PDF (a scan or pictures only)")
    return out


# --- zip + XML: Office Open XML and OpenDocument ---------------------------------------------

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_PKG_R = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"


class _Archive:
    """A zip archive whose parts are checked against a zip bomb before they are read."""

    def __init__(self, path: Path) -> None:
        try:
            self.zip = zipfile.ZipFile(path)
        except zipfile.BadZipFile:
            raise Unreadable("damaged archive (not a valid zip file)") from None
        self.read_so_far = 0

    def __enter__(self) -> _Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.zip.close()

    def names(self) -> list[str]:
        return self.zip.namelist()

    def xml(self, name: str) -> ElementTree.Element:
        """The part ``name`` parsed, after its sizes were checked; Unreadable when missing,
        too large, a bomb, damaged or carrying a document type declaration."""
        try:
            info = self.zip.getinfo(name)
        except KeyError:
            raise Unreadable(f"damaged document (no {name} inside)") from None
        if info.file_size > MAX_PART_BYTES:
            raise Unreadable(f"{name} unpacks to {info.file_size:,} bytes, over the limit")
        if info.file_size > 1024 * 1024 and info.file_size > MAX_RATIO * max(1, info.compress_size):
            raise Unreadable(
                f"zip bomb: {name} unpacks {info.file_size // max(1, info.compress_size):,} "
                "times its packed size"
            )
        if self.read_so_far + info.file_size > MAX_TOTAL_UNPACKED:
            raise Unreadable("unpacks to more than the limit for one document")
        try:
            with self.zip.open(info) as fh:
                data = fh.read(info.file_size + 1)  # never more than declared (plus one)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as exc:
            raise Unreadable(f"damaged archive ({_short(exc)})") from None
        except RuntimeError as exc:  # an encrypted member
            raise Unreadable(f"encrypted or unreadable archive ({_short(exc)})") from None
        if len(data) > info.file_size:
            raise Unreadable(f"damaged archive ({name} is larger than it declares)")
        self.read_so_far += len(data)
        if b"<!DOCTYPE" in data[:4096] or b"<!ENTITY" in data:
            raise Unreadable(f"{name} declares a document type, which documents never do")
        from xml.etree import ElementTree

        try:
            return ElementTree.fromstring(data)
        except ElementTree.ParseError as exc:
            raise Unreadable(f"damaged document ({name}: {exc})") from None


def _all_text(node: ElementTree.Element, tag: str) -> str:
    return "".join(t.text or "" for t in node.iter(tag))


def _docx(path: Path) -> list[Passage]:
    with _Archive(path) as archive:
        body = archive.xml("word/document.xml")
    out: list[Passage] = []
    heading, lines = "", list[str]()
    for para in body.iter(f"{_W}p"):
        style = para.find(f"{_W}pPr/{_W}pStyle")
        value = (style.get(f"{_W}val") or "") if style is not None else ""
        text = "".join(
            (t.text or "") if t.tag == f"{_W}t" else "\t" if t.tag == f"{_W}tab" else "\n"
            for t in para.iter()
            if t.tag in (f"{_W}t", f"{_W}tab", f"{_W}br")
        ).strip()
        if value.casefold().startswith(("heading", "title")) and text:
            if lines:
                out.append(Passage(_section(heading, len(out)), "\n".join(lines)))
            heading, lines = text[:80], [text]
        elif text:
            lines.append(text)
    if lines:
        out.append(Passage(_section(heading, len(out)), "\n".join(lines)))
    return out


def _section(heading: str, index: int) -> str:
    return f'section "{heading}"' if heading else f"part {index + 1}"


def _xlsx(path: Path) -> list[Passage]:
    with _Archive(path) as archive:
        names = set(archive.names())
        shared: list[str] = []
        if "xl/sharedStrings.xml" in names:
            table = archive.xml("xl/sharedStrings.xml")
            shared = [_all_text(si, f"{_S}t") for si in table.iter(f"{_S}si")]
        book = archive.xml("xl/workbook.xml")
        targets: dict[str, str] = {}
        if "xl/_rels/workbook.xml.rels" in names:
            for rel in archive.xml("xl/_rels/workbook.xml.rels").iter(f"{_PKG_R}Relationship"):
                target = rel.get("Target") or ""
                target = target.lstrip("/")
                targets[rel.get("Id") or ""] = (
                    target if target.startswith("xl/") else "xl/" + target
                )
        out: list[Passage] = []
        for number, sheet in enumerate(book.iter(f"{_S}sheet"), 1):
            name = sheet.get("name") or f"Sheet{number}"
            part = targets.get(sheet.get(f"{_R}id") or "", f"xl/worksheets/sheet{number}.xml")
            if part not in names:
                continue
            rows = []
            for row in archive.xml(part).iter(f"{_S}row"):
                cells = []
                for cell in row.iter(f"{_S}c"):
                    kind = cell.get("t")
                    if kind == "s":
                        value = cell.findtext(f"{_S}v") or ""
                        text = (
                            shared[int(value)]
                            if value.isdigit() and int(value) < len(shared)
                            else ""
                        )
                    elif kind == "inlineStr":
                        text = _all_text(cell, f"{_S}t")
                    else:
                        text = cell.findtext(f"{_S}v") or ""
                    if text.strip():
                        cells.append(text.strip())
                if cells:
                    rows.append(" | ".join(cells))
            if rows:
                out.append(Passage(f'sheet "{name}"', "\n".join(rows)))
        return out


def _pptx(path: Path) -> list[Passage]:
    with _Archive(path) as archive:
        slides = sorted(
            (n for n in archive.names() if re.fullmatch(r"ppt/slides/slide\d+\.xml", n)),
            key=lambda n: int(re.sub(r"\D", "", n.rsplit("/", 1)[1])),
        )
        out = []
        for name in slides:
            number = int(re.sub(r"\D", "", name.rsplit("/", 1)[1]))
            root = archive.xml(name)
            paras = [_all_text(p, f"{_A}t").strip() for p in root.iter(f"{_A}p")]
            text = "\n".join(p for p in paras if p)
            if text:
                out.append(Passage(f"slide {number}", text))
        return out


def _odf(path: Path) -> list[Passage]:
    with _Archive(path) as archive:
        root = archive.xml("content.xml")
    body = root.find(f"{_OFFICE}body")
    if body is None:
        raise Unreadable("damaged document (no body in content.xml)")
    out: list[Passage] = []
    sheets = list(body.iter(f"{_TABLE}table"))
    if body.find(f"{_OFFICE}spreadsheet") is not None:
        for number, table in enumerate(sheets, 1):
            name = table.get(f"{_TABLE}name") or f"Sheet{number}"
            rows = []
            for row in table.iter(f"{_TABLE}table-row"):
                cells = [_odf_text(c) for c in row.iter(f"{_TABLE}table-cell")]
                cells = [c for c in cells if c]
                if cells:
                    rows.append(" | ".join(cells))
            if rows:
                out.append(Passage(f'sheet "{name}"', "\n".join(rows)))
        return out
    if body.find(f"{_OFFICE}presentation") is not None:
        for number, page in enumerate(body.iter(f"{_DRAW}page"), 1):
            text = "\n".join(t for t in (_odf_text(p) for p in page.iter(f"{_TEXT}p")) if t)
            if text:
                out.append(Passage(f"slide {number}", text))
        return out
    heading, lines = "", list[str]()
    for node in body.iter():
        if node.tag == f"{_TEXT}h":
            text = _odf_text(node)
            if lines:
                out.append(Passage(_section(heading, len(out)), "\n".join(lines)))
            heading, lines = text[:80], [text] if text else []
        elif node.tag == f"{_TEXT}p":
            text = _odf_text(node)
            if text:
                lines.append(text)
    if lines:
        out.append(Passage(_section(heading, len(out)), "\n".join(lines)))
    return out


def _odf_text(node: ElementTree.Element) -> str:
    """A paragraph's text with its spaces, tabs and line breaks (``text:s``, ``text:tab``)."""
    parts: list[str] = []

    def walk(n: ElementTree.Element) -> None:
        if n.text:
            parts.append(n.text)
        for child in n:
            if child.tag == f"{_TEXT}s":
                parts.append(" " * int(child.get(f"{_TEXT}c") or "1"))
            elif child.tag == f"{_TEXT}tab":
                parts.append("\t")
            elif child.tag == f"{_TEXT}line-break":
                parts.append("\n")
            else:
                walk(child)
            if child.tail:
                parts.append(child.tail)

    walk(node)
    return "".join(parts).strip()


# --- HTML ----------------------------------------------------------------------------------


def _html(path: Path) -> list[Passage]:
    from botpsy_desktop.adapters.documents.html_text import HtmlText

    parser = HtmlText()
    parser.feed(_read_text(path))
    parser.close()
    return _html_passages(parser)


def _html_passages(parser: HtmlText) -> list[Passage]:
    out = []
    title = " ".join("".join(parser.title).split())
    for index, (heading, parts) in enumerate(parser.sections):
        text = "\n".join(" ".join(line.split()) for line in "".join(parts).splitlines())
        text = re.sub(r"\n{2,}", "\n", text).strip()
        if index == 0 and title:
            text = f"{title}\n{text}".strip()
        if text:
            out.append(Passage(_section(heading or (title if index == 0 else ""), index), text))
    return out


# --- e-mail --------------------------------------------------------------------------------


def _eml(path: Path) -> list[Passage]:
    import email
    import email.policy
    from email.message import EmailMessage

    from botpsy_desktop.adapters.documents.html_text import HtmlText

    with path.open("rb") as fh:
        message = email.message_from_binary_file(fh, policy=email.policy.default)
    if not isinstance(message, EmailMessage) or not (message.keys() or message.get_payload()):
        raise Unreadable("not an e-mail message")
    head = []
    for key in ("From", "To", "Cc", "Date", "Subject"):
        try:
            value = message.get(key)
        except Exception:  # a header the policy cannot parse
            value = None
        if value:
            head.append(f"{key}: {' '.join(str(value).split())}")
    body = ""
    part = message.get_body(preferencelist=("plain", "html"))
    if part is not None:
        try:
            content = part.get_content()
        except (LookupError, ValueError, AssertionError):
            content = part.get_payload(decode=True) or b""
            content = content.decode("utf-8", "replace") if isinstance(content, bytes) else ""
        if isinstance(content, str):
            if part.get_content_subtype() == "html":
                parser = HtmlText()
                parser.feed(content)
                parser.close()
                content = "\n".join(p.text for p in _html_passages(parser))
            body = content
    names = [p.get_filename() for p in message.iter_attachments() if p.get_filename()]
    if names:
        head.append("Attachments: " + ", ".join(str(n) for n in names))
    text = "\n".join(head) + "\n\n" + body
    return [Passage("message", text)] if text.strip() else []


_EXTRACTORS: dict[str, Callable[[Path], list[Passage]]] = {
    "text": _text,
    "markdown": _markdown,
    "pdf": _pdf,
    "docx": _docx,
    "xlsx": _xlsx,
    "pptx": _pptx,
    "odf": _odf,
    "html": _html,
    "eml": _eml,
}
