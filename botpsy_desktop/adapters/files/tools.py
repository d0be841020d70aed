"""Read-only file tools: list a folder, find files by name, read a text file, all inside a jail."""

from __future__ import annotations

import codecs
import fnmatch
import os
import stat
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import BaseModel, Field, create_model

from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tool, make_tool

MAX_VISITED = 50_000
"""find_files stops after looking at this many entries."""

BINARY_SNIFF_BYTES = 8192
"""NUL bytes in this many leading bytes mark a file as binary."""

MAX_REPLACED_RATIO = 0.01
"""Text that is not valid UTF-8 is still shown if at most this share of characters is replaced."""

_GLOB_CHARS = frozenset("*?[")

_M = TypeVar("_M", bound=BaseModel)


class ListFolderArgs(BaseModel):
    """List the files and folders inside a folder on the user's computer, folders first.

    Example: {"path": "~/Documents"}. Use it to see what a folder contains before reading a file.
    """

    path: str = Field(
        "~",
        description='Folder to list, e.g. "~/Documents". "~" is the home folder.',
    )
    show_hidden: bool = Field(
        False, description="Also list hidden entries (names starting with '.'), e.g. false."
    )
    limit: int = Field(100, ge=1, le=1000, description="Most entries to return, e.g. 100.")


class FindFilesArgs(BaseModel):
    """Find files and folders by name inside a folder and its subfolders.

    Example: {"pattern": "*.pdf", "folder": "~/Documents"} or {"pattern": "invoice"}.
    Hidden files and folders are skipped unless the pattern starts with '.'.
    """

    pattern: str = Field(
        description='Part of the name (any case), e.g. "invoice", or a glob, e.g. "*.pdf".',
        min_length=1,
    )
    folder: str = Field(
        "~", description='Folder to search in, with its subfolders, e.g. "~/Documents".'
    )
    limit: int = Field(50, ge=1, le=1000, description="Most matches to return, e.g. 50.")
    max_depth: int = Field(
        6,
        ge=1,
        le=32,
        description="How deep to search: 1 = only that folder, 2 = also its subfolders, e.g. 6.",
    )


class ReadTextFileArgs(BaseModel):
    """Read a text file on the user's computer and return its text.

    Example: {"path": "~/Documents/notes.txt"}. Binary files (images, PDFs, programs) are refused.
    """

    path: str = Field(description='The file to read, e.g. "~/Documents/notes.txt".')
    max_chars: int = Field(
        20_000, ge=1, le=1_000_000, description="Most characters of text to return, e.g. 20000."
    )


def files_tools(
    roots: Sequence[Path], max_read_bytes: int = 200_000, *, max_visited: int = MAX_VISITED
) -> list[Tool]:
    """The read-only file tools, confined to ``roots``.

    ``read_text_file`` reads at most ``max_read_bytes`` of a file; ``find_files`` looks at no
    more than ``max_visited`` entries.
    """
    if max_read_bytes < 1 or max_visited < 1:
        raise ValueError("max_read_bytes and max_visited must be positive")
    jail = FolderJail(roots)
    start = jail.default_folder()

    def list_folder(args: ListFolderArgs) -> dict[str, Any]:
        return _list_folder(jail, args)

    def find_files(args: FindFilesArgs) -> dict[str, Any]:
        return _find_files(jail, args, max_visited)

    def read_text_file(args: ReadTextFileArgs) -> dict[str, Any]:
        return _read_text_file(jail, args, max_read_bytes)

    tools = [
        make_tool(list_folder, effects={Effect.READ}),
        make_tool(find_files, effects={Effect.READ}),
        make_tool(read_text_file, effects={Effect.READ}),
    ]
    if start != "~":
        tools[0] = replace(tools[0], args_model=_with_default(ListFolderArgs, "path", start))
        tools[1] = replace(tools[1], args_model=_with_default(FindFilesArgs, "folder", start))
    return tools


