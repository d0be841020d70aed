"""Real documents of every format the index reads, written by the tests (no binaries checked in).

PDFs are written by hand (a page of text in Helvetica per page, byte offsets in the xref table
computed), encrypted ones by pypdf's writer; Office Open XML and OpenDocument files are zip
archives of the XML parts Word, Excel, PowerPoint and LibreOffice write (the parts the index
reads, plus the manifests that make them open in those programs).
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping, Sequence
from email.message import EmailMessage
from pathlib import Path
from xml.sax.saxutils import escape


def write_pdf(path: Path, pages: Sequence[str]) -> Path:
    """A PDF with one page per text (lines split at newlines), Helvetica, WinAnsi encoding."""
    objects: list[bytes] = []
    n = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(n))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    font_id = 3 + 2 * n
    for i, text in enumerate(pages):
        lines = []
        for j, line in enumerate(text.splitlines()):
            safe = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            lines.append(f"BT /F1 12 Tf 72 {720 - 16 * j} Td ({safe}) Tj ET")
        stream = "\n".join(lines).encode("cp1252")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        objects.append(
            b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream"
        )
    objects.append(
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    )
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    path.write_bytes(bytes(out))
    return path


def write_encrypted_pdf(path: Path, pages: Sequence[str], password: str = "s3cret") -> Path:
    """A PDF that opens only with ``password`` (RC4, which pypdf writes with no extra package)."""
    from pypdf import PdfReader, PdfWriter

    plain = path.with_suffix(".plain.tmp")
    write_pdf(plain, pages)
    writer = PdfWriter(clone_from=PdfReader(plain))
    writer.encrypt(user_password=password, owner_password="owner-" + password, algorithm="RC4-128")
    with path.open("wb") as fh:
        writer.write(fh)
    plain.unlink()
    return path


def _zip(path: Path, parts: Mapping[str, str | bytes], stored_first: str = "") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        if stored_first:  # OpenDocument: the mimetype first and uncompressed
            z.writestr(zipfile.ZipInfo("mimetype"), stored_first, compress_type=zipfile.ZIP_STORED)
        for name, data in parts.items():
            z.writestr(name, data)
    return path


_CT = "http://schemas.openxmlformats.org/package/2006/content-types"
_PR = "http://schemas.openxmlformats.org/package/2006/relationships"
_OFFICE_DOC = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"
_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def _content_types(overrides: Mapping[str, str]) -> str:
    rows = "".join(f'<Override PartName="/{p}" ContentType="{t}"/>' for p, t in overrides.items())
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Types xmlns="{_CT}">'
        '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
        'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
        f"{rows}</Types>"
    )


def _root_rels(target: str) -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_PR}">'
        f'<Relationship Id="rId1" Type="{_OFFICE_DOC}" Target="{target}"/></Relationships>'
    )


def write_docx(path: Path, paragraphs: Sequence[tuple[str, str]]) -> Path:
    """A Word document: (style, text) paragraphs; a style such as "Heading1" makes a heading."""
    body = ""
    for style, text in paragraphs:
        ppr = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
        body += f'<w:p>{ppr}<w:r><w:t xml:space="preserve">{escape(text)}</w:t></w:r></w:p>'
    document = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{_W}">'
        f"<w:body>{body}</w:body></w:document>"
    )
    main = "application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"
    return _zip(
        path,
        {
            "[Content_Types].xml": _content_types({"word/document.xml": main}),
            "_rels/.rels": _root_rels("word/document.xml"),
            "word/document.xml": document,
        },
    )


def write_xlsx(path: Path, sheets: Mapping[str, Sequence[Sequence[str | int | float]]]) -> Path:
    """An Excel workbook: sheet name -> rows; text cells through the shared strings table."""
    shared: list[str] = []
    parts: dict[str, str] = {}
    entries, rels = "", ""
    for number, (name, rows) in enumerate(sheets.items(), 1):
        xml_rows = ""
        for r, row in enumerate(rows, 1):
            cells = ""
            for c, value in enumerate(row):
                ref = f"{chr(65 + c)}{r}"
                if isinstance(value, str):
                    shared.append(value)
                    cells += f'<c r="{ref}" t="s"><v>{len(shared) - 1}</v></c>'
                else:
                    cells += f'<c r="{ref}"><v>{value}</v></c>'
            xml_rows += f'<row r="{r}">{cells}</row>'
        parts[f"xl/worksheets/sheet{number}.xml"] = (
            f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{_S}">'
            f"<sheetData>{xml_rows}</sheetData></worksheet>"
        )
        entries += f'<sheet name="{escape(name)}" sheetId="{number}" r:id="rId{number}"/>'
        rels += (
            f'<Relationship Id="rId{number}" Type="{_R}/worksheet" '
            f'Target="worksheets/sheet{number}.xml"/>'
        )
    strings = "".join(f"<si><t>{escape(s)}</t></si>" for s in shared)
    parts["xl/sharedStrings.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{_S}" count="{len(shared)}">'
        f"{strings}</sst>"
    )
    parts["xl/workbook.xml"] = (
        f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{_S}" xmlns:r="{_R}">'
        f"<sheets>{entries}</sheets></workbook>"
    )
    parts["xl/_rels/workbook.xml.rels"] = (
        f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_PR}">{rels}</Relationships>'
    )
    main = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"
    parts["[Content_Types].xml"] = _content_types({"xl/workbook.xml": main})
    parts["_rels/.rels"] = _root_rels("xl/workbook.xml")
    return _zip(path, parts)


def write_pptx(path: Path, slides: Sequence[Sequence[str]]) -> Path:
    """A PowerPoint deck: each slide's paragraphs in one text box."""
    parts: dict[str, str] = {}
    for number, paras in enumerate(slides, 1):
        text = "".join(f"<a:p><a:r><a:t>{escape(p)}</a:t></a:r></a:p>" for p in paras)
        parts[f"ppt/slides/slide{number}.xml"] = (
            f'<?xml version="1.0" encoding="UTF-8"?><p:sld xmlns:p="{_P}" xmlns:a="{_A}">'
            f"<p:cSld><p:spTree><p:sp><p:txBody>{text}</p:txBody></p:sp></p:spTree></p:cSld>"
            "</p:sld>"
        )
    main = "application/vnd.openxmlformats-officedocument.presentationml.presentation.main+xml"
    parts["ppt/presentation.xml"] = f'<?xml version="1.0"?><p:presentation xmlns:p="{_P}"/>'
    parts["[Content_Types].xml"] = _content_types({"ppt/presentation.xml": main})
    parts["_rels/.rels"] = _root_rels("ppt/presentation.xml")
    return _zip(path, parts)


