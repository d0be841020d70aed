"""The file tools, confined to the configured folders: list, find, read, search, inspect, change."""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import BaseModel, Field, create_model

from botpsy_desktop.adapters.files.actionlog import ActionLog
from botpsy_desktop.adapters.files.changes import (
    CreateFolderArgs,
    FileChanges,
    MoveToTrashArgs,
    RenameOrMoveArgs,
    UndoArgs,
    WriteTextNoteArgs,
)
from botpsy_desktop.adapters.files.common import (
    WalkStats,
    describe_entry,
    is_hidden,
    is_real_dir,
    open_regular,
    reason,
    resolve_folder,
    walk,
)
from botpsy_desktop.adapters.files.examine import (
    FileInfoArgs,
    SearchTextArgs,
    file_info,
    search_text,
)
from botpsy_desktop.adapters.files.filters import format_size, parse_size, parse_when
from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.adapters.files.kinds import (
    KINDS,
    Kind,
    decode_text,
    extension_of,
    kind_by_extension,
)
from botpsy_desktop.adapters.files.trash import Trash, system_trash
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.text import readable
from botpsy_desktop.core.tools import (
    Effect,
    Inverse,
    OutcomeRule,
    Resolved,
    Tier,
    Tool,
    make_tool,
)

MAX_VISITED = 50_000
"""find_files and search_text stop after looking at this many entries."""

MAX_SEARCH_BYTES = 2_000_000
"""search_text skips text files larger than this."""

ACTION_LOG_NAME = "files-actions.jsonl"
"""The action log's file name in the data folder."""

_GLOB_CHARS = frozenset("*?[")

_M = TypeVar("_M", bound=BaseModel)

Clock = Callable[[], datetime]


class ListFolderArgs(BaseModel):
    """List the files and folders in a folder on the user's computer."""

    path: str = Field(
        "~",
        description='Folder to list, e.g. "~/Documents". "~" is the home folder.',
    )
    show_hidden: bool = Field(
        False, description="Also list hidden entries (names starting with '.')."
    )
    limit: int = Field(100, ge=1, le=1000, description="Most entries to return.")


class FindFilesArgs(BaseModel):
    """Find files and folders in a folder and its subfolders by name, kind, size or date.

    Every filter given must match.
    """

    pattern: str = Field(
        "*",
        description='Part of the name, e.g. "invoice", or a glob, e.g. "*.pdf".',
    )
    folder: str = Field("~", description='Folder to search, e.g. "~/Documents".')
    kind: Kind | None = Field(None, description='Only this kind; "file": any file.')
    extensions: str | None = Field(None, description='Comma-separated, e.g. "pdf" or "jpg, png".')
    min_size: str | None = Field(None, description='e.g. "10 MB".')
    max_size: str | None = Field(None, description='e.g. "500 KB".')
    modified_after: str | None = Field(
        None, description='Changed on or after, e.g. "last week", "2025-01-01".'
    )
    modified_before: str | None = Field(None, description='Changed before, e.g. "yesterday".')
    limit: int = Field(50, ge=1, le=1000, description="Most matches to return.")
    max_depth: int = Field(6, ge=1, le=32, description="1: only that folder; 2: and subfolders...")


class ReadTextFileArgs(BaseModel):
    """Read a text file (not PDFs, images or programs)."""

    path: str = Field(description='e.g. "~/Documents/notes.txt".')
    max_chars: int = Field(20_000, ge=1, le=1_000_000, description="Most characters to return.")