def _with_default(model: type[_M], field: str, value: str) -> type[_M]:
    """A subclass of ``model`` whose ``field`` defaults to ``value`` (the first allowed folder)."""
    info = model.model_fields[field]
    fields: dict[str, Any] = {field: (str, Field(value, description=info.description))}
    sub = create_model(model.__name__, __base__=model, __doc__=model.__doc__, **fields)
    return cast("type[_M]", sub)


# --- list_folder ---------------------------------------------------------------------------


def _list_folder(jail: FolderJail, args: ListFolderArgs) -> dict[str, Any]:
    folder = _resolve_folder(jail, args.path)
    shown_folder = jail.display(folder)
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError as exc:
        raise ToolError(f"Cannot open the folder {shown_folder}: {_reason(exc)}.") from exc
    hidden = 0
    visible: list[os.DirEntry[str]] = []
    for entry in entries:
        if not args.show_hidden and _is_hidden(entry):
            hidden += 1
        else:
            visible.append(entry)
    visible.sort(key=lambda e: (not _is_real_dir(e), e.name.casefold(), e.name))
    shown = visible[: args.limit]
    result: dict[str, Any] = {
        "folder": shown_folder,
        "entries": [_describe_entry(jail, e) for e in shown],
        "total": len(visible),
        "truncated": len(visible) > len(shown),
    }
    if hidden:
        result["hidden_not_shown"] = hidden
    if result["truncated"]:
        result["note"] = (
            f"Only the first {len(shown)} of {len(visible)} entries are shown; "
            "use find_files to look for a name or raise limit."
        )
    return result


def _describe_entry(jail: FolderJail, entry: os.DirEntry[str]) -> dict[str, Any]:
    """Name, kind, size and modified time of an entry; symlinks are described, never followed."""
    info: dict[str, Any] = {"name": entry.name}
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        info["kind"] = "unknown"
        return info
    if stat.S_ISLNK(st.st_mode):
        info["kind"] = "link"
        info["points_to"] = _link_target(jail, Path(entry.path))
    elif stat.S_ISDIR(st.st_mode):
        info["kind"] = "folder"
    else:
        info["kind"] = "file"
        info["size"] = st.st_size
    info["modified"] = _iso(st.st_mtime)
    return info


def _link_target(jail: FolderJail, link: Path) -> str:
    """Where a symlink leads, shown only when the target is inside the jail."""
    target = Path(os.path.realpath(link))
    if not jail.contains(target):
        return "somewhere outside the folders you may read"
    if not target.exists():
        return "nothing (broken link)"
    return jail.display(target)


# --- find_files ----------------------------------------------------------------------------


def _find_files(jail: FolderJail, args: FindFilesArgs, max_visited: int) -> dict[str, Any]:
    pattern = args.pattern.strip()
    if not pattern:
        raise ToolError("The pattern is empty.", 'Give part of a name, e.g. "invoice", or "*.pdf".')
    if "/" in pattern or os.sep in pattern:
        raise ToolError(
            f"The pattern {pattern!r} contains a folder separator; patterns match names only.",
            'Put the folder in "folder" and only the name in "pattern", e.g. "*.pdf".',
        )
    folder = _resolve_folder(jail, args.folder)
    matches_name = _name_matcher(pattern)
    include_hidden = pattern.startswith(".")

    matches: list[dict[str, Any]] = []
    visited = 0
    unreadable = 0
    stopped = False
    queue: deque[tuple[Path, int]] = deque([(folder, 1)])
    while queue and not stopped:
        current, depth = queue.popleft()
        try:
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            unreadable += 1
            continue
        for entry in entries:
            if visited >= max_visited:
                stopped = True
                break
            visited += 1
            if not include_hidden and _is_hidden(entry):
                continue
            if matches_name(entry.name):
                found = _describe_entry(jail, entry)
                found.pop("name")
                matches.append({"path": jail.display(Path(entry.path)), **found})
                if len(matches) >= args.limit:
                    stopped = True
                    break
            if depth < args.max_depth and _is_real_dir(entry):
                queue.append((Path(entry.path), depth + 1))

    result: dict[str, Any] = {
        "folder": jail.display(folder),
        "pattern": pattern,
        "matches": matches,
        "count": len(matches),
        "truncated": stopped,
    }
    if len(matches) >= args.limit:
        result["note"] = f"Stopped after {args.limit} matches; there may be more."
    elif stopped:
        result["note"] = (
            f"Stopped after looking at {max_visited:,} entries without finishing; "
            "search a smaller folder or use a more precise pattern."
        )
    if unreadable:
        result["unreadable_folders"] = unreadable
    return result


