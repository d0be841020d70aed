"""What a file is: a kind and a description by extension, by content (magic bytes), text or not."""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from typing import Final, Literal, get_args

Kind = Literal[
    "file",
    "folder",
    "document",
    "spreadsheet",
    "presentation",
    "image",
    "audio",
    "video",
    "archive",
    "text",
    "code",
    "program",
]
"""The kinds ``find_files`` can filter on; ``file`` and ``folder`` match any file or folder."""

KINDS: Final[tuple[str, ...]] = get_args(Kind)

SNIFF_BYTES: Final = 8192
"""How many leading bytes are looked at to tell text from binary and to recognise a format."""

MAX_REPLACED_RATIO: Final = 0.01
"""Text that is not valid UTF-8 still counts as text if at most this share is replaced."""


def _table(kind: str, description: str, *extensions: str) -> dict[str, tuple[str, str]]:
    return {ext: (kind, description) for ext in extensions}


EXTENSIONS: Final[dict[str, tuple[str, str]]] = {
    **_table("document", "PDF document", "pdf"),
    **_table("document", "Word document", "doc", "docx", "dotx"),
    **_table("document", "OpenDocument text", "odt"),
    **_table("document", "Rich Text document", "rtf"),
    **_table("document", "e-book", "epub", "mobi", "azw3"),
    **_table("document", "PostScript document", "ps", "eps"),
    **_table("document", "Pages document", "pages"),
    **_table("spreadsheet", "spreadsheet", "xls", "xlsx", "ods", "numbers"),
    **_table("spreadsheet", "CSV table", "csv", "tsv"),
    **_table("presentation", "presentation", "ppt", "pptx", "odp", "key"),
    **_table("image", "JPEG image", "jpg", "jpeg", "jfif"),
    **_table("image", "PNG image", "png"),
    **_table("image", "GIF image", "gif"),
    **_table("image", "WebP image", "webp"),
    **_table("image", "HEIC photo", "heic", "heif"),
    **_table("image", "TIFF image", "tif", "tiff"),
    **_table("image", "bitmap image", "bmp"),
    **_table("image", "SVG drawing", "svg"),
    **_table("image", "icon", "ico", "icns"),
    **_table("image", "raw camera photo", "raw", "cr2", "cr3", "nef", "arw", "dng", "orf", "rw2"),
    **_table("image", "image", "psd", "xcf", "avif"),
    **_table("audio", "MP3 audio", "mp3"),
    **_table("audio", "FLAC audio", "flac"),
    **_table("audio", "Ogg audio", "ogg", "oga", "opus"),
    **_table("audio", "WAV audio", "wav"),
    **_table("audio", "AAC audio", "m4a", "aac"),
    **_table("audio", "audio", "wma", "aiff", "aif", "mid", "midi"),
    **_table("video", "MP4 video", "mp4", "m4v"),
    **_table("video", "QuickTime video", "mov"),
    **_table("video", "Matroska video", "mkv"),
    **_table("video", "WebM video", "webm"),
    **_table("video", "video", "avi", "wmv", "flv", "mpg", "mpeg", "3gp", "ogv"),
    **_table("archive", "ZIP archive", "zip"),
    **_table("archive", "tar archive", "tar"),
    **_table("archive", "compressed archive", "gz", "tgz", "bz2", "tbz2", "xz", "txz", "zst"),
    **_table("archive", "7-Zip archive", "7z"),
    **_table("archive", "RAR archive", "rar"),
    **_table("archive", "disk image", "iso", "dmg", "img"),
    **_table("text", "text file", "txt", "text", "log"),
    **_table("text", "Markdown text", "md", "markdown"),
    **_table("text", "reStructuredText", "rst"),
    **_table("text", "subtitles", "srt", "vtt"),
    **_table("text", "calendar or contact file", "ics", "vcf"),
    **_table("code", "Python source", "py", "pyi"),
    **_table("code", "JavaScript source", "js", "mjs", "cjs", "ts", "tsx", "jsx"),
    **_table("code", "C/C++ source", "c", "h", "cc", "cpp", "hpp", "cxx"),
    **_table("code", "source code", "java", "kt", "go", "rs", "rb", "php", "swift", "cs", "lua"),
    **_table("code", "shell script", "sh", "bash", "zsh", "fish", "ps1", "bat", "cmd"),
    **_table("code", "web page", "html", "htm", "css", "scss"),
    **_table("code", "data file", "json", "jsonl", "yaml", "yml", "toml", "xml", "ini", "cfg"),
    **_table("code", "SQL script", "sql"),
    **_table("program", "Windows program", "exe", "msi", "dll"),
    **_table("program", "installer package", "deb", "rpm", "apk", "pkg", "appimage", "flatpak"),
    **_table("program", "Java archive", "jar"),
    **_table("program", "shared library", "so", "dylib"),
    **_table("program", "database", "sqlite", "sqlite3", "db"),
}
"""Lower-case extension (no dot) -> (kind, description)."""

