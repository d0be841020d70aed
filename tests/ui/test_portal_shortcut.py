"""The global shortcut through the XDG GlobalShortcuts portal (Wayland desktops), and the key
names every way gets (the portal's trigger syntax, Windows' and macOS' key codes).

The portal test runs the real thing: xdg-desktop-portal with KDE's backend
(xdg-desktop-portal-kde) and KDE's global shortcut service (kglobalaccel5) on a private D-Bus
session, under Xvfb, where kglobalaccel grabs the key on the X server as it does in a Plasma X11
session (on Plasma Wayland, KWin hands it the key instead; the portal side is the same). The
key press is a real one (xdotool); no part of the portal is stood in for.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from botpsy_desktop.core.native_hotkeys import (
    CMD_KEY,
    CONTROL_KEY,
    MOD_ALT,
    MOD_CONTROL,
    MOD_NOREPEAT,
    MOD_SHIFT,
    MOD_WIN,
    OPTION_KEY,
    mac_hotkey,
    windows_hotkey,
)
from botpsy_desktop.core.portal_shortcuts import PortalShortcut
from botpsy_desktop.core.shortcuts import HotkeyError, xdg_trigger
from tests.helpers.services import needs, programs

PORTAL = "/usr/libexec/xdg-desktop-portal"
needs_portal = needs(
    programs("xvfb-run", "xdotool", "dbus-run-session", "kglobalaccel5", "dbus-daemon")
    and os.path.exists(PORTAL)
    and os.path.exists("/usr/share/xdg-desktop-portal/portals/kde.portal"),
    "xdg-desktop-portal with KDE's backend and kglobalaccel, Xvfb and xdotool",
    "apt install xdg-desktop-portal xdg-desktop-portal-kde xvfb xauth xdotool dbus",
)


def test_the_portal_gets_the_key_by_its_xkb_name_on_any_layout() -> None:
    assert xdg_trigger("Ctrl+Alt+Space") == "CTRL+ALT+space"
    assert xdg_trigger("Super+F12") == "LOGO+F12"
    assert xdg_trigger("ctrl + shift + B") == "CTRL+SHIFT+b"
    assert xdg_trigger("Alt+3") == "ALT+3"
    assert xdg_trigger("Ctrl+PgUp") == "CTRL+Page_Up"
    assert xdg_trigger("Ctrl+Alt+,") == "CTRL+ALT+comma"  # by name: no character in the string
    assert xdg_trigger("Alt+ñ") == "ALT+ntilde"  # a Spanish keyboard's own key
    assert xdg_trigger("Ctrl+ü") == "CTRL+udiaeresis"
    with pytest.raises(HotkeyError, match="no modifier"):
        xdg_trigger("Space")


def test_windows_and_macos_get_their_own_key_codes() -> None:
    """The OS calls themselves cannot run on Linux; what they are given is checked here."""
    assert windows_hotkey("Ctrl+Alt+Space") == (MOD_CONTROL | MOD_ALT | MOD_NOREPEAT, 0x20)
    assert windows_hotkey("Super+F12") == (MOD_WIN | MOD_NOREPEAT, 0x7B)
    assert windows_hotkey("Ctrl+Shift+b") == (MOD_CONTROL | MOD_SHIFT | MOD_NOREPEAT, ord("B"))
    # a character that is not A-Z/0-9 is the key the person's layout types it with
    on_spanish = {"ñ": 0xC0, ",": 0xBC}
    assert windows_hotkey("Alt+ñ", lambda c: on_spanish.get(c, -1)) == (
        MOD_ALT | MOD_NOREPEAT,
        0xC0,
    )
    with pytest.raises(HotkeyError, match="No key types"):
        windows_hotkey("Alt+ü", lambda c: on_spanish.get(c, -1))
    assert mac_hotkey("Ctrl+Alt+Space") == (CONTROL_KEY | OPTION_KEY, 0x31)
    assert mac_hotkey("Super+F12") == (CMD_KEY, 0x6F)
    assert mac_hotkey("Super+m") == (CMD_KEY, 0x2E)
    with pytest.raises(HotkeyError, match="macOS cannot reserve"):
        mac_hotkey("Alt+ñ")


SCRIPT = textwrap.dedent(
    """
    import subprocess, sys, time
    from PySide6.QtWidgets import QApplication
    app = QApplication(sys.argv[:1])
    from jeepney import DBusAddress, new_signal
    from jeepney.io.blocking import open_dbus_connection
    from botpsy_desktop.app import build_app
    from botpsy_desktop.core.portal_shortcuts import INTERFACE, PATH, SHORTCUT_ID
    from botpsy_desktop.ui.hotkey import GlobalShortcut
    from botpsy_desktop.ui.main_window import MainWindow
    from botpsy_desktop.ui.quick import QuickCommandBox
    from botpsy_desktop.ui.settings import SettingsDialog
    core = build_app(sys.argv[1])
    window = MainWindow(core)
    quick = QuickCommandBox(window.engine)
    shortcut = GlobalShortcut(window)
    window.global_shortcut = shortcut
    shortcut.activated.connect(quick.popup)
    print("start", shortcut.start("Ctrl+Alt+Space", portal_bus="SESSION"))
    print("note", SettingsDialog(core, window).shortcut_note.text())

    def wait(cond, seconds=5.0):
        deadline = time.monotonic() + seconds
        while not cond() and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.02)
        return cond()

    # another program on the bus sends the portal's signal: not a key press
    forger = open_dbus_connection("SESSION")
    session = shortcut._portal.session
    forger.send(new_signal(DBusAddress(PATH, interface=INTERFACE), "Activated", "osta{sv}",
                           (session, SHORTCUT_ID, 0, {})))
    subprocess.run(["xdotool", "key", "ctrl+space"], check=True)  # not the shortcut
    wait(lambda: False, 0.5)
    print("after other keys", quick.isVisible(), shortcut.presses)
    subprocess.run(["xdotool", "key", "ctrl+alt+space"], check=True)
    print("after the shortcut", wait(quick.isVisible), shortcut.presses)
    quick.hide()
    shortcut.stop()
    print("cleared", shortcut.start("", portal_bus="SESSION"), repr(shortcut.way))
    forger.close()
    window.shutdown()
    core.close()
    """
)


@needs_portal
def test_on_a_portal_desktop_the_key_opens_the_quick_box(tmp_path: Path) -> None:
    """Through build_app's window: the real portal binds Ctrl+Alt+Space, the settings say so,
    a forged signal does nothing, the real key press opens the quick box."""
    script = tmp_path / "portal.py"
    script.write_text(SCRIPT, encoding="utf-8")
    home, runtime = tmp_path / "home", tmp_path / "run"
    for folder in (home, runtime):
        folder.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "DISPLAY")}
    env.update(
        QT_QPA_PLATFORM="xcb",
        XDG_CURRENT_DESKTOP="KDE",  # the portal picks KDE's backend
        HOME=str(home),  # kglobalaccel keeps the shortcuts it learns in ~/.config
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_RUNTIME_DIR=str(runtime),
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    proc = subprocess.run(
        ["xvfb-run", "-a", "-s", "-screen 0 1024x768x24", "dbus-run-session", "--",
         sys.executable, str(script), str(tmp_path / "profile")],
        capture_output=True, text=True, timeout=90, env=env, check=False,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "start None" in out, out
    assert (
        "note The key works: given by the desktop's GlobalShortcuts portal (version 1) "
        "as Ctrl+Alt+Space." in out
    ), out
    assert "after other keys False 0" in out, out
    assert "after the shortcut True 1" in out, out
    assert "cleared None ''" in out


@needs_portal
def test_a_portal_without_global_shortcuts_says_what_to_do_instead(tmp_path: Path) -> None:
    """The desktop portal runs, but no backend of this desktop offers GlobalShortcuts (as on
    GNOME before 48, or a desktop whose portal backend has none): here, none at all."""
    (tmp_path / "portals").mkdir()
    env = {**os.environ, "XDG_DESKTOP_PORTAL_DIR": str(tmp_path / "portals")}
    bus = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert bus.stdout is not None
        portal = PortalShortcut("Ctrl+Alt+Space", lambda: None, bus.stdout.readline().strip())
        with pytest.raises(
            HotkeyError, match=r"offers no global shortcuts.*botpsy-desktop --quick"
        ):
            portal.start(wait=30)
        assert portal.version == 0
    finally:
        bus.terminate()
        bus.wait(5)
        assert bus.stdout is not None
        bus.stdout.close()


@needs_portal
def test_a_wayland_session_is_given_the_portal_way(
    qapp: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chosen by the session: on Wayland (not GNOME) the window asks the session bus's portal;
    this one has no GlobalShortcuts backend, and the settings' sentence says what to do."""
    from botpsy_desktop.ui.hotkey import GlobalShortcut

    (tmp_path / "portals").mkdir()
    env = {**os.environ, "XDG_DESKTOP_PORTAL_DIR": str(tmp_path / "portals")}
    bus = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address=1"],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        assert bus.stdout is not None
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", bus.stdout.readline().strip())
        monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
        monkeypatch.setenv("XDG_CURRENT_DESKTOP", "Hyprland")
        shortcut = GlobalShortcut()
        problem = shortcut.start("Ctrl+Alt+Space")
        assert problem is not None and "offers no global shortcuts" in problem
        assert "botpsy-desktop --quick" in shortcut.note() and shortcut.way == ""
    finally:
        bus.terminate()
        bus.wait(5)
        assert bus.stdout is not None
        bus.stdout.close()


BARE_BUS = """<busconfig>
 <type>session</type>
 <listen>unix:tmpdir=/tmp</listen>
 <auth>EXTERNAL</auth>
 <policy context="default">
  <allow send_destination="*" eavesdrop="true"/><allow eavesdrop="true"/><allow own="*"/>
 </policy>
</busconfig>"""


@needs(programs("dbus-daemon"), "dbus-daemon (a private D-Bus)", "apt install dbus")
def test_a_session_without_a_desktop_portal_says_what_to_do_instead(tmp_path: Path) -> None:
    """A session bus that can start no service at all (a bare window manager's session)."""
    config = tmp_path / "bus.conf"
    config.write_text(BARE_BUS, encoding="utf-8")
    bus = subprocess.Popen(
        ["dbus-daemon", f"--config-file={config}", "--nofork", "--nopidfile", "--print-address=1"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert bus.stdout is not None
        portal = PortalShortcut("Ctrl+Alt+Space", lambda: None, bus.stdout.readline().strip())
        with pytest.raises(HotkeyError, match=r"no desktop portal .*botpsy-desktop --quick"):
            portal.start(wait=30)
    finally:
        bus.terminate()
        bus.wait(5)
        assert bus.stdout is not None
        bus.stdout.close()
