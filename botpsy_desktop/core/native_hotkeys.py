"""A global shortcut on Windows (RegisterHotKey) and macOS (Carbon's RegisterEventHotKey).

Both systems have an API that reserves exactly one key combination for an app and tells it
when it is pressed; both are called through ctypes (nothing to install or ship). A library
such as pynput was considered and not taken: its GlobalHotKeys watches *every* key typed (a
low-level keyboard hook on Windows, a Quartz event tap on macOS, which needs the person to
grant Accessibility / Input Monitoring access), where these APIs see one combination and need
no permission. They cannot run on Linux: what can (the key translation) is tested there, the
calls into the OS were not run in this project's tests.

Keyboard layouts: on Windows a letter is the layout's own virtual key (VK_A is the key that
types "a" on the person's layout) and any other character is looked up on the current layout
(VkKeyScanW). On macOS, Space, Return, Tab, the arrows, F1-F20 and the editing keys are the
same on every layout; a letter, digit or punctuation key is matched by its position on a US
keyboard (Carbon hot keys take a key position), so on other layouts prefer those named keys.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import threading
from collections.abc import Callable
from typing import Any

from botpsy_desktop.core.shortcuts import (
    CONTROL,
    F1,
    MOD1,
    MOD4,
    SHIFT,
    SPECIAL_KEYSYMS,
    HotkeyError,
    parse_shortcut,
)

_PLATFORM: str = sys.platform  # (a plain str: mypy checks both systems' code on any one)

# -- Windows ----------------------------------------------------------------------------------
MOD_ALT, MOD_CONTROL, MOD_SHIFT, MOD_WIN, MOD_NOREPEAT = 0x1, 0x2, 0x4, 0x8, 0x4000
WM_HOTKEY, WM_QUIT = 0x0312, 0x0012
ERROR_HOTKEY_ALREADY_REGISTERED = 1409
_WIN_VK = {
    0x0020: 0x20,  # space
    0xFF0D: 0x0D,  # return
    0xFF09: 0x09,  # tab
    0xFF08: 0x08,  # backspace
    0xFF1B: 0x1B,  # escape
    0xFF63: 0x2D,  # insert
    0xFFFF: 0x2E,  # delete
    0xFF50: 0x24,  # home
    0xFF57: 0x23,  # end
    0xFF55: 0x21,  # page up
    0xFF56: 0x22,  # page down
    0xFF51: 0x25,  # left
    0xFF52: 0x26,  # up
    0xFF53: 0x27,  # right
    0xFF54: 0x28,  # down
    0xFF13: 0x13,  # pause
    0xFF61: 0x2C,  # print screen
}


def windows_hotkey(
    shortcut: str, vk_for_char: Callable[[str], int] | None = None
) -> tuple[int, int]:
    """``Ctrl+Alt+Space`` -> (RegisterHotKey modifiers, virtual key). ``vk_for_char`` finds
    the key that types a character on the current layout (VkKeyScanW on Windows; -1: none)."""
    mods, keysym = parse_shortcut(shortcut)
    flags = MOD_NOREPEAT
    for mask, flag in (
        (CONTROL, MOD_CONTROL),
        (MOD1, MOD_ALT),
        (SHIFT, MOD_SHIFT),
        (MOD4, MOD_WIN),
    ):
        if mods & mask:
            flags |= flag
    if keysym in _WIN_VK:
        return flags, _WIN_VK[keysym]
    if F1 <= keysym < F1 + 24:
        return flags, 0x70 + keysym - F1
    char = chr(keysym)
    if char.isascii() and char.isalnum():
        return flags, ord(char.upper())  # VK_A..VK_Z, VK_0..VK_9: the layout's own keys
    found = vk_for_char(char) if vk_for_char is not None else -1
    if found == -1 or found & 0xFF in (0, 0xFF):
        raise HotkeyError(
            f"No key types {char!r} on this keyboard layout: choose a letter, digit, F1-F24 "
            "or Space."
        )
    return flags, found & 0xFF


# -- macOS ------------------------------------------------------------------------------------
CMD_KEY, SHIFT_KEY, OPTION_KEY, CONTROL_KEY = 0x100, 0x200, 0x800, 0x1000
_MAC_NAMED = {
    0x0020: 0x31,
    0xFF0D: 0x24,
    0xFF09: 0x30,
    0xFF08: 0x33,
    0xFF1B: 0x35,
    0xFF63: 0x72,
    0xFFFF: 0x75,
    0xFF50: 0x73,
    0xFF57: 0x77,
    0xFF55: 0x74,
    0xFF56: 0x79,
    0xFF51: 0x7B,
    0xFF52: 0x7E,
    0xFF53: 0x7C,
    0xFF54: 0x7D,
}
_MAC_F = [0x7A, 0x78, 0x63, 0x76, 0x60, 0x61, 0x62, 0x64, 0x65, 0x6D, 0x67, 0x6F, 0x69, 0x6B]
_MAC_F += [0x71, 0x6A, 0x40, 0x4F, 0x50, 0x5A]  # F15-F20
_MAC_US = dict(
    zip(
        "asdfhgzxcv bqweryt123465=97-80]ou[ip lj'k;\\,/nm.",
        range(0x00, 0x30),
        strict=True,
    )
)
_MAC_US.pop(" ")
_MAC_US["`"] = 0x32


def mac_hotkey(shortcut: str) -> tuple[int, int]:
    """``Ctrl+Alt+Space`` -> (Carbon modifiers, virtual key code). Super is Command."""
    mods, keysym = parse_shortcut(shortcut)
    flags = 0
    for mask, flag in (
        (CONTROL, CONTROL_KEY),
        (MOD1, OPTION_KEY),
        (SHIFT, SHIFT_KEY),
        (MOD4, CMD_KEY),
    ):
        if mods & mask:
            flags |= flag
    if keysym in _MAC_NAMED:
        return flags, _MAC_NAMED[keysym]
    if F1 <= keysym < F1 + len(_MAC_F):
        return flags, _MAC_F[keysym - F1]
    code = _MAC_US.get(chr(keysym))
    if code is None:
        raise HotkeyError(
            f"macOS cannot reserve {shortcut!r}: choose a letter, digit, F1-F20 or Space."
        )
    return flags, code


# -- the hot key itself -----------------------------------------------------------------------
class NativeHotkey:
    """Reserves one key combination with the OS and calls ``on_press`` when it is pressed
    (Windows: on its own thread; macOS: on the main thread, from the app's event loop)."""

    def __init__(self, shortcut: str, on_press: Callable[[], None]) -> None:
        if _PLATFORM == "win32":
            self.mods, self.key = windows_hotkey(shortcut, _vk_key_scan)
            self.way = "reserved with Windows (RegisterHotKey)"
        elif _PLATFORM == "darwin":
            self.mods, self.key = mac_hotkey(shortcut)
            self.way = "reserved with macOS (Carbon hot key)"
        else:
            raise HotkeyError("This way is for Windows and macOS only.")
        self.shortcut = shortcut
        self.presses = 0
        self._on_press = on_press
        self._thread: threading.Thread | None = None
        self._thread_id = 0
        self._ready = threading.Event()
        self._problem: str | None = None
        self._keep: list[Any] = []  # the callback and references the OS holds

    def _pressed(self) -> None:
        self.presses += 1
        with contextlib.suppress(Exception):  # a listener's bug must not end the listening
            self._on_press()

    def start(self) -> None:
        """Reserve the key; HotkeyError (with what to do) if another program holds it."""
        if _PLATFORM == "win32":
            self._thread = threading.Thread(target=self._windows, name="hotkey", daemon=True)
            self._thread.start()
            self._ready.wait(5)
            if self._problem is not None:
                raise HotkeyError(self._problem)
        else:
            self._mac_start()

    def stop(self) -> None:
        if _PLATFORM == "win32" and self._thread is not None:
            user32: Any = ctypes.windll.user32  # type: ignore[attr-defined,unused-ignore]
            user32.PostThreadMessageW(self._thread_id, WM_QUIT, 0, 0)
            self._thread.join(2)
            self._thread = None
        elif _PLATFORM == "darwin" and self._keep:
            carbon = self._keep[0]
            carbon.UnregisterEventHotKey(self._keep[2])
            carbon.RemoveEventHandler(self._keep[3])
            self._keep.clear()

    def _windows(self) -> None:
        from ctypes import wintypes

        user32: Any = ctypes.windll.user32  # type: ignore[attr-defined,unused-ignore]
        kernel32: Any = ctypes.windll.kernel32  # type: ignore[attr-defined,unused-ignore]
        self._thread_id = kernel32.GetCurrentThreadId()
        if not user32.RegisterHotKey(None, 1, self.mods, self.key):
            error = kernel32.GetLastError()
            self._problem = (
                f"{self.shortcut} is already taken by another program: choose another shortcut "
                "in File ▸ Settings… ▸ Appearance."
                if error == ERROR_HOTKEY_ALREADY_REGISTERED
                else f"Windows refused the shortcut {self.shortcut} (error {error})."
            )
            self._ready.set()
            return
        self._ready.set()
        msg = wintypes.MSG()
        try:
            while user32.GetMessageW(ctypes.byref(msg), None, 0, 0) > 0:
                if msg.message == WM_HOTKEY:
                    self._pressed()
        finally:
            user32.UnregisterHotKey(None, 1)

    def _mac_start(self) -> None:
        carbon: Any = ctypes.CDLL("/System/Library/Frameworks/Carbon.framework/Carbon")

        class EventTypeSpec(ctypes.Structure):
            _fields_ = [("eventClass", ctypes.c_uint32), ("eventKind", ctypes.c_uint32)]

        class EventHotKeyID(ctypes.Structure):
            _fields_ = [("signature", ctypes.c_uint32), ("id", ctypes.c_uint32)]

        handler_type = ctypes.CFUNCTYPE(
            ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
        )
        carbon.GetApplicationEventTarget.restype = ctypes.c_void_p
        carbon.InstallEventHandler.argtypes = [
            ctypes.c_void_p, handler_type, ctypes.c_uint32, ctypes.POINTER(EventTypeSpec),
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
        ]  # fmt: skip
        carbon.RegisterEventHotKey.argtypes = [
            ctypes.c_uint32, ctypes.c_uint32, EventHotKeyID, ctypes.c_void_p, ctypes.c_uint32,
            ctypes.POINTER(ctypes.c_void_p),
        ]  # fmt: skip
        carbon.UnregisterEventHotKey.argtypes = [ctypes.c_void_p]
        carbon.RemoveEventHandler.argtypes = [ctypes.c_void_p]

        def handler(_call: Any, _event: Any, _data: Any) -> int:
            self._pressed()
            return 0

        callback = handler_type(handler)
        target = carbon.GetApplicationEventTarget()
        spec = EventTypeSpec(int.from_bytes(b"keyb", "big"), 5)  # kEventHotKeyPressed
        handler_ref = ctypes.c_void_p()
        status = carbon.InstallEventHandler(
            target, callback, 1, ctypes.byref(spec), None, ctypes.byref(handler_ref)
        )
        if status != 0:
            raise HotkeyError(f"macOS refused the shortcut's handler (error {status}).")
        hotkey_ref = ctypes.c_void_p()
        ident = EventHotKeyID(int.from_bytes(b"BtPy", "big"), 1)
        status = carbon.RegisterEventHotKey(
            self.key, self.mods, ident, target, 0, ctypes.byref(hotkey_ref)
        )
        if status != 0:
            carbon.RemoveEventHandler(handler_ref)
            raise HotkeyError(
                f"{self.shortcut} is already taken (macOS error {status}): choose another "
                "shortcut in File ▸ Settings… ▸ Appearance."
            )
        self._keep = [carbon, callback, hotkey_ref, handler_ref]


def _vk_key_scan(char: str) -> int:
    user32: Any = ctypes.windll.user32  # type: ignore[attr-defined,unused-ignore]
    return int(user32.VkKeyScanW(ord(char)))


__all__ = ["SPECIAL_KEYSYMS", "NativeHotkey", "mac_hotkey", "windows_hotkey"]