def files_tools(
    roots: Sequence[Path],
    max_read_bytes: int = 200_000,
    *,
    max_visited: int = MAX_VISITED,
    max_search_bytes: int = MAX_SEARCH_BYTES,
    data_dir: Path | None = None,
    trash: Trash | None = None,
    now: Clock | None = None,
) -> list[Tool]:
    """The file tools, confined to ``roots``.

    Read-only tools always: list_folder, find_files, read_text_file, search_text, file_info.
    With ``data_dir`` (where the action log lives) also the tools that change files:
    create_folder, write_text_note, rename_or_move, move_to_trash (into ``trash``, by default the
    system trash) and undo_last_file_change. ``read_text_file`` reads at most ``max_read_bytes``
    of a file, ``search_text`` skips files over ``max_search_bytes``; walks look at no more than
    ``max_visited`` entries. ``now`` (local, aware) resolves dates like "last week".
    """
    if max_read_bytes < 1 or max_visited < 1 or max_search_bytes < 1:
        raise ValueError("max_read_bytes, max_visited and max_search_bytes must be positive")
    jail = FolderJail(roots)
    start = jail.default_folder()
    clock: Clock = now or (lambda: datetime.now().astimezone())

    def list_folder(args: ListFolderArgs) -> dict[str, Any]:
        return _list_folder(jail, args)

    def find_files(args: FindFilesArgs) -> dict[str, Any]:
        return _find_files(jail, args, max_visited, clock)

    def read_text_file(args: ReadTextFileArgs) -> dict[str, Any]:
        return _read_text_file(jail, args, max_read_bytes)

    def search_text_(args: SearchTextArgs) -> dict[str, Any]:
        return search_text(jail, args, max_visited=max_visited, max_file_bytes=max_search_bytes)

    def file_info_(args: FileInfoArgs) -> dict[str, Any]:
        return file_info(jail, args)

    tools = [
        make_tool(list_folder, effects={Effect.READ}, tier=Tier.READ),
        make_tool(find_files, effects={Effect.READ}, tier=Tier.READ),
        make_tool(read_text_file, effects={Effect.READ}, tier=Tier.READ),
        make_tool(search_text_, effects={Effect.READ}, name="search_text", tier=Tier.READ),
        make_tool(file_info_, effects={Effect.READ}, name="file_info", tier=Tier.READ),
    ]
    if data_dir is not None:
        changes = FileChanges(
            jail, ActionLog(data_dir / ACTION_LOG_NAME, clock), trash or system_trash()
        )

        def create_folder(args: CreateFolderArgs) -> dict[str, Any]:
            return changes.create_folder(args)

        def write_text_note(args: WriteTextNoteArgs) -> dict[str, Any]:
            return changes.write_text_note(args)

        def rename_or_move(args: RenameOrMoveArgs) -> dict[str, Any]:
            return changes.rename_or_move(args)

        def move_to_trash(args: MoveToTrashArgs) -> dict[str, Any]:
            return changes.move_to_trash(args)

        def undo_last_file_change(args: UndoArgs) -> dict[str, Any]:
            return changes.undo_last_file_change(args)

        def entry(key: str) -> Callable[[Mapping[str, Any]], list[Resolved]]:
            """The file or folder a call names (resolved inside the allowed folders)."""

            def rule(arguments: Mapping[str, Any]) -> list[Resolved]:
                return [resolve_entry(jail, str(arguments.get(key) or ""))]

            return rule

        local, rev = {Effect.LOCAL_WRITE}, Tier.REVERSIBLE
        tools += [
            make_tool(
                create_folder,
                effects=local,
                tier=rev,
                targets=("path",),
                inverse=_undo_file_change,
                outcome=_outcome(changes, "create_folder"),
                summary=lambda a: f"Create the folder {a.get('path')}",
                untrusted_output=False,  # it confirms its own arguments
            ),
            make_tool(
                write_text_note,
                effects=local,
                tier=rev,
                targets=("path",),
                inverse=_undo_file_change,
                outcome=_outcome(changes, "write_text_note"),
                summary=_s_note,
                untrusted_output=False,
            ),
            # inside the allowed folders only (the jail): a rename or move is undone by moving
            # back; its tier is decided from where the entry really ends up (_move_tier)
            make_tool(
                rename_or_move,
                effects=local,
                tier=_move_tier(changes),
                targets=("source", "destination"),
                inverse=_undo_file_change,
                outcome=_outcome(changes, "rename_or_move"),
                summary=_move_summary(changes),
                untrusted_output=False,
                resolve=entry("source"),
            ),
            make_tool(
                move_to_trash,
                effects={Effect.DESTRUCTIVE},
                tier=Tier.ASK,
                targets=("path",),
                summary=lambda a: f"Move {a.get('path')} to the trash",
                resolve=entry("path"),
            ),
            # reverses an earlier change that may be the user's own: asks, like a deletion
            make_tool(
                undo_last_file_change,
                effects=local,
                tier=Tier.ASK,
                summary=lambda a: (
                    f"Undo the assistant's change {a['change']} to your files"
                    if a.get("change")
                    else "Undo the assistant's last change to your files"
                ),
            ),
        ]
    if start != "~":
        for i, tool in enumerate(tools):
            for field in ("path", "folder"):
                info = tool.args_model.model_fields.get(field)
                if info is not None and info.default == "~":
                    model = _with_default(tool.args_model, field, start)
                    tools[i] = replace(tool, args_model=model)
    return tools


