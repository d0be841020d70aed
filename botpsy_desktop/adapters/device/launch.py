"""Open a file, a folder or a web address with the person's default app; start an installed
application by name; lock the screen.

Applications are found from their freedesktop desktop entries (``applications/*.desktop`` under
$XDG_DATA_HOME and $XDG_DATA_DIRS: what every Linux launcher lists), read as the key files they
are with the standard library's configparser (they are INI-style; a whole library such as pyxdg
would add nothing the search needs). Starting them, and opening things with their default app,
is left to GLib's ``gio`` program (``gio launch``, ``gio open``): it expands the entry's Exec line
(field codes, quoting, terminal apps) and honours the person's mimeapps.list choices exactly as
the desktop does. macOS uses ``open``, Windows ``os.startfile``. The screen is locked through the
desktop's screen saver over D-Bus (``org.freedesktop.ScreenSaver.Lock``, GNOME's and KDE's), then
``loginctl lock-session``.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from botpsy_desktop.core.errors import ToolError

TIMEOUT_S = 10.0


def fold(text: str) -> str:
    """Lower case without accents ("Éditeur" finds "editeur")."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c)).strip()


@dataclass(frozen=True)
class App:
    """An installed application: its entry file, its names (each language's) and keywords."""

    path: Path
    name: str
    names: tuple[str, ...]
    keywords: tuple[str, ...]

    @property
    def id(self) -> str:
        return self.path.name


def application_dirs() -> list[Path]:
    """Where desktop entries live, most personal first (the XDG base directory spec)."""
    home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    dirs = os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    return [Path(d) / "applications" for d in [home, *dirs.split(":")] if d]


def installed_apps(dirs: list[Path] | None = None) -> list[App]:
    """The applications a launcher would list (hidden and NoDisplay entries left out; an entry
    in a more personal folder hides the same id further down)."""
    seen: set[str] = set()
    apps: list[App] = []
    for folder in dirs if dirs is not None else application_dirs():
        try:
            files = sorted(folder.rglob("*.desktop"))
        except OSError:
            continue
        for path in files:
            ident = str(path.relative_to(folder)).replace("/", "-")
            if ident in seen:
                continue
            seen.add(ident)
            app = _read_entry(path)
            if app is not None:
                apps.append(app)
    return apps


def _read_entry(path: Path) -> App | None:
    parser = configparser.RawConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    if not parser.has_section("Desktop Entry"):
        return None
    entry = parser["Desktop Entry"]
    if entry.get("Type", "Application") != "Application":
        return None
    if entry.get("Hidden", "").lower() == "true" or entry.get("NoDisplay", "").lower() == "true":
        return None
    name = entry.get("Name", "").strip()
    if not name or not entry.get("Exec", "").strip():
        return None
    names = [v.strip() for k, v in entry.items() if k.startswith(("Name", "GenericName"))]
    keywords = [
        w.strip() for k, v in entry.items() if k.startswith("Keywords") for w in v.split(";")
    ]
    return App(path, name, tuple(n for n in names if n), tuple(w for w in keywords if w))


def find_app(wanted: str, apps: list[App] | None = None) -> App:
    """The one installed app ``wanted`` names: a whole name first, then a name that starts with
    it, then one that holds it, then a keyword. Several or none: a ToolError that lists them."""
    apps = installed_apps() if apps is None else apps
    needle = fold(wanted)
    if not needle:
        raise ToolError("Say which application to start.")
    tiers = [
        [a for a in apps if any(fold(n) == needle for n in a.names)],
        [a for a in apps if any(fold(n).startswith(needle) for n in a.names)],
        [a for a in apps if any(needle in fold(n) for n in a.names)],
        [a for a in apps if any(fold(k) == needle for k in a.keywords)],
    ]
    for found in tiers:
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(f"“{a.name}”" for a in found[:8])
            raise ToolError(f"Several applications match “{wanted}”: {names}. Say which one.")
    raise ToolError(f"No installed application is called “{wanted}”.")


def _run(command: list[str], what: str) -> None:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"{what} failed: {exc}") from exc
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        raise ToolError(f"{what} failed" + (f": {why[-1]}" if why else "") + ".")


def _gio() -> str:
    found = shutil.which("gio")
    if found is None:
        raise ToolError(
            "Opening things needs GLib's gio program (Debian and Ubuntu: libglib2.0-bin)."
        )
    return found


def open_with_default(target: str) -> None:
    """Open a file, folder or web address with the app the person chose for it."""
    if sys.platform == "darwin":
        _run(["open", target], "Opening it")
    elif sys.platform == "win32":
        try:
            os.startfile(target)  # type: ignore[attr-defined]
        except OSError as exc:
            raise ToolError(f"Opening it failed: {exc}") from exc
    else:
        _run([_gio(), "open", target], "Opening it")


def launch(app: App, files: list[Path]) -> None:
    if sys.platform in ("darwin", "win32"):
        raise ToolError("Starting an app by name is supported on Linux only so far.")
    _run([_gio(), "launch", str(app.path), *map(str, files)], f"Starting {app.name}")


def check_web_address(url: str) -> str:
    """``url`` when it is an http(s) address with a host; a ToolError otherwise."""
    text = url.strip()
    if "://" not in text and "." in text and " " not in text:
        text = "https://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ToolError(
            f"“{url}” is not a web address this can open (http or https, with a host name)."
        )
    return text


def lock_screen() -> str:
    """Lock the session: the desktop's screen saver over D-Bus, else loginctl. Says which."""
    if sys.platform != "linux":
        raise ToolError("Locking the screen is supported on Linux only so far.")
    problems: list[str] = []
    try:
        from jeepney import DBusAddress, new_method_call
        from jeepney.io.blocking import open_dbus_connection

        with open_dbus_connection(bus="SESSION") as conn:
            for name, path in (
                ("org.freedesktop.ScreenSaver", "/org/freedesktop/ScreenSaver"),
                ("org.gnome.ScreenSaver", "/org/gnome/ScreenSaver"),
            ):
                address = DBusAddress(path, bus_name=name, interface=name)
                reply = conn.send_and_get_reply(new_method_call(address, "Lock"), timeout=5)
                if reply.header.message_type.name != "error":
                    return name
                problems.append(f"{name}: {reply.body[0] if reply.body else 'refused'}")
    except Exception as exc:  # no session bus, jeepney missing
        problems.append(f"D-Bus: {exc}")
    if shutil.which("loginctl"):
        try:
            _run(["loginctl", "lock-session"], "Locking the screen")
            return "loginctl"
        except ToolError as exc:
            problems.append(str(exc))
    raise ToolError("The screen could not be locked: " + "; ".join(problems))
