"""Text that came from outside (file names, tool output) made safe to store, send and show.

Two kinds of character cause trouble. A lone surrogate is how Python keeps the bytes of a file
name that is not valid UTF-8 (an old Latin-1 name: ``os.fsdecode`` turns byte 0xE9 into
U+DCE9); it cannot be encoded as UTF-8, so SQLite, JSON-over-UTF-8, a terminal and the model's
tokenizer all reject it. :func:`readable` writes such a byte as ``\\xe9``. Control and
bidirectional-override characters (U+202E turns "exe.txt" into what looks like another name)
are not for a terminal to interpret: :func:`terminal_safe` writes them as escapes.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")

# C0/C1 controls except tab and newline, DEL, and the characters that reorder or hide text:
# bidi embeddings/overrides/isolates, marks, zero-width joiners and the BOM.
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069"
    "\ufeff\ud800-\udfff]"
)


def _surrogate(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8 (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def readable(text: str) -> str:
    """``text`` with every lone surrogate written as an escape (``\\xe9``): valid UTF-8."""
    return _SURROGATE.sub(_surrogate, text) if _SURROGATE.search(text) else text


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if 0xD800 <= code <= 0xDFFF:
        return _surrogate(match)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}"


def terminal_safe(text: str) -> str:
    """``text`` for a terminal: control, bidi-override and invisible characters as escapes
    (``\\u202e``), lone surrogates as ``\\xe9``; tabs and newlines kept."""
    if not _UNSAFE.search(text):
        return text
    return _UNSAFE.sub(_escape, text)