def _name_matcher(pattern: str) -> Callable[[str], bool]:
    """A case-insensitive test of a name against a substring or a glob."""
    folded = pattern.casefold()
    if _GLOB_CHARS.intersection(pattern):

        def glob(name: str) -> bool:
            return fnmatch.fnmatchcase(name.casefold(), folded)

        return glob

    def substring(name: str) -> bool:
        return folded in name.casefold()

    return substring


# --- read_text_file ------------------------------------------------------------------------


def _read_text_file(
    jail: FolderJail, args: ReadTextFileArgs, max_read_bytes: int
) -> dict[str, Any]:
    path = jail.resolve(args.path)
    shown = jail.display(path)
    if path.is_dir():
        raise ToolError(
            f"{shown} is a folder, not a file.", "Use list_folder to see what is inside it."
        )
    flags = (
        os.O_RDONLY
        | getattr(os, "O_BINARY", 0)
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
    )
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ToolError(f"Cannot open {shown}: {_reason(exc)}.") from exc
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"{shown} is not a regular file; only ordinary files can be read.")
        try:
            data = fh.read(max_read_bytes)
        except OSError as exc:
            raise ToolError(f"Cannot read {shown}: {_reason(exc)}.") from exc
    size = st.st_size
    cut_bytes = size > len(data)
    text, replaced = _decode(data, final=not cut_bytes, shown=shown, size=size)
    cut_chars = len(text) > args.max_chars
    if cut_chars:
        text = text[: args.max_chars]
    result: dict[str, Any] = {
        "path": shown,
        "size": size,
        "text": text,
        "truncated": cut_bytes or cut_chars,
    }
    if cut_bytes or cut_chars:
        result["note"] = (
            f"Only the first {len(text):,} characters are shown; the file is longer "
            f"({size:,} bytes)."
        )
    if replaced:
        result["replaced_characters"] = replaced
    return result


def _decode(data: bytes, *, final: bool, shown: str, size: int) -> tuple[str, int]:
    """Decode file bytes as text; return the text and how many characters were replaced."""
    binary = ToolError(
        f"This looks like a binary file ({shown}, {size:,} bytes); it cannot be read as text."
    )
    for bom, encoding in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            body = data[len(bom) :]
            if len(body) % 2:
                body = body[:-1]
            try:
                return body.decode(encoding), 0
            except UnicodeDecodeError:
                raise binary from None
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        raise binary
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8) :]
    try:
        return codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=final), 0
    except UnicodeDecodeError:
        pass
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=final)
    replaced = text.count("\ufffd")
    if replaced > MAX_REPLACED_RATIO * max(len(text), 1):
        raise binary
    return text, replaced


# --- shared --------------------------------------------------------------------------------


def _resolve_folder(jail: FolderJail, user_path: str) -> Path:
    """Resolve a folder argument; an empty one means the default folder."""
    folder = jail.resolve(user_path.strip() or jail.default_folder())
    if not folder.is_dir():
        raise ToolError(
            f"{jail.display(folder)} is a file, not a folder.", "Use read_text_file to read it."
        )
    return folder


def _is_real_dir(entry: os.DirEntry[str]) -> bool:
    """A folder that is not a symlink (symlinked folders are never entered)."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _is_hidden(entry: os.DirEntry[str]) -> bool:
    if entry.name.startswith("."):
        return True
    attributes = getattr(stat, "FILE_ATTRIBUTE_HIDDEN", 0)
    if not attributes:
        return False
    try:
        return bool(
            getattr(entry.stat(follow_symlinks=False), "st_file_attributes", 0) & attributes
        )
    except OSError:
        return False


def _iso(timestamp: float) -> str:
    """A modification time as local ISO-8601 with the UTC offset, to the second."""
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="seconds")


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).lower()
