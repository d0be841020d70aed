"""A global keyboard shortcut for the quick-command box, where the desktop lets an app grab one.

X11 (Linux and BSD desktops on Xorg) lets any client grab a key on the root window: the grab is
made on a separate connection to the X server (libxcb through ctypes: nothing to install, and
Qt's own connection is left alone), and a thread waits for the key. Wayland compositors do not
let applications grab keys (an X11 app under XWayland only sees keys while one of its windows
has focus). On GNOME (Wayland or X11) the key is registered for the person as a custom
shortcut in GNOME's own settings (adapters/device/keybinding.py). Elsewhere on Wayland it is
asked of the desktop through the XDG GlobalShortcuts portal (core/portal_shortcuts.py: KDE
Plasma, Hyprland...), on Windows and macOS reserved with the OS (core/native_hotkeys.py).
Where none of these is offered the settings say so: bind `botpsy-desktop --quick` to a key in
the desktop's keyboard settings. Every way names the key, not a character (core/shortcuts.py),
so a shortcut means the same key on every keyboard layout.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import sys
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence

from botpsy_desktop.adapters.device.desktop import DesktopSettings
from botpsy_desktop.adapters.device.keybinding import NAME, GnomeShortcut, on_gnome
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.native_hotkeys import NativeHotkey
from botpsy_desktop.core.portal_shortcuts import DESCRIPTION, PortalShortcut
from botpsy_desktop.core.shortcuts import (
    LOCK,
    MOD2,
    HotkeyError,
    parse_shortcut,
)

_LOCK, _MOD2 = LOCK, MOD2  # NumLock and CapsLock
_GRAB_MODE_ASYNC = 1
_KEY_PRESS = 2

__all__ = ["GlobalShortcut", "HotkeyError", "X11Hotkey", "normalise_shortcut", "parse_shortcut"]


def normalise_shortcut(text: str) -> str:
    """The shortcut as Qt writes it (for display in the settings)."""
    return QKeySequence(text).toString(QKeySequence.SequenceFormat.PortableText) or text


class _KeyPressEvent(ctypes.Structure):
    _fields_ = [
        ("response_type", ctypes.c_uint8),
        ("detail", ctypes.c_uint8),
        ("sequence", ctypes.c_uint16),
        ("time", ctypes.c_uint32),
        ("root", ctypes.c_uint32),
        ("event", ctypes.c_uint32),
        ("child", ctypes.c_uint32),
        ("root_x", ctypes.c_int16),
        ("root_y", ctypes.c_int16),
        ("event_x", ctypes.c_int16),
        ("event_y", ctypes.c_int16),
        ("state", ctypes.c_uint16),
        ("same_screen", ctypes.c_uint8),
        ("pad0", ctypes.c_uint8),
    ]


class _VoidCookie(ctypes.Structure):
    _fields_ = [("sequence", ctypes.c_uint)]


class _ScreenIterator(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.POINTER(ctypes.c_uint32)),  # xcb_screen_t*, whose first field is root
        ("rem", ctypes.c_int),
        ("index", ctypes.c_int),
    ]


def _load(name: str, soname: str) -> ctypes.CDLL:
    path = ctypes.util.find_library(name) or soname
    try:
        return ctypes.CDLL(path)
    except OSError as exc:
        raise HotkeyError(
            f"The X11 library {soname} is missing ({exc}); install it (Debian: "
            f"{'libxcb1' if name == 'xcb' else 'libxcb-keysyms1'}) for the global shortcut."
        ) from exc


class X11Hotkey:
    """Grabs one key combination on the X server's root window and calls ``on_press``.

    ``on_press`` runs on the listener thread; the Qt wrapper turns it into a signal.
    """

    def __init__(self, shortcut: str, on_press: Callable[[], None], display: str | None = None):
        self.shortcut = shortcut
        self.mods, self.keysym = parse_shortcut(shortcut)
        self._on_press = on_press
        self._display = display if display is not None else os.environ.get("DISPLAY", "")
        if not self._display:
            raise HotkeyError("There is no X display (DISPLAY is not set).")
        self._xcb = _load("xcb", "libxcb.so.1")
        self._keysyms = _load("xcb-keysyms", "libxcb-keysyms.so.1")
        self._libc = ctypes.CDLL(None)
        self._declare()
        self._conn: ctypes.c_void_p | None = None
        self._root = 0
        self._keycodes: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.presses = 0

    def _declare(self) -> None:
        x, k = self._xcb, self._keysyms
        x.xcb_connect.restype = ctypes.c_void_p
        x.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
        x.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
        x.xcb_disconnect.argtypes = [ctypes.c_void_p]
        x.xcb_get_setup.restype = ctypes.c_void_p
        x.xcb_get_setup.argtypes = [ctypes.c_void_p]
        x.xcb_setup_roots_iterator.restype = _ScreenIterator
        x.xcb_setup_roots_iterator.argtypes = [ctypes.c_void_p]
        x.xcb_screen_next.argtypes = [ctypes.POINTER(_ScreenIterator)]
        x.xcb_grab_key_checked.restype = _VoidCookie
        x.xcb_grab_key_checked.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint8,
            ctypes.c_uint32,
            ctypes.c_uint16,
            ctypes.c_uint8,
            ctypes.c_uint8,
            ctypes.c_uint8,
        ]
        x.xcb_ungrab_key.restype = _VoidCookie
        x.xcb_ungrab_key.argtypes = [
            ctypes.c_void_p,
            ctypes.c_uint8,
            ctypes.c_uint32,
            ctypes.c_uint16,
        ]
        x.xcb_request_check.restype = ctypes.c_void_p
        x.xcb_request_check.argtypes = [ctypes.c_void_p, _VoidCookie]
        x.xcb_flush.argtypes = [ctypes.c_void_p]
        x.xcb_get_file_descriptor.argtypes = [ctypes.c_void_p]
        x.xcb_poll_for_event.restype = ctypes.c_void_p
        x.xcb_poll_for_event.argtypes = [ctypes.c_void_p]
        k.xcb_key_symbols_alloc.restype = ctypes.c_void_p
        k.xcb_key_symbols_alloc.argtypes = [ctypes.c_void_p]
        k.xcb_key_symbols_free.argtypes = [ctypes.c_void_p]
        k.xcb_key_symbols_get_keycode.restype = ctypes.POINTER(ctypes.c_uint8)
        k.xcb_key_symbols_get_keycode.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        self._libc.free.argtypes = [ctypes.c_void_p]

    def start(self) -> None:
        """Connect and grab; HotkeyError (with what to do) if another program holds the keys."""
        x = self._xcb
        screen = ctypes.c_int(0)
        conn = x.xcb_connect(self._display.encode(), ctypes.byref(screen))
        if not conn or x.xcb_connection_has_error(conn):
            if conn:
                x.xcb_disconnect(conn)
            raise HotkeyError(f"Cannot connect to the X display {self._display}.")
        self._conn = conn
        try:
            it = x.xcb_setup_roots_iterator(x.xcb_get_setup(conn))
            for _ in range(screen.value):
                x.xcb_screen_next(ctypes.byref(it))
            self._root = int(it.data[0])
            self._keycodes = self._keycodes_for(self.keysym)
            if not self._keycodes:
                raise HotkeyError(f"The keyboard has no key for {self.shortcut!r}.")
            grabbed: list[tuple[int, int]] = []
            # NumLock and CapsLock must not stop the shortcut: grab every combination of them
            for extra in (0, _LOCK, _MOD2, _LOCK | _MOD2):
                for code in self._keycodes:
                    cookie = x.xcb_grab_key_checked(
                        conn, 1, self._root, self.mods | extra, code, _GRAB_MODE_ASYNC,
                        _GRAB_MODE_ASYNC,
                    )  # fmt: skip
                    error = x.xcb_request_check(conn, cookie)
                    if error:
                        self._libc.free(error)
                        for m, c in grabbed:
                            x.xcb_ungrab_key(conn, c, self._root, m)
                        raise HotkeyError(
                            f"{self.shortcut} is already taken by another program: choose "
                            "another shortcut in File ▸ Settings… ▸ Appearance."
                        )
                    grabbed.append((self.mods | extra, code))
            x.xcb_flush(conn)
        except BaseException:
            self._conn = None
            x.xcb_disconnect(conn)
            raise
        self._thread = threading.Thread(target=self._listen, name="global-shortcut", daemon=True)
        self._thread.start()

    def _keycodes_for(self, keysym: int) -> list[int]:
        syms = self._keysyms.xcb_key_symbols_alloc(self._conn)
        if not syms:
            return []
        try:
            found = self._keysyms.xcb_key_symbols_get_keycode(syms, keysym)
            if not found:
                return []
            codes: list[int] = []
            i = 0
            while found[i] != 0:  # XCB_NO_SYMBOL ends the list
                codes.append(int(found[i]))
                i += 1
            self._libc.free(ctypes.cast(found, ctypes.c_void_p))
            return codes
        finally:
            self._keysyms.xcb_key_symbols_free(syms)

    def _listen(self) -> None:
        x, conn = self._xcb, self._conn
        fd = x.xcb_get_file_descriptor(conn)
        wanted = self.mods
        while not self._stop.is_set():
            readable, _, _ = select.select([fd], [], [], 0.2)
            if not readable:
                continue
            while True:
                ptr = x.xcb_poll_for_event(conn)
                if not ptr:
                    break
                event = ctypes.cast(ptr, ctypes.POINTER(_KeyPressEvent)).contents
                pressed = (
                    event.response_type & 0x7F == _KEY_PRESS
                    and event.detail in self._keycodes
                    and event.state & ~(_LOCK | _MOD2) & 0xFF == wanted
                )
                self._libc.free(ptr)
                if pressed:
                    self.presses += 1
                    self._on_press()
            if x.xcb_connection_has_error(conn):
                return  # the X server went away: nothing more to listen to

    def stop(self) -> None:
        """Release the grab and the connection."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
            self._thread = None
        if self._conn is not None:
            conn, self._conn = self._conn, None
            for extra in (0, _LOCK, _MOD2, _LOCK | _MOD2):
                for code in self._keycodes:
                    self._xcb.xcb_ungrab_key(conn, code, self._root, self.mods | extra)
            self._xcb.xcb_flush(conn)
            self._xcb.xcb_disconnect(conn)


