"""Start BotPsy at login, per OS: an XDG autostart entry, a LaunchAgent, or a Run registry key."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from pathlib import Path

from botpsy_desktop.core.errors import BotpsyError

APP_ID = "botpsy-desktop"
LAUNCH_AGENT = "org.botpsy.desktop"


def launch_command() -> list[str]:
    """How to start the window minimised to the tray: the frozen app, or this Python."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--minimized"]
    return [sys.executable, "-m", "botpsy_desktop.ui.main", "--minimized"]


def _xdg_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return Path(base) / "autostart" / f"{APP_ID}.desktop"


def _agent_file() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCH_AGENT}.plist"


def is_enabled(platform: str = sys.platform) -> bool:
    if platform.startswith("linux"):
        return _xdg_file().is_file()
    if platform == "darwin":
        return _agent_file().is_file()
    if platform == "win32":  # pragma: no cover - Windows only
        return _windows_run_entry(None)
    return False


def set_enabled(enabled: bool, platform: str = sys.platform) -> None:
    """Add or remove the login item. Raises BotpsyError saying what failed."""
    command = launch_command()
    try:
        if platform.startswith("linux"):
            target = _xdg_file()
            if not enabled:
                target.unlink(missing_ok=True)
                return
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(
                "[Desktop Entry]\nType=Application\nName=BotPsy\n"
                "Comment=Private desktop assistant\n"
                f"Exec={shlex.join(command)}\nIcon=botpsy-desktop\nTerminal=false\n"
                "X-GNOME-Autostart-enabled=true\n",
                encoding="utf-8",
            )
        elif platform == "darwin":
            target = _agent_file()
            if not enabled:
                target.unlink(missing_ok=True)
                return
            args = "".join(f"<string>{a}</string>" for a in command)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(
                '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE plist PUBLIC '
                '"-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">\n'
                f'<plist version="1.0"><dict><key>Label</key><string>{LAUNCH_AGENT}</string>'
                f"<key>ProgramArguments</key><array>{args}</array>"
                "<key>RunAtLoad</key><true/></dict></plist>\n",
                encoding="utf-8",
            )
        elif platform == "win32":  # pragma: no cover - Windows only
            _windows_run_entry(command if enabled else [])
        else:
            raise BotpsyError(f"Starting at login is not supported on {platform}.")
    except OSError as exc:
        raise BotpsyError(
            f"Could not change the login item: {exc}.", "Check that your config folder is writable."
        ) from exc


def _windows_run_entry(command: list[str] | None) -> bool:  # pragma: no cover - Windows only
    """Read (None), set (a command) or delete ([]) the BotPsy value of the HKCU Run key."""
    if sys.platform != "win32":
        raise BotpsyError("The Windows login item exists only on Windows.")
    import subprocess
    import winreg

    path = r"Software\Microsoft\Windows\CurrentVersion\Run"
    access = winreg.KEY_READ if command is None else winreg.KEY_SET_VALUE
    key = winreg.OpenKey(winreg.HKEY_CURRENT_USER, path, 0, access)
    try:
        if command is None:
            try:
                winreg.QueryValueEx(key, "BotPsy")
                return True
            except FileNotFoundError:
                return False
        if command:
            winreg.SetValueEx(key, "BotPsy", 0, winreg.REG_SZ, subprocess.list2cmdline(command))
            return True
        with contextlib.suppress(FileNotFoundError):
            winreg.DeleteValue(key, "BotPsy")
        return False
    finally:
        winreg.CloseKey(key)