def _out_of_sight(changes: FileChanges, source: Path, target: Path) -> str:
    """Why ``target`` hides what is moved there ('' when it does not): a hidden or cache
    folder (or a hidden name) that the source was not in already."""
    common = Path(os.path.commonpath([source.parent, target]))
    for part in target.relative_to(common).parts:
        low = part.casefold()
        if part.startswith("."):
            return f"into the hidden folder or name {part!r}, out of sight in the file manager"
        if "cache" in low or low in ("tmp", "temp"):
            return f"into {part!r}, a cache or temporary folder whose contents get cleared"
    return ""


def _move_tier(changes: FileChanges) -> Callable[[Mapping[str, Any]], Tier]:
    """A rename or move's tier from where the entry really ends up, not from its words: into a
    hidden or cache folder (or under a hidden name) asks; the trash folder, outside the allowed
    folders or over an existing file is refused by the tool itself (nothing happens); elsewhere
    inside the allowed folders it is reversible (Undo moves it back)."""

    def rule(arguments: Mapping[str, Any]) -> Tier:
        """asks when the entry would end up in a hidden or cache folder (or under a hidden
        name); into the trash folder, outside the allowed folders or over an existing file it
        is refused"""
        try:
            source, target = changes.where_moved(
                str(arguments.get("source") or ""), str(arguments.get("destination") or "")
            )
        except ToolError:
            return Tier.REVERSIBLE  # refused by the tool: nothing would change
        return Tier.ASK if _out_of_sight(changes, source, target) else Tier.REVERSIBLE

    return rule


def _move_summary(changes: FileChanges) -> Callable[[Mapping[str, Any]], str]:
    """The move in the call's words, with where the entry really ends up when that is not
    what the words say (into a folder), out of sight, or refused."""

    def summary(a: Mapping[str, Any]) -> str:
        source_text, dest_text = str(a.get("source") or ""), str(a.get("destination") or "")
        words = f"Move {source_text} to {dest_text}"
        try:
            source, target = changes.where_moved(source_text, dest_text)
        except ToolError as exc:
            return f"{words} (it would be refused: {exc.message})"
        if target.name != Path(dest_text.rstrip("/")).name:
            words += f" (it becomes {changes.jail.display(target)})"
        hidden = _out_of_sight(changes, source, target)
        return f"{words}, {hidden}" if hidden else words

    return summary


def _outcome(changes: FileChanges, tool: str) -> OutcomeRule:
    """How a call of ``tool`` ended, from the action log (FileChanges.outcome)."""

    def rule(call_id: str, arguments: Mapping[str, Any]) -> Any:
        return changes.outcome(tool, call_id, arguments)

    return rule


