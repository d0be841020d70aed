"""The desktop's own settings: light or dark appearance and do not disturb.

GNOME keeps them in GSettings (org.gnome.desktop.interface ``color-scheme``, the key the XDG
settings portal reports to every app, and org.gnome.desktop.notifications ``show-banners``,
GNOME's "Do Not Disturb" switch). They are read and written through the ``gsettings`` program
that GLib ships with every GNOME (and most other) desktops: the supported interface to those
settings, with the desktop's own backend (dconf) behind it, instead of a Python GLib binding
the app would carry. KDE Plasma, Windows (Focus Assist) and macOS (Focus) are not supported
yet: there the tools say so rather than pretend.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from botpsy_desktop.core.errors import ToolError

INTERFACE = "org.gnome.desktop.interface"
NOTIFICATIONS = "org.gnome.desktop.notifications"
TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Key:
    schema: str
    key: str


COLOR_SCHEME = Key(INTERFACE, "color-scheme")
SHOW_BANNERS = Key(NOTIFICATIONS, "show-banners")


class DesktopSettings:
    """Reads and writes GSettings keys with the ``gsettings`` program."""

    def __init__(self, program: str = "gsettings") -> None:
        self.program = program

    def _run(self, *args: str) -> str:
        found = shutil.which(self.program)
        if found is None:
            raise ToolError(
                "This desktop's settings cannot be changed here: GNOME's settings "
                "(the gsettings program) are not installed. KDE, Windows and macOS are not "
                "supported yet."
            )
        try:
            done = subprocess.run(
                [found, *args],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                check=False,
                env=os.environ.copy(),
            )
        except subprocess.TimeoutExpired as exc:
            raise ToolError(
                "The desktop's settings service did not answer in time; try again."
            ) from exc
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()
            raise ToolError(
                "The desktop refused the setting"
                + (f": {why[-1]}" if why else "")
                + ". It works on GNOME (and desktops that use its settings) only so far."
            )
        return done.stdout.strip()

    def get(self, key: Key) -> str:
        """The key's value as GVariant text, quotes removed from a string (``prefer-dark``)."""
        return _unquote(self._run("get", key.schema, key.key))

    def set(self, key: Key, value: str) -> None:
        """Write the key and read it back: without the settings service (dconf on a session
        bus) gsettings says nothing and keeps nothing, which must not read as done."""
        self._run("set", key.schema, key.key, value)
        if self.get(key) != _unquote(value):
            raise ToolError(
                "The desktop did not keep the setting: its settings service (dconf, on the "
                "session's D-Bus) is not running. Change it in the desktop's own settings."
            )

    def reset(self, key: Key) -> None:
        """Back to the schema's default (the key is then no longer written in dconf)."""
        self._run("reset", key.schema, key.key)

    def check(self) -> str:
        """'' when settings can be changed here, else why not (the doctor's line)."""
        if not os.environ.get("DBUS_SESSION_BUS_ADDRESS") and not os.path.exists(
            os.path.join(os.environ.get("XDG_RUNTIME_DIR", "/nonexistent"), "bus")
        ):
            return "no session bus: the desktop's settings service cannot be reached"
        self.get(COLOR_SCHEME)
        return ""

    # --- the two settings the tools change ---------------------------------------------------

    def appearance(self) -> str:
        """``dark`` or ``light``."""
        return "dark" if self.get(COLOR_SCHEME) == "prefer-dark" else "light"

    def set_appearance(self, mode: str) -> tuple[str, str]:
        before = self.appearance()
        self.set(COLOR_SCHEME, "prefer-dark" if mode == "dark" else "default")
        return before, self.appearance()

    def do_not_disturb(self) -> bool:
        return self.get(SHOW_BANNERS) == "false"

    def set_do_not_disturb(self, on: bool) -> tuple[bool, bool]:
        before = self.do_not_disturb()
        self.set(SHOW_BANNERS, "false" if on else "true")
        return before, self.do_not_disturb()


def _unquote(value: str) -> str:
    """A GVariant string's text (``'prefer-dark'`` -> ``prefer-dark``); other values as given."""
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("\\'", "'").replace("\\\\", "\\")
    return value