TEXT_KINDS: Final = frozenset({"text", "code"})
"""Kinds whose files are text (CSV and SVG are text too; see ``is_text_extension``)."""

_TEXT_EXTENSIONS: Final = frozenset(
    {e for e, (k, _) in EXTENSIONS.items() if k in TEXT_KINDS} | {"csv", "tsv", "svg", "eps", "ps"}
)

_ZIP_BASED: Final = frozenset(
    {"docx", "dotx", "xlsx", "pptx", "odt", "ods", "odp", "epub", "jar", "apk", "pages", "key"}
    | {"numbers"}
)


@dataclass(frozen=True)
class Signature:
    """A format recognised from a file's first bytes."""

    kind: str
    description: str
    extensions: frozenset[str]


def _sig(kind: str, description: str, *extensions: str) -> Signature:
    return Signature(kind, description, frozenset(extensions))


_MAGIC: Final[tuple[tuple[int, bytes, Signature], ...]] = (
    (0, b"%PDF-", _sig("document", "PDF document", "pdf")),
    (0, b"\x89PNG\r\n\x1a\n", _sig("image", "PNG image", "png")),
    (0, b"\xff\xd8\xff", _sig("image", "JPEG image", "jpg", "jpeg", "jfif")),
    (0, b"GIF87a", _sig("image", "GIF image", "gif")),
    (0, b"GIF89a", _sig("image", "GIF image", "gif")),
    (0, b"BM", _sig("image", "bitmap image", "bmp")),
    (0, b"II*\x00", _sig("image", "TIFF image", "tif", "tiff", "dng", "cr2", "nef", "arw")),
    (0, b"MM\x00*", _sig("image", "TIFF image", "tif", "tiff", "dng", "nef")),
    (0, b"8BPS", _sig("image", "Photoshop image", "psd")),
    (0, b"\x00\x00\x01\x00", _sig("image", "icon", "ico")),
    (0, b"ID3", _sig("audio", "MP3 audio", "mp3")),
    (0, b"fLaC", _sig("audio", "FLAC audio", "flac")),
    (0, b"OggS", _sig("audio", "Ogg audio or video", "ogg", "oga", "opus", "ogv")),
    (0, b"MThd", _sig("audio", "MIDI music", "mid", "midi")),
    (0, b"\x1aE\xdf\xa3", _sig("video", "Matroska/WebM video", "mkv", "webm")),
    (0, b"PK\x03\x04", _sig("archive", "ZIP archive", "zip")),
    (0, b"PK\x05\x06", _sig("archive", "ZIP archive (empty)", "zip")),
    (0, b"\x1f\x8b", _sig("archive", "gzip-compressed file", "gz", "tgz")),
    (0, b"BZh", _sig("archive", "bzip2-compressed file", "bz2", "tbz2")),
    (0, b"\xfd7zXZ\x00", _sig("archive", "xz-compressed file", "xz", "txz")),
    (0, b"(\xb5/\xfd", _sig("archive", "Zstandard-compressed file", "zst")),
    (0, b"7z\xbc\xaf'\x1c", _sig("archive", "7-Zip archive", "7z")),
    (0, b"Rar!\x1a\x07", _sig("archive", "RAR archive", "rar")),
    (257, b"ustar", _sig("archive", "tar archive", "tar")),
    (0, b"\x7fELF", _sig("program", "Linux/Unix program", "so", "appimage")),
    (0, b"MZ", _sig("program", "Windows program", "exe", "dll", "msi")),
    (0, b"\xcf\xfa\xed\xfe", _sig("program", "macOS program", "dylib")),
    (0, b"\xca\xfe\xba\xbe", _sig("program", "macOS or Java binary", "class", "dylib")),
    (0, b"\x00asm", _sig("program", "WebAssembly module", "wasm")),
    (0, b"SQLite format 3\x00", _sig("program", "SQLite database", "sqlite", "sqlite3", "db")),
    (0, b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", _sig("document", "Office 97-2003 file", "doc")),
    (0, b"{\\rtf", _sig("document", "Rich Text document", "rtf")),
    (0, b"%!PS", _sig("document", "PostScript document", "ps", "eps")),
    (0, b"!<arch>\n", _sig("program", "Debian package or static library", "deb", "a")),
    (0, b"\xed\xab\xee\xdb", _sig("program", "RPM package", "rpm")),
)

_OFFICE_SUBTYPES: Final = {"doc", "xls", "ppt", "msg", "msi"}


def extension_of(name: str) -> str:
    """The lower-case extension without the dot ('' when there is none)."""
    stem, dot, ext = name.rpartition(".")
    return ext.casefold() if dot and stem else ""


def kind_by_extension(name: str) -> tuple[str, str]:
    """(kind, description) from the name alone; unknown extensions are plain 'file'."""
    ext = extension_of(name)
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    return ("file", f".{ext} file" if ext else "file without an extension")


def is_text_extension(name: str) -> bool:
    return extension_of(name) in _TEXT_EXTENSIONS


def sniff(head: bytes, name: str) -> Signature | None:
    """The format named by the first bytes of a file, or None when they name none."""
    ext = extension_of(name)
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"heic", b"heix", b"mif1", b"msf1", b"avif"):
            return _sig("image", "HEIC/AVIF photo", "heic", "heif", "avif")
        if brand.startswith(b"M4A"):
            return _sig("audio", "AAC audio", "m4a")
        if brand == b"qt  ":
            return _sig("video", "QuickTime video", "mov")
        return _sig("video", "MP4 video", "mp4", "m4v", "m4a", "mov", "3gp")
    if head.startswith(b"RIFF") and len(head) >= 12:
        form = head[8:12]
        if form == b"WAVE":
            return _sig("audio", "WAV audio", "wav")
        if form == b"WEBP":
            return _sig("image", "WebP image", "webp")
        if form == b"AVI ":
            return _sig("video", "AVI video", "avi")
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0 and ext in ("mp3", "aac"):
        return _sig("audio", "MP3 audio", "mp3", "aac")
    for offset, magic, signature in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            if magic.startswith(b"PK") and ext in _ZIP_BASED:
                kind, description = EXTENSIONS[ext]
                return _sig(kind, f"{description} (ZIP-based)", ext)
            if magic.startswith(b"\xd0\xcf") and ext in _OFFICE_SUBTYPES:
                kind, description = EXTENSIONS.get(ext, ("document", "Office file"))
                return _sig(kind, f"{description} (Office 97-2003)", ext)
            return signature
    return None


