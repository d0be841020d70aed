"""Global shortcuts named by key: the app's ``Ctrl+Alt+Space`` in each desktop's own terms.

Qt-free, so that every way of getting a global shortcut (ui/hotkey.py: X11, the XDG portal,
Windows, macOS) and its tests share one parser. A shortcut names a *key* (an X keysym: the
same name on every keyboard layout), never the character a layout happens to put there, so
``Ctrl+Alt+Space`` or ``Super+F12`` mean the same key on a Spanish, German or French keyboard,
and a letter names the key that types that letter on the person's layout.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

# X11 modifier masks (the parser's modifiers; each desktop's are translated from these)
SHIFT, LOCK, CONTROL, MOD1, MOD2, MOD4 = 1, 2, 4, 8, 16, 64

# the app's key names -> X keysym, for the keys that are not a printable Latin-1 character
SPECIAL_KEYSYMS = {
    "space": 0x0020,
    "return": 0xFF0D,
    "enter": 0xFF0D,
    "tab": 0xFF09,
    "backspace": 0xFF08,
    "esc": 0xFF1B,
    "escape": 0xFF1B,
    "ins": 0xFF63,
    "insert": 0xFF63,
    "del": 0xFFFF,
    "delete": 0xFFFF,
    "home": 0xFF50,
    "end": 0xFF57,
    "pgup": 0xFF55,
    "pgdown": 0xFF56,
    "left": 0xFF51,
    "up": 0xFF52,
    "right": 0xFF53,
    "down": 0xFF54,
    "pause": 0xFF13,
    "print": 0xFF61,
}
F1 = 0xFFBE

# X keysym -> its name in the XKB keysym table (what the XDG shortcut syntax takes)
_KEYSYM_NAMES = {
    0x0020: "space",
    0xFF0D: "Return",
    0xFF09: "Tab",
    0xFF08: "BackSpace",
    0xFF1B: "Escape",
    0xFF63: "Insert",
    0xFFFF: "Delete",
    0xFF50: "Home",
    0xFF57: "End",
    0xFF55: "Page_Up",
    0xFF56: "Page_Down",
    0xFF51: "Left",
    0xFF52: "Up",
    0xFF53: "Right",
    0xFF54: "Down",
    0xFF13: "Pause",
    0xFF61: "Print",
}
_PUNCTUATION_NAMES = (
    "exclam quotedbl numbersign dollar percent ampersand apostrophe parenleft parenright "
    "asterisk plus comma minus period slash colon semicolon less equal greater question at "
    "bracketleft backslash bracketright asciicircum underscore grave braceleft bar braceright "
    "asciitilde"
)
# ASCII punctuation (the XKB names; the keysym of each is the character's code)
_KEYSYM_NAMES.update(
    zip(map(ord, "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"), _PUNCTUATION_NAMES.split(), strict=True)
)


class HotkeyError(Exception):
    """The shortcut could not be set up; the message says why and what to do instead."""


def parse_shortcut(text: str) -> tuple[int, int]:
    """``"Ctrl+Alt+Space"`` -> (X modifier mask, X keysym); HotkeyError if it cannot be grabbed."""
    parts = [p.strip() for p in text.replace(" ", "").split("+")]
    if not text.strip() or any(not p for p in parts[:-1]) or not parts[-1]:
        raise HotkeyError(f"{text!r} is not a shortcut. Write it like Ctrl+Alt+Space.")
    mods = 0
    for name in parts[:-1]:
        mask = {"ctrl": CONTROL, "control": CONTROL, "alt": MOD1, "shift": SHIFT}.get(
            name.lower(), MOD4 if name.lower() in ("meta", "super", "win") else None
        )
        if mask is None:
            raise HotkeyError(
                f"Unknown modifier {name!r} in {text!r}: use Ctrl, Alt, Shift or Super."
            )
        mods |= mask
    key = parts[-1]
    if key.lower() in SPECIAL_KEYSYMS:
        keysym = SPECIAL_KEYSYMS[key.lower()]
    elif key.upper().startswith("F") and key[1:].isdigit() and 1 <= int(key[1:]) <= 24:
        keysym = F1 + int(key[1:]) - 1
    elif len(key) == 1 and 0x20 < ord(key.lower()) <= 0xFF:
        keysym = ord(key.lower())
    else:
        raise HotkeyError(f"Unknown key {key!r} in {text!r}: use a letter, digit, F1-F24 or Space.")
    if mods == 0:
        raise HotkeyError(
            f"{text!r} has no modifier: a global shortcut needs Ctrl, Alt or Super, "
            "or it would take the key from every other program."
        )
    return mods, keysym


@functools.cache
def _xkbcommon() -> ctypes.CDLL | None:
    path = ctypes.util.find_library("xkbcommon")
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    lib.xkb_keysym_get_name.restype = ctypes.c_int
    lib.xkb_keysym_get_name.argtypes = [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_size_t]
    return lib


def keysym_name(keysym: int) -> str:
    """The XKB name of a keysym the parser makes (``0x20`` -> ``space``, ``0xF1`` -> ``ntilde``)."""
    if keysym in _KEYSYM_NAMES:
        return _KEYSYM_NAMES[keysym]
    if F1 <= keysym < F1 + 24:
        return f"F{keysym - F1 + 1}"
    if keysym < 0x80 and chr(keysym).isalnum():
        return chr(keysym)
    lib = _xkbcommon()  # a Latin-1 letter (ñ, ü, é): its name comes from XKB's own table
    if lib is not None:
        buffer = ctypes.create_string_buffer(64)
        if lib.xkb_keysym_get_name(keysym, buffer, len(buffer)) > 0:
            return buffer.value.decode("ascii")
    raise HotkeyError(
        f"The key {chr(keysym)!r} has no name the desktop knows here (libxkbcommon is missing): "
        "choose a letter, digit, F1-F24 or Space."
    )


def xdg_trigger(shortcut: str) -> str:
    """The shortcut in the XDG shortcut syntax the GlobalShortcuts portal takes as
    ``preferred_trigger`` (``Ctrl+Alt+Space`` -> ``CTRL+ALT+space``, ``Super+F12`` ->
    ``LOGO+F12``): modifiers in capitals, the key by its XKB keysym name."""
    mods, keysym = parse_shortcut(shortcut)
    names = [
        name
        for mask, name in ((CONTROL, "CTRL"), (MOD1, "ALT"), (SHIFT, "SHIFT"), (MOD4, "LOGO"))
        if mods & mask
    ]
    return "+".join([*names, keysym_name(keysym)])
