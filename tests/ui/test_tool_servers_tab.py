"""Settings > Tool servers against the published time server: status, test, switches, trust,
import and remove, with the process work off the GUI thread."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.tools import Effect
from botpsy_desktop.ui.settings import SettingsDialog


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(tmp_path)]}, "music": {"player": "none"}}),
        encoding="utf-8",
    )
    (home / "config" / "mcp.json").write_text(
        json.dumps({"mcpServers": {"time": {"command": "mcp-server-time"}}}), encoding="utf-8"
    )
    built = build_app(home)
    yield built
    built.close()


def test_tool_servers_tab(app: App, qtbot: QtBot, tmp_path: Path) -> None:
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    panel = dialog.tool_servers
    assert panel is not None
    qtbot.waitUntil(lambda: panel.tools.rowCount() == 2, timeout=10_000)
    assert "time [on] — stdio: mcp-server-time — 2 tools" in panel.list.item(0).text()
    assert panel.tools.item(0, 2).text().startswith("read-only")

    panel.test()
    qtbot.waitUntil(lambda: panel.status.text().startswith("time: ok, 2 tool(s)"), timeout=20_000)

    # one tool off, the other declared read-only: saved to mcp.json
    panel.tools.item(1, 0).setCheckState(Qt.CheckState.Unchecked)
    qtbot.waitUntil(lambda: not panel.busy, timeout=10_000)
    qtbot.waitUntil(lambda: panel.tools.rowCount() == 2, timeout=10_000)
    panel.tools.item(0, 1).setCheckState(Qt.CheckState.Checked)
    qtbot.waitUntil(lambda: not panel.busy, timeout=10_000)
    server = app.tool_servers.book.get("time")  # type: ignore[union-attr]
    assert server.switch("convert_time").enabled is False
    assert server.switch("get_current_time").effects == frozenset({Effect.READ})

    panel.trust.click()
    qtbot.waitUntil(lambda: not panel.busy, timeout=10_000)
    assert app.tool_servers.book.get("time").trust_read_only_hints  # type: ignore[union-attr]

    source = tmp_path / "claude_desktop_config.json"
    source.write_text(
        json.dumps({"mcpServers": {"clock": {"command": "mcp-server-time"}}}), encoding="utf-8"
    )
    panel.import_(str(source))
    qtbot.waitUntil(lambda: panel.list.count() == 2, timeout=10_000)
    assert "Imported clock" in panel.status.text()
    panel.list.setCurrentRow(1)
    panel.remove()
    qtbot.waitUntil(lambda: panel.list.count() == 1, timeout=10_000)
