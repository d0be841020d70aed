"""The global shortcut for the quick-command box: parsing, and a real key grab on Xvfb."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from botpsy_desktop.ui.hotkey import GlobalShortcut, HotkeyError, parse_shortcut
from tests.helpers.services import needs, programs

CONTROL, ALT, SHIFT, SUPER = 4, 8, 1, 64


def test_shortcuts_parse_to_x11_masks_and_keysyms() -> None:
    assert parse_shortcut("Ctrl+Alt+Space") == (CONTROL | ALT, 0x20)
    assert parse_shortcut("ctrl + shift + b") == (CONTROL | SHIFT, ord("b"))
    assert parse_shortcut("Super+F12") == (SUPER, 0xFFBE + 11)
    assert parse_shortcut("Alt+3") == (ALT, ord("3"))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "not a shortcut"),
        ("Space", "no modifier"),
        ("Hyper+A", "Unknown modifier"),
        ("Ctrl+Banana", "Unknown key"),
        ("Ctrl++", "not a shortcut"),
    ],
)
def test_bad_shortcuts_say_what_to_write(text: str, says: str) -> None:
    with pytest.raises(HotkeyError, match=says):
        parse_shortcut(text)


def test_without_x11_it_says_how_to_bind_the_command(qapp: object) -> None:
    # the tests run on Qt's offscreen platform: no key can be grabbed there
    shortcut = GlobalShortcut()
    problem = shortcut.start("Ctrl+Alt+Space")
    assert problem is not None and "botpsy-desktop --quick" in problem
    assert shortcut.problem == problem
    assert shortcut.start("") is None  # turned off: nothing to report


SCRIPT = textwrap.dedent(
    """
    import subprocess, sys, time
    from PySide6.QtWidgets import QApplication
    app = QApplication(sys.argv[:1])
    from botpsy_desktop.app import build_app
    from botpsy_desktop.ui.hotkey import GlobalShortcut
    from botpsy_desktop.ui.main_window import MainWindow
    from botpsy_desktop.ui.quick import QuickCommandBox
    core = build_app(sys.argv[1])
    window = MainWindow(core)
    quick = QuickCommandBox(window.engine)
    shortcut = GlobalShortcut(window)
    shortcut.activated.connect(quick.popup)
    print("start", shortcut.start("Ctrl+Alt+Space"))
    print("taken", GlobalShortcut().start("Ctrl+Alt+Space"))

    def wait(cond, seconds=5.0):
        deadline = time.monotonic() + seconds
        while not cond() and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.02)
        return cond()

    subprocess.run(["xdotool", "key", "space"], check=True)  # not the shortcut
    subprocess.run(["xdotool", "key", "ctrl+space"], check=True)  # not the shortcut
    wait(lambda: False, 0.5)
    print("after other keys", quick.isVisible(), shortcut.presses)
    subprocess.run(["xdotool", "key", "ctrl+alt+space"], check=True)
    print("after the shortcut", wait(quick.isVisible), shortcut.presses)
    quick.hide()
    shortcut.stop()
    print("released", GlobalShortcut().start("Ctrl+Alt+Space"))
    window.shutdown()
    core.close()
    """
)


@needs(
    programs("xvfb-run", "xdotool"),
    "xvfb-run or xdotool (an X server and key presses)",
    "apt install xvfb xauth xdotool",
)
def test_the_shortcut_opens_the_quick_box_on_a_real_x_server(tmp_path: Path) -> None:
    script = tmp_path / "shortcut.py"
    script.write_text(SCRIPT, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
    env["QT_QPA_PLATFORM"] = "xcb"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        [
            "xvfb-run",
            "-a",
            "-s",
            "-screen 0 1024x768x24",
            sys.executable,
            str(script),
            str(tmp_path / "profile"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "start None" in out
    assert "taken Ctrl+Alt+Space is already taken by another program" in out
    assert "after other keys False 0" in out
    assert "after the shortcut True 1" in out
    assert "released None" in out  # stopping gave the keys back


def test_on_gnome_the_key_is_registered_in_its_settings_and_removed_when_cleared(
    qapp: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GNOME lets no app grab a key: the shortcut becomes the person's custom shortcut in
    GNOME's settings (a real dconf on a private session bus), beside their own ones, and
    clearing it in the app takes only it away."""
    from tests.helpers import desktop_session
    from tests.helpers.services import missing

    if not desktop_session.available():
        missing("a desktop session (D-Bus, gsettings)", desktop_session.INSTALL)
    media = "org.gnome.settings-daemon.plugins.media-keys"
    schemas = subprocess.run(["gsettings", "list-schemas"], capture_output=True, text=True)
    if media not in schemas.stdout.split():
        missing(f"GNOME's {media} schema", desktop_session.INSTALL)
    with desktop_session.desktop_session(tmp_path / "session") as session:
        for key, value in session.env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("XDG_CURRENT_DESKTOP", "ubuntu:GNOME")
        own = "/org/gnome/settings-daemon/plugins/media-keys/custom-keybindings/custom0/"

        def gsettings(*args: str) -> str:
            done = subprocess.run(["gsettings", *args], capture_output=True, text=True, check=True)
            return done.stdout.strip()

        gsettings("set", media, "custom-keybindings", f"['{own}']")  # the person's own one
        shortcut = GlobalShortcut()
        assert shortcut.start("Ctrl+Alt+Space") is None, shortcut.problem
        ours = "/org/gnome/settings-daemon/plugins/media-keys/custom-keybindings/botpsy-quick/"
        assert gsettings("get", media, "custom-keybindings") == f"['{own}', '{ours}']"
        schema = f"{media}.custom-keybinding:{ours}"
        assert gsettings("get", schema, "binding") == "'<Primary><Alt>space'"
        assert gsettings("get", schema, "name") == "'BotPsy quick command'"
        assert gsettings("get", schema, "command").endswith(" --quick'")
        assert "GNOME" in shortcut.way
        # another key replaces it in place; a key GNOME cannot name says so, nothing changes
        assert shortcut.start("Super+F12") is None
        assert gsettings("get", schema, "binding") == "'<Super>F12'"
        problem = shortcut.start("Ctrl+Banana")
        assert problem is not None and "Unknown key" in problem
        assert gsettings("get", schema, "binding") == "'<Super>F12'"
        # cleared: only the app's entry goes
        assert shortcut.start("") is None
        assert gsettings("get", media, "custom-keybindings") == f"['{own}']"
        assert gsettings("get", schema, "binding") == "''"