_ODF_NS = (
    'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
    'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
    'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
    'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" office:version="1.3"'
)


def _odf(path: Path, mimetype: str, body: str) -> Path:
    content = (
        f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {_ODF_NS}>'
        f"<office:body>{body}</office:body></office:document-content>"
    )
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?><manifest:manifest xmlns:manifest='
        '"urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3">'
        f'<manifest:file-entry manifest:full-path="/" manifest:media-type="{mimetype}"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
        "</manifest:manifest>"
    )
    meta = (
        '<?xml version="1.0" encoding="UTF-8"?><office:document-meta xmlns:office='
        '"urn:oasis:names:tc:opendocument:xmlns:office:1.0" office:version="1.3">'
        "<office:meta/></office:document-meta>"
    )
    styles = (
        '<?xml version="1.0" encoding="UTF-8"?><office:document-styles xmlns:office='
        '"urn:oasis:names:tc:opendocument:xmlns:office:1.0" office:version="1.3"/>'
    )
    parts = {"content.xml": content, "meta.xml": meta, "styles.xml": styles}
    return _zip(path, {**parts, "META-INF/manifest.xml": manifest}, mimetype)


def write_odt(path: Path, paragraphs: Sequence[tuple[str, str]]) -> Path:
    """An OpenDocument text: ("h", text) headings and ("p", text) paragraphs."""
    body = "".join(
        f'<text:h text:outline-level="1">{escape(t)}</text:h>'
        if kind == "h"
        else f"<text:p>{escape(t)}</text:p>"
        for kind, t in paragraphs
    )
    return _odf(
        path, "application/vnd.oasis.opendocument.text", f"<office:text>{body}</office:text>"
    )


def write_ods(path: Path, sheets: Mapping[str, Sequence[Sequence[str]]]) -> Path:
    """An OpenDocument spreadsheet: sheet name -> rows of text cells."""
    tables = ""
    for name, rows in sheets.items():
        xml_rows = "".join(
            "<table:table-row>"
            + "".join(
                f'<table:table-cell office:value-type="string"><text:p>{escape(c)}</text:p>'
                "</table:table-cell>"
                for c in row
            )
            + "</table:table-row>"
            for row in rows
        )
        tables += f'<table:table table:name="{escape(name)}">{xml_rows}</table:table>'
    return _odf(
        path,
        "application/vnd.oasis.opendocument.spreadsheet",
        f"<office:spreadsheet>{tables}</office:spreadsheet>",
    )


def write_eml(path: Path, sender: str, to: str, subject: str, body: str) -> Path:
    """A saved e-mail (.eml), as mail programs save one."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = to
    message["Subject"] = subject
    message["Date"] = "Tue, 03 Mar 2026 10:00:00 +0100"
    message.set_content(body)
    path.write_bytes(bytes(message))
    return path


def write_zip_bomb(path: Path, part: str = "word/document.xml", size: int = 20 * 1024**2) -> Path:
    """A docx whose document part unpacks to ``size`` bytes of blanks (a thousandfold ratio)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", _content_types({}))
        with z.open(part, "w") as fh:
            chunk = b" " * (1024 * 1024)
            for _ in range(size // len(chunk)):
                fh.write(chunk)
    return path
