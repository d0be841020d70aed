"""Read-only tools that look inside files: search text in a folder, describe one file."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.files.common import (
    WalkStats,
    iso,
    kind_of_mode,
    open_regular,
    reason,
    refuse_special,
    resolve_folder,
    walk,
)
from botpsy_desktop.adapters.files.filters import format_size
from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.adapters.files.kinds import (
    SNIFF_BYTES,
    decode_text,
    extension_of,
    is_text_extension,
    kind_by_extension,
    sniff,
)
from botpsy_desktop.core.errors import ToolError

MAX_LINE_CHARS: Final = 200
"""A matching line longer than this is clipped around the match."""

MAX_MATCHES_PER_FILE: Final = 5
"""search_text shows at most this many lines of one file."""

MAX_SEARCH_TOTAL_BYTES: Final = 100_000_000
"""search_text stops after reading this many bytes in one call."""

MAX_COUNT_LINES_BYTES: Final = 64_000_000
"""file_info counts the lines of text files up to this size."""

MAX_FOLDER_ENTRIES: Final = 10_000
"""file_info counts at most this many entries of a folder."""

_NEVER_TEXT_KINDS: Final = frozenset({"image", "audio", "video", "archive", "program"})
_BINARY_DOCUMENTS: Final = frozenset(
    {"pdf", "doc", "docx", "dotx", "odt", "epub", "mobi", "azw3", "pages"}
    | {"xls", "xlsx", "ods", "numbers", "ppt", "pptx", "odp", "key"}
)
_TEXT_SIGNATURES: Final = frozenset({"rtf", "ps", "eps"})


class SearchTextArgs(BaseModel):
    """Search the text files of a folder and its subfolders for a word or phrase (any case).

    Returns each matching file, line number and line; PDFs and images are skipped.
    """

    phrase: str = Field(description='e.g. "dentist" or "total due".', min_length=1)
    folder: str = Field("~", description='Folder to search, e.g. "~/Documents".')
    pattern: str = Field("*", description='Only files whose name matches this glob, e.g. "*.md".')
    limit: int = Field(30, ge=1, le=200, description="Most matching lines to return.")
    max_depth: int = Field(6, ge=1, le=32, description="1: only that folder; 2: and subfolders...")


class FileInfoArgs(BaseModel):
    """Describe a file or folder: size, dates, real type (from its content), lines of text; for
    a folder, how many files and folders it holds."""

    path: str = Field(description='e.g. "~/Documents/report.pdf".')


# --- search_text ---------------------------------------------------------------------------


def search_text(
    jail: FolderJail, args: SearchTextArgs, *, max_visited: int, max_file_bytes: int
) -> dict[str, Any]:
    """Lines containing the phrase, bounded in files, bytes, lines per file and line length."""
    phrase = args.phrase.strip()
    if not phrase:
        raise ToolError("The phrase is empty.", 'Give the words to look for, e.g. "dentist".')
    if "\n" in phrase:
        raise ToolError("The phrase spans several lines; lines are searched one at a time.")
    pattern = args.pattern.strip() or "*"
    if "/" in pattern or os.sep in pattern:
        raise ToolError(
            f"The pattern {pattern!r} contains a folder separator; patterns match names only.",
            'Put the folder in "folder" and only the name in "pattern", e.g. "*.md".',
        )
    folder = resolve_folder(jail, args.folder)
    needle = re.compile(re.escape(phrase), re.IGNORECASE)
    glob = pattern.casefold()

    matches: list[dict[str, Any]] = []
    files_matched = 0
    searched = 0
    skipped = {"binary": 0, "too_large": 0, "unreadable": 0}
    more_lines = 0
    total_bytes = 0
    bytes_bound = False
    stats = WalkStats()
    for entry, _depth in walk(
        folder,
        max_depth=args.max_depth,
        max_visited=max_visited,
        include_hidden=pattern.startswith("."),
        stats=stats,
    ):
        if not entry.is_file(follow_symlinks=False):
            continue
        if not fnmatch.fnmatchcase(entry.name.casefold(), glob):
            continue
        ext = extension_of(entry.name)
        kind = kind_by_extension(entry.name)[0]
        if (kind in _NEVER_TEXT_KINDS or ext in _BINARY_DOCUMENTS) and not is_text_extension(
            entry.name
        ):
            skipped["binary"] += 1
            continue
        try:
            size = entry.stat(follow_symlinks=False).st_size
        except OSError:
            skipped["unreadable"] += 1
            continue
        if size > max_file_bytes:
            skipped["too_large"] += 1
            continue
        if total_bytes + size > MAX_SEARCH_TOTAL_BYTES:
            bytes_bound = stats.stopped = True
            break
        total_bytes += size
        path = Path(entry.path)
        try:
            with open_regular(jail, path) as fh:
                data = fh.read(max_file_bytes + 1)
        except (ToolError, OSError):
            skipped["unreadable"] += 1
            continue
        decoded = decode_text(data, final=True)
        if decoded is None:
            skipped["binary"] += 1
            continue
        searched += 1
        shown_in_file = 0
        for number, line in enumerate(decoded.text.splitlines(), start=1):
            found = needle.search(line)
            if found is None:
                continue
            if shown_in_file == 0:
                files_matched += 1
            if shown_in_file >= MAX_MATCHES_PER_FILE or len(matches) >= args.limit:
                more_lines += 1
                continue
            shown_in_file += 1
            matches.append(
                {"path": jail.display(path), "line": number, "text": _clip(line, found.start())}
            )
        if len(matches) >= args.limit and more_lines:
            stats.stopped = True
            break

    result: dict[str, Any] = {
        "folder": jail.display(folder),
        "phrase": phrase,
        "matches": matches,
        "count": len(matches),
        "files_matched": files_matched,
        "files_searched": searched,
        "truncated": stats.stopped or more_lines > 0,
    }
    if pattern != "*":
        result["pattern"] = pattern
    skipped = {k: v for k, v in skipped.items() if v}
    if skipped:
        result["skipped"] = skipped
    notes: list[str] = []
    if more_lines:
        notes.append(
            f"{more_lines} more matching line(s) not shown (at most {MAX_MATCHES_PER_FILE} per "
            f"file and {args.limit} in all); search a smaller folder or a more precise phrase."
        )
    if bytes_bound:
        notes.append(
            f"Stopped after reading {format_size(MAX_SEARCH_TOTAL_BYTES)}; search a smaller folder."
        )
    elif stats.stopped and not more_lines:
        notes.append(f"Stopped after looking at {max_visited:,} entries; search a smaller folder.")
    if skipped.get("too_large"):
        notes.append(f"Files over {format_size(max_file_bytes)} were skipped.")
    if notes:
        result["note"] = " ".join(notes)
    if stats.unreadable:
        result["unreadable_folders"] = stats.unreadable
    return result


def _clip(line: str, at: int) -> str:
    """The line, or the part of it around position ``at`` if it is long."""
    line = line.rstrip()
    if len(line) <= MAX_LINE_CHARS:
        return line.strip()
    start = max(0, min(at - MAX_LINE_CHARS // 3, len(line) - MAX_LINE_CHARS))
    end = start + MAX_LINE_CHARS
    clipped = line[start:end].strip()
    return ("…" if start > 0 else "") + clipped + ("…" if end < len(line) else "")


# --- file_info -----------------------------------------------------------------------------


def file_info(jail: FolderJail, args: FileInfoArgs) -> dict[str, Any]:
    """Size, dates and type of a file (by name and by content), or the contents of a folder."""
    path = jail.resolve(args.path)
    entry = jail.resolve_entry(args.path)
    shown = jail.display(path)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise ToolError(f"Cannot look at {shown}: {reason(exc)}.") from exc
    refuse_special(jail, path, st)
    result: dict[str, Any] = {"path": shown}
    if entry != path and kind_of_mode(os.lstat(entry).st_mode) == "link":
        result["reached_through_link"] = jail.display(entry)
    result["kind"] = kind_of_mode(st.st_mode)
    result["modified"] = iso(st.st_mtime)
    birth = getattr(st, "st_birthtime", None)
    if isinstance(birth, int | float) and birth > 0:
        result["created"] = iso(birth)
    result["accessed"] = iso(st.st_atime)
    if result["kind"] == "folder":
        result.update(_folder_contents(jail, path))
        return result
    result.update(_file_type(jail, path, st.st_size))
    return result


def _folder_contents(jail: FolderJail, folder: Path) -> dict[str, Any]:
    counts = {"files": 0, "folders": 0, "links": 0, "other": 0, "hidden": 0}
    try:
        with os.scandir(folder) as it:
            for n, item in enumerate(it):
                if n >= MAX_FOLDER_ENTRIES:
                    return {"contains": counts, "note": f"Counted the first {n:,} entries only."}
                try:
                    kind = kind_of_mode(item.stat(follow_symlinks=False).st_mode)
                except OSError:
                    kind = "unknown"
                key = {"file": "files", "folder": "folders", "link": "links"}.get(kind, "other")
                counts[key] += 1
                if item.name.startswith("."):
                    counts["hidden"] += 1
    except OSError as exc:
        raise ToolError(f"Cannot open the folder {jail.display(folder)}: {reason(exc)}.") from exc
    return {"contains": {k: v for k, v in counts.items() if v or k in ("files", "folders")}}


def _file_type(jail: FolderJail, path: Path, size: int) -> dict[str, Any]:
    kind, description = kind_by_extension(path.name)
    info: dict[str, Any] = {"size": size, "size_text": format_size(size)}
    with open_regular(jail, path) as fh:
        try:
            head = fh.read(SNIFF_BYTES)
        except OSError as exc:
            raise ToolError(f"Cannot read {jail.display(path)}: {reason(exc)}.") from exc
        signature = sniff(head, path.name)
        decoded = decode_text(head, final=len(head) >= size)
        is_text = decoded is not None and (
            signature is None or bool(signature.extensions & _TEXT_SIGNATURES)
        )
        ext = extension_of(path.name)
        if signature is not None:
            info["type"] = signature.description
            info["category"] = signature.kind
            info["detected_from"] = "content"
            if ext and ext not in signature.extensions:
                info["warning"] = (
                    f"The name says {description} (.{ext}) but the content is "
                    f"{signature.description}; treat it with care."
                )
        elif is_text:
            info["type"] = description if kind in ("text", "code") else "text file"
            info["category"] = kind if kind in ("text", "code", "spreadsheet") else "text"
            info["detected_from"] = "content"
        else:
            info["type"] = description
            info["category"] = kind
            info["detected_from"] = "name"
        if ext:
            info["extension"] = ext
        info["text"] = is_text
        if not is_text or decoded is None:
            info["note"] = "Binary file: read_text_file cannot show it."
            return info
        info["encoding"] = decoded.encoding
        if size > MAX_COUNT_LINES_BYTES:
            info["note"] = (
                f"Too large to count its lines (over {format_size(MAX_COUNT_LINES_BYTES)})."
            )
            return info
        info["lines"] = _count_lines(fh, head, decoded.encoding)
    return info


def _count_lines(fh: Any, head: bytes, encoding: str) -> int:
    """Lines in a text file whose first bytes ``head`` were read already from ``fh``."""
    if encoding == "utf-16":
        data = head + fh.read()
        text = data.decode("utf-16", errors="replace")
        return len(text.splitlines())
    count = head.count(b"\n")
    last = head[-1:]
    while chunk := fh.read(1 << 20):
        count += chunk.count(b"\n")
        last = chunk[-1:]
    return count + (1 if last and last != b"\n" else 0)
