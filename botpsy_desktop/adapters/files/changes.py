"""Tools that change files: new folder, new note, rename or move, trash, and undo from the log."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.files import fsops
from botpsy_desktop.adapters.files.actionlog import UNDO_TOOL, ActionLog
from botpsy_desktop.adapters.files.common import kind_of_mode, reason, refuse_special
from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.adapters.files.trash import Trash
from botpsy_desktop.core.errors import ToolError

MAX_NOTE_CHARS: Final = 100_000
"""The longest note write_text_note writes."""

NOTE_EXTENSIONS: Final = (".txt", ".md")

_NOTHING_CHANGED = "Nothing was changed."

_TRASH_NAME = re.compile(r"^\.Trash(-\d+)?$")
"""A drive's own trash folder (freedesktop.org: ``$topdir/.Trash/$uid``, ``.Trash-$uid``)."""


class CreateFolderArgs(BaseModel):
    """Create a folder, with any missing folders above it."""

    path: str = Field(description='e.g. "~/Documents/pdfs".')


class WriteTextNoteArgs(BaseModel):
    """Write a NEW text note (.txt or .md); an existing file is never overwritten."""

    path: str = Field(description='e.g. "~/Documents/shopping.md".')
    text: str = Field(description="What the note says.", max_length=MAX_NOTE_CHARS)


class RenameOrMoveArgs(BaseModel):
    """Rename a file or folder, or move it into an existing folder (create_folder makes one).
    Never replaces a file."""

    source: str = Field(description='e.g. "~/Downloads/report.pdf".')
    destination: str = Field(
        description='A folder to move it into, e.g. "~/Documents/pdfs", or the new path and '
        'name, e.g. "~/Documents/report-2025.pdf".'
    )


class MoveToTrashArgs(BaseModel):
    """Move a file or folder to the trash (the user can restore it)."""

    path: str = Field(description='e.g. "~/Downloads/old.zip".')


class UndoArgs(BaseModel):
    """Undo the assistant's last file change (a new folder or note, a move, a trashing)."""

    change: str | None = Field(
        None, description="Only this change (its change_id); default: the last one."
    )