@dataclass(frozen=True)
class Decoded:
    """File bytes decoded as text: the text, its encoding and how many characters were replaced."""

    text: str
    encoding: str
    replaced: int = 0


def decode_text(data: bytes, *, final: bool) -> Decoded | None:
    """Decode file bytes as text, or None when they look binary.

    UTF-16 needs its byte-order mark; otherwise UTF-8 (with or without a BOM), accepting up to
    ``MAX_REPLACED_RATIO`` of undecodable characters. ``final`` says whether ``data`` is the whole
    file (a multi-byte character cut by a partial read is then dropped, not replaced).
    """
    for bom, encoding in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            body = data[len(bom) :]
            body = body[: len(body) - len(body) % 2]
            try:
                return Decoded(body.decode(encoding), "utf-16")
            except UnicodeDecodeError:
                if final:
                    return None
            try:  # a partial read may end inside a surrogate pair
                return Decoded(body[:-2].decode(encoding), "utf-16")
            except UnicodeDecodeError:
                return None
    if b"\x00" in data[:SNIFF_BYTES]:
        return None
    encoding = "utf-8"
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
        encoding = "utf-8-sig"
    try:
        text = codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=final)
        return Decoded(text, encoding)
    except UnicodeDecodeError:
        pass
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=final)
    replaced = text.count("\ufffd")
    if replaced > MAX_REPLACED_RATIO * max(len(text), 1):
        return None
    return Decoded(text, encoding, replaced)
