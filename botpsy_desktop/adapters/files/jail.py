"""A folder jail: user paths are resolved and must lie inside the configured folders.

A name that is not there as written but differs only in case from the one entry of its folder
that is ("documents/taxes" for ~/Documents/Taxes, as a person types or says it) means that
entry; a name with no such entry gets the nearest names of its folder in the error, so that the
model can ask again or the person can see what is there.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from botpsy_desktop.core.errors import ToolError

_BYTE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")
"""A byte that is not UTF-8 as core/text.py readable() shows it."""

_SETTINGS_HINT = "Ask the user to add the folder in Settings."


def _real(path: str | os.PathLike[str]) -> Path:
    """Expand ``~`` and resolve every symlink (a missing tail is kept as written)."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def _home() -> Path:
    return Path(os.path.expanduser("~"))


def _entries(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _existing_start(path: Path) -> tuple[Path, int]:
    """The longest start of ``path`` that exists, and how many of its parts that is."""
    parts = path.parts
    base, i = Path(parts[0]), 1
    while i < len(parts) and os.path.lexists(base / parts[i]):
        base, i = base / parts[i], i + 1
    return base, i


def _fold_case(path: Path, *, last: bool) -> Path:
    """``path`` with each name that is not there as written replaced by the one entry of its
    folder that differs from it only in case; from the first name with none (or several) on,
    as written. ``last``: the final name too (an entry that must exist), else only its folders
    (a new name is kept as written)."""
    if os.path.lexists(path) or not path.parts:
        return path
    parts = path.parts
    base, i = _existing_start(path)
    limit = len(parts) if last else len(parts) - 1
    while i < limit:
        folded = parts[i].casefold()
        same = [e for e in _entries(base) if e.casefold() == folded]
        if len(same) != 1:
            break
        base, i = base / same[0], i + 1
    return base.joinpath(*parts[i:])


class FolderJail:
    """Confines file access to the configured folders (their resolved, real locations)."""

    def __init__(self, roots: Sequence[Path]) -> None:
        if not roots:
            raise ValueError("FolderJail needs at least one folder")
        resolved: list[Path] = []
        for root in roots:
            real = _real(root)
            if real not in resolved:
                resolved.append(real)
        self._roots = tuple(resolved)

    @property
    def roots(self) -> tuple[Path, ...]:
        """The allowed folders, resolved; the first one anchors relative paths."""
        return self._roots

    def contains(self, path: Path) -> bool:
        """Whether an already resolved path lies inside (or is) one of the allowed folders."""
        return any(path.is_relative_to(root) for root in self._roots)

    def allowed(self) -> str:
        """The allowed folders as the user knows them, for messages."""
        return ", ".join(self.display(root) for root in self._roots)

    def default_folder(self) -> str:
        """The folder tools start from: ``~`` when home is allowed, else the first folder."""
        if self.contains(_real(_home())):
            return "~"
        return self.display(self._roots[0])

    def _candidate(self, user_path: str, *, fold_last: bool = True) -> tuple[str, Path]:
        """Check a path from the model and make it absolute (relative to the first folder);
        names that are there only in another case are taken as they are (``fold_last``: the
        final name too)."""
        text = user_path.strip()
        if not text:
            raise ToolError(
                "The path is empty.", "Give a file or folder, for example ~/Documents/notes.txt."
            )
        if "\x00" in text:
            raise ToolError(f"The path {text!r} contains a NUL character; it is not a valid path.")
        expanded = Path(os.path.expanduser(text))
        if ".." in expanded.parts or ".." in Path(text).parts:
            raise ToolError(
                f"'{text}' contains '..'; paths may not step up out of a folder.",
                "Give the full path instead, for example ~/Documents/notes.txt.",
            )
        path = expanded if expanded.is_absolute() else self._roots[0] / expanded
        if "\\x" in text and not os.path.lexists(path):
            # a name that is not UTF-8 is shown as "caf\xe9.txt" (core/text.py): the same name
            # given back means that file
            raw = Path(_BYTE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), str(path)))
            if os.path.lexists(raw):
                path = raw
        return text, _fold_case(path, last=fold_last)

    def _not_found(self, text: str, path: Path) -> ToolError:
        """No such entry, with the names nearest to the first missing one in its folder."""
        base, i = _existing_start(path)
        near: list[str] = []
        if i < len(path.parts) and base.is_dir():
            names: dict[str, list[str]] = {}
            for e in sorted(_entries(base)):
                if not e.startswith("."):
                    names.setdefault(e.casefold(), []).append(e)
            for folded in difflib.get_close_matches(path.parts[i].casefold(), names, 3, 0.6):
                for name in names[folded]:
                    entry = base / name
                    if self.contains(Path(os.path.realpath(entry))):
                        near.append(self.display(entry))
        hint = "Check the name with list_folder or find_files."
        if near:
            hint = f"Did you mean {' or '.join(near)}? {hint}"
        return ToolError(f"No such file or folder: '{text}'.", hint)

    def same_but_case(self, path: Path) -> Path | None:
        """The one existing entry whose path differs from ``path`` (missing) only in case."""
        folded = _fold_case(path, last=True)
        return folded if folded != path and os.path.lexists(folded) else None

    def _inside(self, text: str, path: str | os.PathLike[str]) -> Path:
        """``path`` with every symlink resolved, or ToolError when that leaves the folders."""
        try:
            resolved = Path(os.path.realpath(path))
        except (OSError, ValueError) as exc:
            raise ToolError(f"The path '{text}' cannot be used: {exc}.") from exc
        if not self.contains(resolved):
            raise ToolError(
                f"'{text}' is outside the folders you may use ({self.allowed()}).",
                _SETTINGS_HINT,
            )
        return resolved

    def resolve(self, user_path: str) -> Path:
        """Turn a path from the model into a real path inside the jail, or raise ToolError."""
        text, candidate = self._candidate(user_path)
        resolved = self._inside(text, candidate)
        if not resolved.exists():
            raise self._not_found(text, candidate)
        return resolved

    def resolve_entry(self, user_path: str, *, must_exist: bool = True) -> Path:
        """The entry a change acts on: its folder resolved, its own name taken as written.

        A symlink named by ``user_path`` is the link itself, never its target, so a change can
        never reach through a link; the folder holding it must be inside the jail. With
        ``must_exist`` false the entry may be missing (a new name), but its folder must exist.
        """
        text, candidate = self._candidate(user_path)
        name = candidate.name
        if not name or candidate == Path(candidate.anchor):
            return self.resolve(text)
        real = Path(os.path.realpath(candidate))
        if real in self._roots:  # an allowed folder itself (callers refuse to move those)
            return real
        parent = self._inside(text, candidate.parent)
        entry = parent / name
        if not self.contains(entry):
            raise ToolError(
                f"'{text}' is outside the folders you may use ({self.allowed()}).",
                _SETTINGS_HINT,
            )
        if not parent.is_dir():
            raise ToolError(
                f"The folder {self.display(parent)} does not exist.",
                "Create it first with create_folder, or check the name with list_folder.",
            )
        if must_exist and not os.path.lexists(entry):
            raise self._not_found(text, candidate)
        return entry

    def resolve_new(self, user_path: str) -> Path:
        """Where a new entry named by ``user_path`` goes: its nearest existing folder resolved
        (it must be inside the jail), the missing names after it kept as written. An entry that
        exists already is resolved like ``resolve`` does. Its folders are matched regardless
        of case as ``resolve`` matches them; the new name itself is kept as written."""
        text, candidate = self._candidate(user_path, fold_last=False)
        missing: list[str] = []
        base = candidate
        while not os.path.lexists(base) and base.parent != base:
            missing.append(base.name)
            base = base.parent
        target = self._inside(text, base).joinpath(*reversed(missing))
        if not self.contains(target):
            raise ToolError(
                f"'{text}' is outside the folders you may use ({self.allowed()}).",
                _SETTINGS_HINT,
            )
        return target

    def is_root_or_above(self, path: Path) -> bool:
        """Whether ``path`` is one of the allowed folders or a folder holding one."""
        return any(root == path or root.is_relative_to(path) for root in self._roots)

    def display(self, path: Path) -> str:
        """A path the user recognises: ``~/...`` under the home folder, else the full path."""
        home = _home()
        for base in (_real(home), home):
            if path == base:
                return "~"
            if path.is_relative_to(base):
                return str(Path("~") / path.relative_to(base))
        return str(path)
