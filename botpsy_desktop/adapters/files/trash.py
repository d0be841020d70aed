"""The system trash through send2trash, and restoring from the freedesktop trash for undo."""

from __future__ import annotations

import errno
import importlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote

from botpsy_desktop.adapters.files import fsops
from botpsy_desktop.core.errors import ToolError

INFO_SUFFIX = ".trashinfo"


@dataclass(frozen=True)
class Trashed:
    """Where a trashed entry went: ``inverse`` restores it, or ``not_reversible`` says why not."""

    where: str
    inverse: dict[str, Any] | None
    not_reversible: str | None = None


class Trash(Protocol):
    """A place entries go instead of being deleted."""

    def trash(self, path: Path) -> Trashed:
        """Move ``path`` (an entry, never followed if it is a link) to the trash."""
        ...

    def restore(self, inverse: dict[str, Any]) -> Path:
        """Put a trashed entry back where it was (refusing to replace anything there)."""
        ...


def system_trash() -> Trash:
    """The freedesktop trash on Linux and the BSDs (restorable), else the OS trash."""
    if sys.platform in ("darwin", "win32"):
        return PlatformTrash()
    return FreedesktopTrash()


def _plat_other() -> Any:
    # send2trash's own freedesktop implementation. Its module-level send2trash() would also do,
    # but it reads XDG_DATA_HOME once at import and does not say which name the entry got in
    # the trash, which undo needs; its building blocks are used with the location read now.
    return importlib.import_module("send2trash.plat_other")


class FreedesktopTrash:
    """The freedesktop.org trash: ``$XDG_DATA_HOME/Trash`` (``files/`` and ``info/``) for the
    home filesystem, ``$topdir/.Trash/$uid`` or ``$topdir/.Trash-$uid`` on other filesystems.

    ``data_home`` fixes the data folder; by default ``$XDG_DATA_HOME`` (or ``~/.local/share``)
    is read at each call.
    """

    def __init__(self, data_home: Path | None = None) -> None:
        self._data_home = data_home

    def data_home(self) -> Path:
        if self._data_home is not None:
            return self._data_home
        env = os.environ.get("XDG_DATA_HOME", "")
        if env and os.path.isabs(env):  # the base-directory spec ignores relative paths
            return Path(env)
        return Path(os.path.expanduser("~")) / ".local" / "share"

    def home_trash(self) -> Path:
        return self.data_home() / "Trash"

    def trash(self, path: Path) -> Trashed:
        plat = _plat_other()
        data_home = self.data_home()
        if os.lstat(path).st_dev == _device_of_nearest(data_home):
            try:
                return self._move(plat, path, data_home / "Trash", data_home)
            except OSError as exc:
                if exc.errno != errno.EXDEV:  # e.g. a bind mount: try the volume's own trash
                    raise
        topdir = Path(os.fsdecode(plat.find_mount_point(os.fsencode(path))))
        trash_dir = Path(os.fsdecode(plat.find_ext_volume_trash(os.fsencode(topdir))))
        return self._move(plat, path, trash_dir, topdir)

    def _move(self, plat: Any, path: Path, trash_dir: Path, topdir: Path) -> Trashed:
        info_dir = trash_dir / "info"
        before = set(os.listdir(info_dir)) if info_dir.is_dir() else set()
        try:
            plat.trash_move(os.fsencode(path), os.fsencode(trash_dir), os.fsencode(topdir))
        except BaseException:
            self._remove_orphans(trash_dir, topdir, before, path)
            raise
        for info_name in sorted(set(os.listdir(info_dir)) - before):
            name = info_name.removesuffix(INFO_SUFFIX)
            if (
                info_name.endswith(INFO_SUFFIX)
                and os.path.lexists(trash_dir / "files" / name)
                and _original(info_dir / info_name, topdir) == path
            ):
                inverse = {
                    "trash": "freedesktop",
                    "trash_dir": str(trash_dir),
                    "topdir": str(topdir),
                    "name": name,
                    "original": str(path),
                }
                return Trashed(str(trash_dir / "files" / name), inverse)
        return Trashed(
            str(trash_dir), None, "the entry could not be found in the trash after moving it"
        )

    @staticmethod
    def _remove_orphans(trash_dir: Path, topdir: Path, before: set[str], path: Path) -> None:
        """Drop .trashinfo files a failed move left without their entry in ``files/``."""
        info_dir = trash_dir / "info"
        if not info_dir.is_dir():
            return
        for info_name in set(os.listdir(info_dir)) - before:
            name = info_name.removesuffix(INFO_SUFFIX)
            info = info_dir / info_name
            if not os.path.lexists(trash_dir / "files" / name) and _original(info, topdir) == path:
                info.unlink(missing_ok=True)

    def restore(self, inverse: dict[str, Any]) -> Path:
        trash_dir = Path(inverse["trash_dir"])
        name = str(inverse["name"])
        stored = trash_dir / "files" / name
        original = Path(inverse["original"])
        if not name or name in (".", "..") or "/" in name or os.sep in name:
            raise ToolError(f"The action log names no valid trash entry ({name!r}).")
        if not os.path.lexists(stored):
            raise ToolError(
                f"{original.name} is no longer in the trash (it was restored or the trash was "
                "emptied); it cannot be brought back by undo."
            )
        fsops.move(stored, original)
        (trash_dir / "info" / f"{name}{INFO_SUFFIX}").unlink(missing_ok=True)
        return original


class PlatformTrash:
    """The operating system's own trash (macOS, Windows) through send2trash; no undo."""

    def trash(self, path: Path) -> Trashed:
        importlib.import_module("send2trash").send2trash(str(path))
        return Trashed(
            "the system trash",
            None,
            f"undo of trash is not supported on this platform ({sys.platform}); "
            "the user can restore it from the system trash",
        )

    def restore(self, inverse: dict[str, Any]) -> Path:
        raise ToolError(
            f"Undo of trash is not supported on this platform ({sys.platform}).",
            "The user can restore it from the system trash.",
        )


def _device_of_nearest(path: Path) -> int:
    """The device of ``path`` or of its nearest existing parent."""
    for candidate in (path, *path.parents):
        try:
            return os.stat(candidate).st_dev
        except OSError:
            continue
    return -1


def _original(info: Path, topdir: Path) -> Path | None:
    """The original location a .trashinfo file records."""
    try:
        text = info.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Path="):
            value = Path(unquote(line[len("Path=") :]))
            return value if value.is_absolute() else topdir / value
    return None
