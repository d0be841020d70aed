"""The quick-command key as a GNOME custom keyboard shortcut, registered for the person.

GNOME (on Wayland, its default session, and on X11 alike) lets no application grab a key; the
person binds commands to keys in Settings ▸ Keyboard ▸ Custom Shortcuts, which GNOME keeps in
GSettings (``org.gnome.settings-daemon.plugins.media-keys``: the ``custom-keybindings`` list of
paths, each path a relocatable ``custom-keybinding`` schema with ``name``, ``command`` and
``binding``). When the person sets a quick-command key in the app's Settings on GNOME, the app
writes that entry for them under a path of its own (never one of the ``customN`` the person's
own shortcuts use), with ``botpsy-desktop --quick`` as the command; clearing the key removes
the entry. GNOME's keys are named by key, not by the character a layout puts there, so the
shortcut is the same on a Spanish or a German keyboard. Written with the ``gsettings`` program
(adapters/device/desktop.py says why).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys

from botpsy_desktop.adapters.device.desktop import DesktopSettings, Key
from botpsy_desktop.core.errors import ToolError

MEDIA_KEYS = "org.gnome.settings-daemon.plugins.media-keys"
CUSTOM = f"{MEDIA_KEYS}.custom-keybinding"
PATH = "/org/gnome/settings-daemon/plugins/media-keys/custom-keybindings/botpsy-quick/"
NAME = "BotPsy quick command"

_MODIFIERS = {
    "ctrl": "<Primary>", "control": "<Primary>", "alt": "<Alt>", "shift": "<Shift>",
    "super": "<Super>", "meta": "<Super>", "win": "<Super>",
}  # fmt: skip
_KEYS = {
    "space": "space", "return": "Return", "enter": "Return", "tab": "Tab", "esc": "Escape",
    "escape": "Escape", "backspace": "BackSpace", "ins": "Insert", "insert": "Insert",
    "del": "Delete", "delete": "Delete", "home": "Home", "end": "End", "pgup": "Page_Up",
    "pgdown": "Page_Down", "left": "Left", "up": "Up", "right": "Right", "down": "Down",
    "pause": "Pause", "print": "Print",
}  # fmt: skip


def on_gnome() -> bool:
    """Whether the session is GNOME's (XDG_CURRENT_DESKTOP names it: "GNOME", "ubuntu:GNOME")."""
    desktops = os.environ.get("XDG_CURRENT_DESKTOP", "")
    return any(d.strip().lower() == "gnome" for d in desktops.split(":"))


def accelerator(shortcut: str) -> str:
    """``"Ctrl+Alt+Space"`` -> ``"<Primary><Alt>space"`` (GTK's accelerator syntax)."""
    parts = [p.strip() for p in shortcut.replace(" ", "").split("+")]
    if not shortcut.strip() or not all(parts):
        raise ToolError(f"{shortcut!r} is not a shortcut. Write it like Ctrl+Alt+Space.")
    mods = []
    for name in parts[:-1]:
        mod = _MODIFIERS.get(name.lower())
        if mod is None:
            raise ToolError(
                f"Unknown modifier {name!r} in {shortcut!r}: use Ctrl, Alt, Shift or Super."
            )
        mods.append(mod)
    if not mods:
        raise ToolError(
            f"{shortcut!r} has no modifier: a global shortcut needs Ctrl, Alt or Super, or it "
            "would take the key from every other program."
        )
    key = parts[-1]
    if key.lower() in _KEYS:
        name = _KEYS[key.lower()]
    elif key.upper().startswith("F") and key[1:].isdigit() and 1 <= int(key[1:]) <= 24:
        name = key.upper()
    elif len(key) == 1 and key.isascii() and key.isalnum():
        name = key.lower()
    else:
        raise ToolError(
            f"Unknown key {key!r} in {shortcut!r}: use a letter, digit, F1-F24 or Space."
        )
    return "".join(dict.fromkeys(mods)) + name


def quick_command() -> str:
    """The command GNOME runs: the installed ``botpsy-desktop --quick``, else this Python's."""
    found = shutil.which("botpsy-desktop")
    if found:
        return f"{shlex.quote(found)} --quick"
    return f"{shlex.quote(sys.executable)} -m botpsy_desktop.ui.main --quick"


class GnomeShortcut:
    """Registers, reads and removes the app's custom shortcut in GNOME's settings."""

    def __init__(self, settings: DesktopSettings | None = None) -> None:
        self.settings = settings or DesktopSettings()

    def _paths(self) -> list[str]:
        text = self.settings.get(Key(MEDIA_KEYS, "custom-keybindings"))
        if text.startswith("@as"):
            return []
        return [p.strip().strip("'") for p in text.strip("[]").split(",") if p.strip()]

    def _set_paths(self, paths: list[str]) -> None:
        value = "[" + ", ".join(f"'{p}'" for p in paths) + "]"
        self.settings.set(Key(MEDIA_KEYS, "custom-keybindings"), value if paths else "@as []")

    @staticmethod
    def _key(name: str) -> Key:
        return Key(f"{CUSTOM}:{PATH}", name)

    def register(self, shortcut: str, command: str | None = None) -> str:
        """Bind ``shortcut`` to the quick box; returns the accelerator GNOME keeps."""
        binding = accelerator(shortcut)
        self.settings.set(self._key("name"), _gvariant(NAME))
        self.settings.set(self._key("command"), _gvariant(command or quick_command()))
        self.settings.set(self._key("binding"), _gvariant(binding))
        paths = self._paths()
        if PATH not in paths:
            self._set_paths([*paths, PATH])
        return binding

    def registered(self) -> str:
        """The accelerator of the app's shortcut in GNOME ('' when none is registered)."""
        if PATH not in self._paths():
            return ""
        return self.settings.get(self._key("binding"))

    def remove(self) -> None:
        """Take the app's shortcut out of GNOME's list (the person's own ones stay)."""
        paths = self._paths()
        if PATH in paths:
            self._set_paths([p for p in paths if p != PATH])
        for key in ("name", "command", "binding"):
            self.settings.reset(self._key(key))


def _gvariant(text: str) -> str:
    """A GVariant string literal for ``gsettings set``."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
