"""The files shipped in botpsy_desktop/assets (icons, sounds), wherever the app is installed."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

ASSETS = "assets"
"""The folder inside the botpsy_desktop package (package data; the PyInstaller spec copies it)."""


def asset(relative: str) -> Path | None:
    """The shipped file ``relative`` (e.g. ``"icons/botpsy-32.png"``), or None if it is missing.

    Wheels, editable installs and the PyInstaller bundle keep package data as real files; an
    install that does not (a zip) gets None, and callers fall back to drawing or generating.
    """
    ref = resources.files("botpsy_desktop").joinpath(ASSETS, *relative.split("/"))
    if isinstance(ref, Path) and ref.is_file():
        return ref
    return None
