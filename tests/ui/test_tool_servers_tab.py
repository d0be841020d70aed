"""Settings > Tool servers against the published time server: status, test, switches, trust,
import and remove, with the process work off the GUI thread."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.mcp import ServeConfig
from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.tools import Effect
from botpsy_desktop.ui.approvals import PendingApprovals
from botpsy_desktop.ui.settings import SettingsDialog
from botpsy_desktop.ui.tool_servers import start_serving
from tests.helpers.keyring_service import SecretService
from tests.helpers.services import (  # noqa: F401
    keyring_env,
    secret_service,
)

pytestmark = pytest.mark.servers


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


def test_two_switches_flipped_at_once_are_both_saved(app: App, qtbot: QtBot) -> None:
    """The second switch is flipped before the first one's save came back: each change is made
    to mcp.json as it is then, so neither undoes the other."""
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    panel = dialog.tool_servers
    assert panel is not None
    qtbot.waitUntil(lambda: panel.tools.rowCount() == 2, timeout=10_000)
    panel.tools.item(1, 0).setCheckState(Qt.CheckState.Unchecked)  # convert_time off
    panel.tools.item(0, 1).setCheckState(Qt.CheckState.Checked)  # get_current_time read-only
    book = app.tool_servers.book  # type: ignore[union-attr]

    def saved() -> bool:
        server = book.get("time")
        return server.switch("convert_time").enabled is False and server.switch(
            "get_current_time"
        ).effects == frozenset({Effect.READ})

    qtbot.waitUntil(lambda: not panel.busy and saved(), timeout=20_000)


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


def test_the_window_serves_and_asking_calls_wait_in_its_queue(
    keyring_env: SecretService,  # noqa: F811
    app: App,
    qtbot: QtBot,
    tmp_path: Path,
) -> None:
    import anyio
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    (tmp_path / "old.txt").write_text("x", encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    book = app.tool_servers.book  # type: ignore[union-attr]
    book.save_serve(ServeConfig(window=True, port=port, allow_approvals=True))
    assert book.path.read_text(encoding="utf-8").count('"allow_approvals": true') == 1
    service = start_serving(app)
    assert service is not None
    pending = PendingApprovals(app.gate.inbox, app.store.title, None)
    results: list[Any] = []

    async def client() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {book.serve_token()}"})
        async with http, Client(streamable_http_client(service.url, http_client=http)) as c:
            args = {"source": "old.txt", "destination": "new.txt"}
            results.append(await c.call_tool("rename_or_move", args))

    thread = threading.Thread(target=lambda: anyio.run(client), daemon=True)
    try:
        thread.start()
        qtbot.waitUntil(lambda: pending.count() == 1, timeout=20_000)
        (entry,) = pending.entries()
        assert "another app" in pending.origin_text(entry)
        assert "Move old.txt to new.txt" in entry.request.receipt
        assert (tmp_path / "old.txt").exists()  # nothing ran before the decision
        entry.request.approve(by="user")
        thread.join(20)
        assert results and not results[0].is_error
        assert (tmp_path / "new.txt").exists()
    finally:
        pending.close()
        service.stop()
