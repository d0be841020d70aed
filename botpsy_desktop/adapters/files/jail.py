"""A folder jail: user paths are resolved and must lie inside the configured folders."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from botpsy_desktop.core.errors import ToolError

_SETTINGS_HINT = "Ask the user to add the folder in Settings."


def _real(path: str | os.PathLike[str]) -> Path:
    """Expand ``~`` and resolve every symlink (a missing tail is kept as written)."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def _home() -> Path:
    return Path(os.path.expanduser("~"))


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

    def resolve(self, user_path: str) -> Path:
        """Turn a path from the model into a real path inside the jail, or raise ToolError."""
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
        candidate = expanded if expanded.is_absolute() else self._roots[0] / expanded
        try:
            resolved = Path(os.path.realpath(candidate))
        except (OSError, ValueError) as exc:
            raise ToolError(f"The path '{text}' cannot be used: {exc}.") from exc
        if not self.contains(resolved):
            raise ToolError(
                f"'{text}' is outside the folders you may read ({self.allowed()}).",
                _SETTINGS_HINT,
            )
        if not resolved.exists():
            raise ToolError(
                f"No such file or folder: '{text}'.",
                "Check the name with list_folder or find_files.",
            )
        return resolved

    def display(self, path: Path) -> str:
        """A path the user recognises: ``~/...`` under the home folder, else the full path."""
        home = _home()
        for base in (_real(home), home):
            if path == base:
                return "~"
            if path.is_relative_to(base):
                return str(Path("~") / path.relative_to(base))
        return str(path)
