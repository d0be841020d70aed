"""Start at login writes and removes the real XDG autostart entry (Linux) or LaunchAgent."""

from __future__ import annotations

from pathlib import Path

import pytest

from botpsy_desktop.core import autostart


def test_xdg_autostart_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert not autostart.is_enabled("linux")
    autostart.set_enabled(True, "linux")
    entry = tmp_path / "autostart" / "botpsy-desktop.desktop"
    text = entry.read_text(encoding="utf-8")
    assert "Exec=" in text and "botpsy_desktop.ui.main --minimized" in text
    assert autostart.is_enabled("linux")
    autostart.set_enabled(False, "linux")
    assert not entry.exists() and not autostart.is_enabled("linux")


def test_macos_launch_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    autostart.set_enabled(True, "darwin")
    plist = tmp_path / "Library" / "LaunchAgents" / "org.botpsy.desktop.plist"
    assert "<key>RunAtLoad</key><true/>" in plist.read_text(encoding="utf-8")
    autostart.set_enabled(False, "darwin")
    assert not plist.exists()