def resolve_entry(jail: FolderJail, path: str) -> Resolved:
    """The entry ``path`` names, for a receipt and an approval (read-only): what it is, its
    size and when it changed, and its identity (another file put at that name is another
    effect). ToolError when it is not there or not allowed."""
    found = jail.resolve_entry(path)
    info = found.lstat()
    kind = (
        "folder" if stat.S_ISDIR(info.st_mode) else "link" if stat.S_ISLNK(info.st_mode) else "file"
    )
    when = datetime.fromtimestamp(info.st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
    size = "" if kind == "folder" else f", {info.st_size:,} bytes"
    shown = f"the {kind} {readable(jail.display(found))}{size}, changed {when}"
    state = {
        "path": readable(str(found)),
        "kind": kind,
        "device": info.st_dev,
        "inode": info.st_ino,
        "size": info.st_size,
        "mtime_ns": info.st_mtime_ns,
    }
    return Resolved(kind, readable(str(found)), shown, state)


def _undo_file_change(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    """File changes are undone newest first through the action log (one group)."""
    if isinstance(result, Mapping):
        if result.get("created") is False:
            return "nothing was created (it existed already)"
        if result.get("can_undo") is False:
            return str(result.get("note") or "this change cannot be undone")
        if isinstance(result.get("change_id"), str):  # undo exactly this change, no other
            return Inverse(
                "undo_last_file_change",
                {"change": result["change_id"]},
                group="files",
                tier=Tier.REVERSIBLE,
            )
    return Inverse("undo_last_file_change", {}, group="files", tier=Tier.REVERSIBLE)


def _s_note(a: Mapping[str, Any]) -> str:
    text = " ".join(str(a.get("text") or "").split())
    left = len(text) - 120
    shown = text if left <= 0 else f"{text[:120]}… (+{left:,} more characters, shown whole below)"
    return f"Write a new note {a.get('path')}\nText: {shown}"


@functools.lru_cache(maxsize=256)
def _with_default(model: type[_M], field: str, value: str) -> type[_M]:
    """A subclass of ``model`` whose ``field`` defaults to ``value`` (the first allowed folder);
    its description says so, as the prompt's schemas leave defaults out. One class per model,
    field and folder: an app built again gets the same class, whose schema is already built."""
    info = model.model_fields[field]
    described = f"{info.description or ''} Default: {json.dumps(value, ensure_ascii=False)}."
    fields: dict[str, Any] = {field: (str, Field(value, description=described.strip()))}
    sub = create_model(model.__name__, __base__=model, __doc__=model.__doc__, **fields)
    return cast("type[_M]", sub)


# --- list_folder ---------------------------------------------------------------------------


def _list_folder(jail: FolderJail, args: ListFolderArgs) -> dict[str, Any]:
    folder = resolve_folder(jail, args.path)
    shown_folder = jail.display(folder)
    try:
        with os.scandir(folder) as it:
            entries = list(it)
    except OSError as exc:
        raise ToolError(f"Cannot open the folder {shown_folder}: {reason(exc)}.") from exc
    hidden = 0
    visible: list[os.DirEntry[str]] = []
    for entry in entries:
        if not args.show_hidden and is_hidden(entry):
            hidden += 1
        else:
            visible.append(entry)
    visible.sort(key=lambda e: (not is_real_dir(e), e.name.casefold(), e.name))
    shown = visible[: args.limit]
    result: dict[str, Any] = {
        "folder": shown_folder,
        "entries": [describe_entry(jail, e) for e in shown],
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


# --- find_files ----------------------------------------------------------------------------


class _Filters:
    """find_files' optional filters, checked and resolved once per call."""

    def __init__(self, args: FindFilesArgs, now: datetime) -> None:
        self.kind = args.kind
        self.extensions = _parse_extensions(args.extensions)
        self.min_size = parse_size(args.min_size, "min_size") if args.min_size else None
        self.max_size = parse_size(args.max_size, "max_size") if args.max_size else None
        after = (
            parse_when(args.modified_after, now, "modified_after") if args.modified_after else None
        )
        before = (
            parse_when(args.modified_before, now, "modified_before")
            if args.modified_before
            else None
        )
        low, high = self.min_size, self.max_size
        if low is not None and high is not None and low > high:
            raise ToolError(
                f"min_size ({format_size(low)}) is larger than max_size "
                f"({format_size(high)}); nothing can match.",
                "Swap them or drop one.",
            )
        if after is not None and before is not None and after >= before:
            raise ToolError(
                f"modified_after ({after.isoformat(timespec='minutes')}) is not before "
                f"modified_before ({before.isoformat(timespec='minutes')}); nothing can match.",
                "Swap them or drop one.",
            )
        self.after = after.timestamp() if after else None
        self.before = before.timestamp() if before else None
        self.files_only = bool(
            self.extensions
            or self.min_size is not None
            or self.max_size is not None
            or (self.kind not in (None, "folder"))
        )
        self.shown: dict[str, Any] = {}
        if self.kind:
            self.shown["kind"] = self.kind
        if self.extensions:
            self.shown["extensions"] = sorted(self.extensions)
        if self.min_size is not None:
            self.shown["min_size"] = f"{format_size(self.min_size)} ({self.min_size:,} bytes)"
        if self.max_size is not None:
            self.shown["max_size"] = f"{format_size(self.max_size)} ({self.max_size:,} bytes)"
        if after is not None:
            self.shown["modified_after"] = after.isoformat(timespec="seconds")
        if before is not None:
            self.shown["modified_before"] = before.isoformat(timespec="seconds")

    def accept(self, entry: os.DirEntry[str]) -> bool:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            return False
        is_dir = stat.S_ISDIR(st.st_mode)
        is_file = stat.S_ISREG(st.st_mode)
        if self.kind == "folder" and not is_dir:
            return False
        if self.files_only and not is_file:
            return False
        if (
            self.kind not in (None, "file", "folder")
            and kind_by_extension(entry.name)[0] != self.kind
        ):
            return False
        if self.extensions and extension_of(entry.name) not in self.extensions:
            return False
        if self.min_size is not None and st.st_size < self.min_size:
            return False
        if self.max_size is not None and st.st_size > self.max_size:
            return False
        if self.after is not None and st.st_mtime < self.after:
            return False
        return not (self.before is not None and st.st_mtime >= self.before)


def _parse_extensions(text: str | None) -> frozenset[str]:
    if not text:
        return frozenset()
    parts = [
        p.strip().lstrip("*").lstrip(".").casefold() for p in text.replace(";", ",").split(",")
    ]
    parts = [q for p in parts for q in p.split()]
    bad = [p for p in parts if not p or "/" in p or os.sep in p or "." in p.strip(".")]
    if bad or not parts:
        raise ToolError(
            f"extensions {text!r} is not a list of file extensions.",
            'Write them without dots, comma-separated, e.g. "pdf" or "jpg, png".',
        )
    return frozenset(parts)


def _find_files(
    jail: FolderJail, args: FindFilesArgs, max_visited: int, clock: Clock
) -> dict[str, Any]:
    pattern = args.pattern.strip() or "*"
    if "/" in pattern or os.sep in pattern:
        raise ToolError(
            f"The pattern {pattern!r} contains a folder separator; patterns match names only.",
            'Put the folder in "folder" and only the name in "pattern", e.g. "*.pdf".',
        )
    if args.kind is not None and args.kind not in KINDS:  # pragma: no cover - pydantic checks
        raise ToolError(f"kind {args.kind!r} is unknown.", f"Use one of {', '.join(KINDS)}.")
    filters = _Filters(args, clock())
    folder = resolve_folder(jail, args.folder)
    matches_name = _name_matcher(pattern)

    matches: list[dict[str, Any]] = []
    stats = WalkStats()
    entries = walk(
        folder,
        max_depth=args.max_depth,
        max_visited=max_visited,
        include_hidden=pattern.startswith("."),
        stats=stats,
    )
    for entry, _depth in entries:
        if matches_name(entry.name) and filters.accept(entry):
            found = describe_entry(jail, entry)
            found.pop("name")
            matches.append({"path": jail.display(Path(entry.path)), **found})
            if len(matches) >= args.limit:
                stats.stopped = True
                break

    result: dict[str, Any] = {
        "folder": jail.display(folder),
        "pattern": pattern,
    }
    if filters.shown:
        result["filters"] = filters.shown
    result.update(matches=matches, count=len(matches), truncated=stats.stopped)
    if len(matches) >= args.limit:
        result["note"] = f"Stopped after {args.limit} matches; there may be more."
    elif stats.stopped:
        result["note"] = (
            f"Stopped after looking at {max_visited:,} entries without finishing; "
            "search a smaller folder or use a more precise pattern."
        )
    if stats.unreadable:
        result["unreadable_folders"] = stats.unreadable
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
    with open_regular(jail, path) as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            data = fh.read(max_read_bytes)
        except OSError as exc:
            raise ToolError(f"Cannot read {shown}: {reason(exc)}.") from exc
    cut_bytes = size > len(data)
    decoded = decode_text(data, final=not cut_bytes)
    if decoded is None:
        raise ToolError(
            f"This looks like a binary file ({shown}, {size:,} bytes); it cannot be read as text.",
            "Use file_info to see what it is.",
        )
    text = decoded.text
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
    if decoded.replaced:
        result["replaced_characters"] = decoded.replaced
    return result