class FileChanges:
    """Carries out file changes inside the jail, logs each with its inverse, and undoes them."""

    def __init__(self, jail: FolderJail, log: ActionLog, trash: Trash) -> None:
        self.jail = jail
        self.log = log
        self.trash = trash
        self._lock = threading.Lock()

    # --- create_folder ---------------------------------------------------------------------

    def create_folder(self, args: CreateFolderArgs) -> dict[str, Any]:
        with self._lock:
            target = self.jail.resolve_new(args.path)
            shown = self.jail.display(target)
            if os.path.lexists(target):
                if target.is_dir():
                    return {
                        "folder": shown,
                        "created": False,
                        "note": f"{shown} exists already; nothing was changed.",
                    }
                raise ToolError(
                    f"{shown} exists and is not a folder. {_NOTHING_CHANGED}",
                    "Choose another name for the folder.",
                )
            chain = [target]
            while not os.path.lexists(chain[-1].parent):
                chain.append(chain[-1].parent)
            chain.reverse()
            self.log.ready()
            created: list[Path] = []
            try:
                for folder in chain:
                    os.mkdir(folder)
                    created.append(folder)
            except OSError as exc:
                for folder in reversed(created):
                    os.rmdir(folder)
                raise ToolError(
                    f"Cannot create {shown}: {reason(exc)}. {_NOTHING_CHANGED}",
                    "Ask the user about the folder's permissions, or choose another place.",
                ) from exc
            inverse = {
                "remove_folders": [{"path": str(f), **fsops.identity(f)} for f in reversed(created)]
            }
            result: dict[str, Any] = {"folder": shown, "created": True}
            if len(created) > 1:
                result["also_created"] = [self.jail.display(f) for f in created[:-1]]
            self._record("create_folder", args.model_dump(), result, inverse)
            return result

    # --- write_text_note -------------------------------------------------------------------

    def write_text_note(self, args: WriteTextNoteArgs) -> dict[str, Any]:
        with self._lock:
            target = self.jail.resolve_new(args.path)
            shown = self.jail.display(target)
            if target.suffix.casefold() not in NOTE_EXTENSIONS:
                raise ToolError(
                    f"{shown} does not end in .txt or .md; notes are plain text files.",
                    f'Use a name like "{target.stem or "note"}.md".',
                )
            if os.path.lexists(target):
                raise ToolError(
                    f"{shown} already exists; a note never overwrites a file. {_NOTHING_CHANGED}",
                    f'Choose a new name, e.g. "{target.stem}-2{target.suffix}".',
                )
            if not target.parent.is_dir():
                raise ToolError(
                    f"The folder {self.jail.display(target.parent)} does not exist.",
                    "Create it first with create_folder.",
                )
            text = args.text if args.text.endswith("\n") or not args.text else args.text + "\n"
            data = text.encode("utf-8")
            self.log.ready()
            try:
                fsops.write_new_file(target, data)
            except FileExistsError as exc:
                raise ToolError(
                    f"{shown} already exists; a note never overwrites a file. {_NOTHING_CHANGED}"
                ) from exc
            except OSError as exc:
                raise ToolError(
                    f"Cannot write {shown}: {reason(exc)}. {_NOTHING_CHANGED}",
                    "Choose another folder.",
                ) from exc
            inverse = {
                "remove_note": {
                    "path": str(target),
                    "sha256": fsops.sha256_of(target),
                    **fsops.identity(target),
                }
            }
            result = {"note": shown, "size": len(data), "lines": text.count("\n")}
            self._record("write_text_note", args.model_dump(), result, inverse)
            return result

    # --- rename_or_move --------------------------------------------------------------------

    def where_moved(self, source_text: str, destination_text: str) -> tuple[Path, Path]:
        """Where a rename or move would really put the entry: (source, final path), resolved
        as :meth:`rename_or_move` resolves them, changing nothing; ToolError where it would
        refuse (outside the allowed folders, an existing file, the trash folder...)."""
        with self._lock:
            return self._where(source_text, destination_text)

    def in_trash(self, path: Path) -> bool:
        """Whether ``path`` lies in a trash folder (the home trash, a drive's .Trash)."""
        homes = [Path(os.path.expanduser("~/.local/share/Trash"))]
        home_trash = getattr(self.trash, "home_trash", None)
        if callable(home_trash):
            homes.append(Path(home_trash()))
        for trash in homes:
            real = Path(os.path.realpath(trash))
            if path.is_relative_to(real) or path.is_relative_to(trash):
                return True
        return any(_TRASH_NAME.match(part) for part in path.parts)

    def _where(self, source_text: str, destination_text: str) -> tuple[Path, Path]:
        source = self._changeable(source_text, "moved")
        shown_source = self.jail.display(source)
        dest_text = destination_text.strip()
        target = self.jail.resolve_new(dest_text)
        if not os.path.lexists(target):
            # "move it to documents" means into ~/Documents, not a new name "documents"
            folder = self.jail.same_but_case(target)
            if (
                folder is not None
                and folder != source
                and folder.is_dir()
                and not folder.is_symlink()
            ):
                target = folder
        if target.is_dir() and not os.path.islink(target):
            target = target / source.name
        elif not os.path.lexists(target) and dest_text.endswith(("/", os.sep)):
            raise ToolError(
                f"The folder {self.jail.display(target)} does not exist. {_NOTHING_CHANGED}",
                "Create it first with create_folder, then move the file into it.",
            )
        shown_target = self.jail.display(target)
        if self.in_trash(target):
            raise ToolError(
                f"{shown_target} is in the trash folder; moving something there by renaming "
                f"leaves no record of where it came from, so it could not be restored. "
                f"{_NOTHING_CHANGED}",
                "Use move_to_trash to throw it away (the user is asked first).",
            )
        if target == source:
            raise ToolError(f"{shown_source} is already there. {_NOTHING_CHANGED}")
        if source.is_dir() and target.is_relative_to(source):
            raise ToolError(
                f"{shown_source} cannot be moved into itself. {_NOTHING_CHANGED}",
                "Choose a destination outside that folder.",
            )
        if os.path.lexists(target):
            raise ToolError(
                f"{shown_target} already exists; nothing is ever overwritten. {_NOTHING_CHANGED}",
                "Choose another name, or move the other file away first.",
            )
        if not target.parent.is_dir():
            raise ToolError(
                f"The folder {self.jail.display(target.parent)} does not exist. {_NOTHING_CHANGED}",
                "Create it first with create_folder.",
            )
        return source, target

    def rename_or_move(self, args: RenameOrMoveArgs) -> dict[str, Any]:
        with self._lock:
            source, target = self._where(args.source, args.destination)
            shown_source = self.jail.display(source)
            shown_target = self.jail.display(target)
            self.log.ready()
            how = self._move(source, target, shown_source, shown_target)
            inverse = {
                "move_back": {"from": str(target), "to": str(source), **fsops.identity(target)}
            }
            result: dict[str, Any] = {"moved": shown_source, "to": shown_target}
            if how == "copied":
                result["how"] = "copied to the other drive, verified, then removed the original"
            self._record("rename_or_move", args.model_dump(), result, inverse)
            return result

    def _move(self, source: Path, target: Path, shown_source: str, shown_target: str) -> str:
        try:
            return fsops.move(source, target)
        except FileExistsError as exc:
            raise ToolError(
                f"{shown_target} already exists; nothing is ever overwritten. {_NOTHING_CHANGED}"
            ) from exc
        except fsops.CrossDeviceFolderError as exc:
            raise ToolError(
                f"{shown_source} is a folder and {shown_target} is on another drive; folders "
                f"are only moved within one drive. {_NOTHING_CHANGED}",
                "Create the folder there and move its files one by one.",
            ) from exc
        except OSError as exc:
            raise ToolError(
                f"Could not move {shown_source} to {shown_target}: {reason(exc)}. "
                f"{_NOTHING_CHANGED} {shown_source} is where it was.",
            ) from exc

    # --- move_to_trash ---------------------------------------------------------------------

    def move_to_trash(self, args: MoveToTrashArgs) -> dict[str, Any]:
        with self._lock:
            path = self._changeable(args.path, "moved to the trash")
            shown = self.jail.display(path)
            self.log.ready()
            try:
                trashed = self.trash.trash(path)
            except OSError as exc:
                raise ToolError(
                    f"Could not move {shown} to the trash: {reason(exc)}. {_NOTHING_CHANGED}",
                    "It stays where it is; nothing is ever deleted without the trash.",
                ) from exc
            result: dict[str, Any] = {
                "trashed": shown,
                "can_undo": trashed.inverse is not None,
            }
            if trashed.not_reversible:
                result["note"] = trashed.not_reversible[:1].upper() + trashed.not_reversible[1:]
            inverse = None if trashed.inverse is None else {"restore_from_trash": trashed.inverse}
            logged = {**result, "trash_entry": trashed.where}
            self._record(
                "move_to_trash",
                args.model_dump(),
                logged,
                inverse,
                not_reversible=trashed.not_reversible,
            )
            if "warning" in logged:
                result["warning"] = logged["warning"]
            return result

    # --- how a change ended, when the audit log could not record it -------------------------

    def outcome(self, tool: str, call_id: str, arguments: Mapping[str, Any]) -> Any:
        """What the action log says of call ``call_id`` of ``tool`` (core/tools.OutcomeRule):
        the result it returned (with its ``change_id``) when it logged a change; False when it
        logged none and what it would have made is not there (a change the log could not take
        is taken back, so nothing of it stays); None when that cannot be told."""
        entry = self.log.of_call(call_id, tool)
        if entry is not None:
            result = entry.get("result")
            found = dict(result) if isinstance(result, dict) else {}
            if isinstance(entry.get("inverse"), dict):
                found["change_id"] = entry["id"]
            return found
        if tool not in ("write_text_note", "create_folder"):
            return None  # a move or a trashing leaves no single path that tells
        try:
            target = self.jail.resolve_new(str(arguments.get("path") or ""))
        except (ToolError, OSError, ValueError):
            return None
        return False if not os.path.lexists(target) else None

    # --- undo_last_file_change -------------------------------------------------------------

    def undo_last_file_change(self, args: UndoArgs) -> dict[str, Any]:
        with self._lock:
            skipped: list[dict[str, Any]] = []
            entry: dict[str, Any] | None = None
            if args.change:  # exactly the change named (an undo from the log), or nothing
                entry = self._named(args.change)
            for candidate in [] if entry is not None else self.log.not_undone():
                if isinstance(candidate.get("inverse"), dict):
                    entry = candidate
                    break
                skipped.append(candidate)
            if entry is None:
                if skipped:
                    last = skipped[0]
                    raise ToolError(
                        f"The last file change ({_describe(self.jail, last)}) cannot be undone: "
                        f"{last.get('not_reversible') or 'it has no recorded inverse'}."
                    )
                raise ToolError("There is no file change by the assistant left to undo.")
            self.log.ready()
            done = self._apply(entry["inverse"])
            result: dict[str, Any] = {
                "undone": _describe(self.jail, entry),
                "done": done,
                "changed_at": entry.get("time"),
                "undone_change": entry["id"],
            }
            if skipped:
                result["note"] = "Newer changes that cannot be undone were skipped: " + "; ".join(
                    f"{_describe(self.jail, s)} ({s.get('not_reversible', 'not reversible')})"
                    for s in skipped
                )
            self._record(UNDO_TOOL, args.model_dump(), result, None, undoes=entry["id"])
            return result

    def _named(self, change: str) -> dict[str, Any]:
        """The change ``change`` names, not undone yet, with an inverse; else ToolError."""
        for candidate in self.log.not_undone():
            if candidate.get("id") == change:
                if not isinstance(candidate.get("inverse"), dict):
                    raise ToolError(
                        f"{_describe(self.jail, candidate)} cannot be undone: "
                        f"{candidate.get('not_reversible') or 'it has no recorded inverse'}."
                    )
                return candidate
        raise ToolError(
            f"There is no file change {change} left to undo (it was undone already, or is not "
            f"in the action log). {_NOTHING_CHANGED}"
        )

    def _apply(self, inverse: dict[str, Any]) -> str:
        if "remove_folders" in inverse:
            return self._remove_folders(inverse["remove_folders"])
        if "remove_note" in inverse:
            return self._remove_note(inverse["remove_note"])
        if "move_back" in inverse:
            return self._move_back(inverse["move_back"])
        if "restore_from_trash" in inverse:
            return self._restore(inverse["restore_from_trash"])
        raise ToolError("The last change has an inverse this version cannot carry out.")

    def _remove_folders(self, folders: list[dict[str, Any]]) -> str:
        paths = [self._logged(f["path"]) for f in folders]
        for i, (folder, recorded) in enumerate(zip(paths, folders, strict=True)):
            shown = self.jail.display(folder)
            if not fsops.same_entry(folder, recorded):
                raise ToolError(f"{shown} is no longer the folder that was created; it was kept.")
            allowed = {paths[i - 1].name} if i else set()
            try:
                inside = set(os.listdir(folder))
            except OSError as exc:
                raise ToolError(f"Cannot look into {shown}: {reason(exc)}.") from exc
            if inside - allowed:
                raise ToolError(
                    f"{shown} is not empty any more; it was kept and {_NOTHING_CHANGED.lower()}",
                    "Move its contents out first if it should go.",
                )
        removed: list[Path] = []
        try:
            for folder in paths:
                os.rmdir(folder)
                removed.append(folder)
        except OSError as exc:
            for folder in reversed(removed):
                os.mkdir(folder)
            raise ToolError(
                f"Cannot remove {self.jail.display(paths[len(removed)])}: {reason(exc)}. "
                f"{_NOTHING_CHANGED}"
            ) from exc
        return "Removed the empty folder " + ", ".join(self.jail.display(p) for p in paths) + "."

    def _remove_note(self, note: dict[str, Any]) -> str:
        path = self._logged(note["path"])
        shown = self.jail.display(path)
        if not os.path.lexists(path):
            raise ToolError(f"{shown} is not there any more; there is nothing to remove.")
        unchanged = (
            fsops.same_entry(path, note)
            and kind_of_mode(os.lstat(path).st_mode) == "file"
            and os.lstat(path).st_size == note.get("size")
            and os.lstat(path).st_mtime_ns == note.get("mtime_ns")
            and fsops.sha256_of(path) == note.get("sha256")
        )
        if not unchanged:
            raise ToolError(
                f"{shown} was changed since the assistant wrote it, so it was kept. "
                f"{_NOTHING_CHANGED}",
                "Ask the user whether to move it to the trash instead.",
            )
        os.unlink(path)
        return f"Removed the note {shown}, unchanged since it was written."

    def _move_back(self, move: dict[str, Any]) -> str:
        current = self._logged(move["from"])
        original = self._logged(move["to"])
        shown_current = self.jail.display(current)
        shown_original = self.jail.display(original)
        if not fsops.same_entry(current, move):
            raise ToolError(
                f"{shown_current} is not there any more (or is another file now), so it cannot "
                f"be moved back. {_NOTHING_CHANGED}"
            )
        self._check_free(original)
        self._move(current, original, shown_current, shown_original)
        return f"Moved {shown_current} back to {shown_original}."

    def _restore(self, trashed: dict[str, Any]) -> str:
        original = self._logged(trashed["original"])
        shown = self.jail.display(original)
        self._check_free(original)
        try:
            self.trash.restore(trashed)
        except FileExistsError as exc:
            raise ToolError(f"{shown} exists again; nothing is ever overwritten.") from exc
        except OSError as exc:
            raise ToolError(
                f"Could not restore {shown} from the trash: {reason(exc)}. {_NOTHING_CHANGED}"
            ) from exc
        return f"Restored {shown} from the trash."

    # --- shared ----------------------------------------------------------------------------

    def _record(
        self,
        tool: str,
        arguments: dict[str, Any],
        result: dict[str, Any],
        inverse: dict[str, Any] | None,
        **extra: Any,
    ) -> None:
        """Log a change that was made (its log id goes in the result: ``change_id``, which an
        undo of exactly this change names). If the log cannot be written (a full disk), the
        change is taken back and the call fails: a change the log does not know could not be
        undone. Only what has no inverse (an undo, a trashing that cannot be restored) stays,
        with a warning in its result."""
        try:
            entry = self.log.record(tool, arguments, result, inverse, **extra)
            if inverse is not None and tool != UNDO_TOOL:
                result["change_id"] = entry["id"]
        except OSError as exc:
            if inverse is None:
                result["warning"] = (
                    f"The change was made but could not be written to the action log "
                    f"({reason(exc)})."
                )
                return
            try:
                self._apply(inverse)
            except (ToolError, OSError) as undo_exc:
                result["warning"] = (
                    f"The change was made but could not be written to the action log "
                    f"({reason(exc)}), and taking it back failed too ({undo_exc}); "
                    "undo_last_file_change cannot take it back."
                )
                return
            raise ToolError(
                f"The action log {self.log.file} could not be written ({reason(exc)}), so the "
                f"change was taken back: {_NOTHING_CHANGED}",
                "Tell the user the disk may be full; free some space, then try again.",
            ) from exc

    def _changeable(self, user_path: str, verb: str) -> Path:
        """An existing file or folder that may be moved or trashed (not a link, root or device)."""
        path = self.jail.resolve_entry(user_path)
        shown = self.jail.display(path)
        st = os.lstat(path)
        refuse_special(self.jail, path, st)
        if kind_of_mode(st.st_mode) == "link":
            raise ToolError(
                f"{shown} is a link (shortcut); links are not {verb} by the assistant. "
                f"{_NOTHING_CHANGED}"
            )
        if self.jail.is_root_or_above(path):
            raise ToolError(
                f"{shown} is one of the folders you allowed (or holds one); it cannot be {verb}. "
                f"{_NOTHING_CHANGED}"
            )
        return path

    def _logged(self, text: str) -> Path:
        """A path from the action log, checked to still be inside the allowed folders."""
        path = Path(text)
        parent = Path(os.path.realpath(path.parent))
        if not self.jail.contains(parent / path.name):
            raise ToolError(
                f"{path} is no longer inside the folders you allowed ({self.jail.allowed()}); "
                f"undo leaves it alone. {_NOTHING_CHANGED}"
            )
        return parent / path.name

    def _check_free(self, original: Path) -> None:
        shown = self.jail.display(original)
        if os.path.lexists(original):
            raise ToolError(
                f"Something named {shown} exists again; nothing is ever overwritten. "
                f"{_NOTHING_CHANGED}",
                "Ask the user to rename or move it first.",
            )
        if not original.parent.is_dir():
            raise ToolError(
                f"The folder {self.jail.display(original.parent)} it came from is gone. "
                f"{_NOTHING_CHANGED}",
                "Create that folder again with create_folder, then undo again.",
            )


def _describe(jail: FolderJail, entry: dict[str, Any]) -> str:
    """An action log entry in a few words, e.g. "rename_or_move of ~/a.pdf to ~/Docs/a.pdf"."""
    arguments = entry.get("arguments") or {}
    tool = str(entry.get("tool", "a change"))
    if tool == "rename_or_move":
        return f"{tool} of {arguments.get('source')} to {arguments.get('destination')}"
    if "path" in arguments:
        return f"{tool} of {arguments['path']}"
    return tool
