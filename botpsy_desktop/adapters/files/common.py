"""Helpers shared by the file tools: entry kinds, safe opening, walking, times and messages."""

from __future__ import annotations

import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.core.errors import ToolError

SPECIAL_KINDS = {
    "device": "a device file",
    "pipe": "a named pipe (FIFO)",
    "socket": "a socket",
}
"""Entries that are never opened, moved or trashed, with how messages name them."""


def kind_of_mode(mode: int) -> str:
    """file, folder, link, device, pipe, socket or unknown, from an ``lstat`` mode."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISFIFO(mode):
        return "pipe"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "unknown"


def refuse_special(jail: FolderJail, path: Path, st: os.stat_result | None = None) -> None:
    """Raise ToolError for device files, FIFOs and sockets (and anything unrecognised)."""
    if st is None:
        try:
            st = os.lstat(path)
        except OSError as exc:
            raise ToolError(f"Cannot look at {jail.display(path)}: {reason(exc)}.") from exc
    kind = kind_of_mode(st.st_mode)
    if kind in SPECIAL_KINDS or kind == "unknown":
        what = SPECIAL_KINDS.get(kind, "not an ordinary file or folder")
        raise ToolError(
            f"{jail.display(path)} is {what}; the assistant never opens, moves or removes those."
        )


def open_regular(jail: FolderJail, path: Path) -> IO[bytes]:
    """Open an ordinary file for reading without following a final symlink or blocking."""
    shown = jail.display(path)
    refuse_special(jail, path)
    flags = (
        os.O_RDONLY
        | getattr(os, "O_BINARY", 0)
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
    )
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ToolError(f"Cannot open {shown}: {reason(exc)}.") from exc
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
        fh.close()
        raise ToolError(f"{shown} is not a regular file; only ordinary files can be read.")
    return fh


def resolve_folder(jail: FolderJail, user_path: str) -> Path:
    """Resolve a folder argument; an empty one means the default folder."""
    folder = jail.resolve(user_path.strip() or jail.default_folder())
    if not folder.is_dir():
        raise ToolError(
            f"{jail.display(folder)} is a file, not a folder.", "Use read_text_file to read it."
        )
    return folder


def is_real_dir(entry: os.DirEntry[str]) -> bool:
    """A folder that is not a symlink (symlinked folders are never entered)."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def is_hidden(entry: os.DirEntry[str]) -> bool:
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


def describe_entry(jail: FolderJail, entry: os.DirEntry[str]) -> dict[str, Any]:
    """Name, kind, size and modified time of an entry; symlinks are described, never followed."""
    info: dict[str, Any] = {"name": entry.name}
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        info["kind"] = "unknown"
        return info
    kind = kind_of_mode(st.st_mode)
    if kind == "link":
        info["kind"] = "link"
        info["points_to"] = link_target(jail, Path(entry.path))
    elif kind in ("folder", "file"):
        info["kind"] = kind
        if kind == "file":
            info["size"] = st.st_size
    else:
        info["kind"] = "special"
        info["special"] = SPECIAL_KINDS.get(kind, "not an ordinary file")
    info["modified"] = iso(st.st_mtime)
    return info


def link_target(jail: FolderJail, link: Path) -> str:
    """Where a symlink leads, shown only when the target is inside the jail."""
    target = Path(os.path.realpath(link))
    if not jail.contains(target):
        return "somewhere outside the folders you may use"
    if not target.exists():
        return "nothing (broken link)"
    return jail.display(target)


@dataclass
class WalkStats:
    """What a bounded walk saw: entries looked at, unreadable folders, and whether it stopped."""

    visited: int = 0
    unreadable: int = 0
    stopped: bool = False


def walk(
    folder: Path, *, max_depth: int, max_visited: int, include_hidden: bool, stats: WalkStats
) -> Iterator[tuple[os.DirEntry[str], int]]:
    """Breadth-first entries under ``folder`` in name order, never entering symlinked folders.

    Stops (setting ``stats.stopped``) after ``max_visited`` entries; the caller may also stop
    early by setting it.
    """
    queue: deque[tuple[Path, int]] = deque([(folder, 1)])
    while queue and not stats.stopped:
        current, depth = queue.popleft()
        try:
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            stats.unreadable += 1
            continue
        for entry in entries:
            if stats.stopped:
                return
            if stats.visited >= max_visited:
                stats.stopped = True
                return
            stats.visited += 1
            if not include_hidden and is_hidden(entry):
                continue
            yield entry, depth
            if depth < max_depth and is_real_dir(entry):
                queue.append((Path(entry.path), depth + 1))


def iso(timestamp: float) -> str:
    """A time as local ISO-8601 with the UTC offset, to the second."""
    return datetime.fromtimestamp(timestamp).astimezone().isoformat(timespec="seconds")


def reason(exc: OSError) -> str:
    """An OSError as a short lower-case phrase, e.g. "permission denied"."""
    return (exc.strerror or str(exc)).lower()