class GlobalShortcut(QObject):
    """``activated`` fires on the GUI thread when the global shortcut is pressed.

    ``start`` returns None when the shortcut is set up, else a sentence saying why not and what
    to do instead (shown in the settings and logged; the app works without it).
    """

    activated = Signal()
    changed = Signal()
    """The way or the problem changed after ``start`` returned (a desktop's late answer)."""
    _answered = Signal()  # from the portal's thread: queued to the GUI thread

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._answered.connect(self._portal_answer)
        self._grab: X11Hotkey | None = None
        self._portal: PortalShortcut | None = None
        self._native: NativeHotkey | None = None
        self.shortcut = ""
        self.problem: str | None = None
        """Why the last ``start`` set up no shortcut (None: it works, or it is turned off)."""
        self.way = ""
        """How the shortcut works now, in words for the settings ('' when it does not)."""

    def start(
        self, shortcut: str, *, display: str | None = None, portal_bus: str | None = None
    ) -> str | None:
        """Set up ``shortcut`` the way this desktop offers ('' turns it off). ``display`` (an X
        display) or ``portal_bus`` (a D-Bus address with the desktop portal) choose the way
        instead of the session (the tests' private X server and bus)."""
        self.problem = self._start(shortcut, display, portal_bus)
        return self.problem

    def _start(self, shortcut: str, display: str | None, portal_bus: str | None) -> str | None:
        self.stop()
        self.way = ""
        if portal_bus is not None:
            return self._start_portal(shortcut, portal_bus)
        if display is None and on_gnome():
            # GNOME lets no app grab a key (Wayland or X11): the key is registered as the
            # person's custom shortcut in GNOME's settings, which runs `botpsy-desktop --quick`
            gnome = GnomeShortcut(DesktopSettings())
            try:
                if not shortcut.strip():
                    gnome.remove()
                    return None  # turned off
                binding = gnome.register(shortcut)
            except BotpsyError as exc:
                return (
                    f"GNOME did not take the shortcut: {exc.message} Bind the command "
                    "`botpsy-desktop --quick` to a key in Settings ▸ Keyboard ▸ Custom Shortcuts."
                )
            self.shortcut = shortcut
            self.way = (
                f"registered in GNOME's keyboard settings as “{NAME}” ({binding}); "
                "clearing the key here removes it there"
            )
            return None
        if not shortcut.strip():
            return None  # turned off
        platform = QGuiApplication.platformName()
        if display is None and sys.platform in ("win32", "darwin"):
            return self._start_native(shortcut)
        wayland = "wayland" in platform or bool(os.environ.get("WAYLAND_DISPLAY"))
        if display is None and sys.platform.startswith("linux") and wayland:
            # a Wayland session (the window on Wayland, or on XWayland, where an X11 grab
            # would see keys only while one of the app's windows has focus): the portal
            return self._start_portal(shortcut, "SESSION")
        if display is None and platform != "xcb":
            where = "Wayland" if "wayland" in platform else platform or "this platform"
            return (
                f"A global shortcut is not available on {where}: bind the command "
                "`botpsy-desktop --quick` to a key in your desktop's keyboard settings."
            )
        try:
            grab = X11Hotkey(shortcut, self.activated.emit, display)
            grab.start()
        except HotkeyError as exc:
            return str(exc)
        self._grab, self.shortcut = grab, shortcut
        self.way = "grabbed from the X server (X11)"
        return None

    def _start_portal(self, shortcut: str, bus: str) -> str | None:
        """Wayland (KDE Plasma, Hyprland...): the XDG desktop portal's GlobalShortcuts."""
        if not shortcut.strip():
            return None  # turned off (the closed session took the key away)
        try:
            portal = PortalShortcut(shortcut, self.activated.emit, bus, self._answered.emit)
            portal.start()
        except HotkeyError as exc:
            return str(exc)
        self._portal, self.shortcut = portal, shortcut
        return self._portal_state()

    def _portal_answer(self) -> None:
        """The desktop answered after start() stopped waiting (it asked the person)."""
        if self._portal is not None:
            self.problem = self._portal_state()
            self.changed.emit()

    def _portal_state(self) -> str | None:
        portal = self._portal
        assert portal is not None
        if portal.problem is not None:
            self.way = ""
            return portal.problem
        name = f"the desktop's GlobalShortcuts portal (version {portal.version})"
        if portal.pending:
            self.way = f"asked of {name}: allow it in the desktop's window that asks"
        elif portal.trigger:
            self.way = f"given by {name} as {portal.trigger}"
        else:
            self.way = ""
            return (
                f"{name.capitalize()} registered “{DESCRIPTION}” without a key (the desktop "
                "did not give the one asked for): choose its key in your desktop's keyboard "
                "shortcut settings."
            )
        return None

    def _start_native(self, shortcut: str) -> str | None:
        """Windows (RegisterHotKey) and macOS (Carbon's RegisterEventHotKey)."""
        if not shortcut.strip():
            return None
        try:
            native = NativeHotkey(shortcut, self.activated.emit)
            native.start()
        except HotkeyError as exc:
            return str(exc)
        self._native, self.shortcut = native, shortcut
        self.way = native.way
        return None

    def note(self) -> str:
        """For the settings: which way the key works and whether it does, or why not and what
        to do instead."""
        if self.problem:
            return self.problem
        if self._portal is not None and self._portal.pending:
            return f"Waiting for the desktop: the key is {self.way}."
        if self.way:
            return f"The key works: {self.way}."
        return (
            "Works on X11 desktops, GNOME, Wayland desktops with the GlobalShortcuts portal "
            "(KDE Plasma, Hyprland...), Windows and macOS. Elsewhere, bind the command "
            "`botpsy-desktop --quick` to a key in the system's keyboard settings."
        )

    @property
    def presses(self) -> int:
        for way in (self._grab, self._portal, self._native):
            if way is not None:
                return way.presses
        return 0

    def stop(self) -> None:
        if self._grab is not None:
            self._grab.stop()
            self._grab = None
        if self._portal is not None:
            self._portal.stop()
            self._portal = None
        if self._native is not None:
            self._native.stop()
            self._native = None
