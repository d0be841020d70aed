"""`botpsy mcp` through the real CLI, and `botpsy mcp serve` driven by the SDK's own client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from botpsy_desktop.agent.events import ApprovalRequest
from botpsy_desktop.agent.mcp_serve import ServeSettings, ToolServer
from botpsy_desktop.app import build_app
from botpsy_desktop.cli import main
from tests.helpers.keyring_service import SecretService
from tests.helpers.services import (  # noqa: F401
    keyring_env,
    secret_service,
)

pytestmark = pytest.mark.servers

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    files = tmp_path / "files"
    (files / "Documents").mkdir(parents=True)
    (files / "Documents" / "notes.txt").write_text("remember the milk", encoding="utf-8")
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}, "music": {"player": "none"}}),
        encoding="utf-8",
    )
    return home


def test_add_list_tool_switch_test_remove_and_doctor(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = ["--home", str(profile)]
    assert main([*home, "mcp", "add", "time", "--", "mcp-server-time"]) == 0
    out = capsys.readouterr().out
    assert "time: ok, 2 tool(s): time__get_current_time, time__convert_time" in out
    assert main([*home, "mcp", "tool", "time__convert_time", "--off"]) == 0
    assert main([*home, "mcp", "tool", "time", "get_current_time", "--effects", "read"]) == 0
    capsys.readouterr()
    assert main([*home, "mcp", "list"]) == 0
    out = capsys.readouterr().out
    assert "time [on] stdio: mcp-server-time" in out
    assert "time__convert_time (off)" in out
    assert "time__get_current_time — you declared: read — the server says: read-only" in out
    assert main([*home, "tools", "--json"]) == 0
    tools = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert tools["time__get_current_time"]["needs_approval"] is False
    assert "time__convert_time" not in tools
    assert main([*home, "doctor"]) in (0, 1)  # no model here: the model check fails
    out = capsys.readouterr().out
    assert "[ok  ] tool server time: stdio, 2 tool(s), 1 on: get_current_time" in out
    assert main([*home, "mcp", "add", "time", "--", "mcp-server-time"]) == 1
    assert "exists already" in capsys.readouterr().err
    assert main([*home, "mcp", "add", "bad", "--", str(profile / "nope")]) == 1
    assert "bad: FAILED" in capsys.readouterr().err
    assert main([*home, "mcp", "remove", "time"]) == 0
    assert main([*home, "mcp", "remove", "bad"]) == 0
    capsys.readouterr()
    assert main([*home, "mcp", "list"]) == 0
    assert "No tool servers" in capsys.readouterr().out


def test_import_moves_secrets_to_the_keyring(
    keyring_env: SecretService,  # noqa: F811
    profile: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "gh": {
                        "command": "npx",
                        "args": ["-y", "@modelcontextprotocol/server-github"],
                        "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_secret123"},
                    }
                }
            }
        ),
        encoding="utf-8",
    )
    assert main(["--home", str(profile), "mcp", "import", str(source)]) == 0
    assert "Imported from" in capsys.readouterr().out
    text = (profile / "config" / "mcp.json").read_text(encoding="utf-8")
    assert "ghp_secret123" not in text
    assert "${keyring:mcp:gh:env:GITHUB_PERSONAL_ACCESS_TOKEN}" in text


def _env() -> dict[str, str]:
    return {"PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}


def test_serve_over_stdio_offers_read_only_tools_to_the_sdk_client(profile: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "botpsy_desktop", "--home", str(profile), "mcp", "serve"],
        env=_env(),
        cwd=str(REPO),
    )

    async def session() -> tuple[list[Any], Any, Any]:
        with anyio.fail_after(60):
            async with Client(params) as client:
                listed = (await client.list_tools()).tools
                ok = await client.call_tool("list_folder", {"path": "Documents"})
                refused = await client.call_tool(
                    "rename_or_move", {"source": "a", "destination": "b"}
                )
                return listed, ok, refused

    listed, ok, refused = anyio.run(session)
    names = {t.name for t in listed}
    assert "list_folder" in names and "read_text_file" in names
    assert all(t.annotations.read_only_hint for t in listed)
    assert "rename_or_move" not in names and "move_to_trash" not in names
    assert not ok.is_error and "notes.txt" in ok.content[0].text
    assert refused.is_error and "no tool named" in refused.content[0].text


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_over_http_needs_the_bearer_token(profile: Path) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    port = _port()
    serve = ["mcp", "serve", "--http", str(port), "--token-file", "-"]  # read from stdin
    proc = subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), *serve],
        env={**os.environ, **_env()},
        cwd=REPO,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("tok-123\n")
        proc.stdin.flush()
        # the token is not on the command line other local users can read
        assert "tok-123" not in " ".join(proc.args)
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                r = httpx2.post(url, json={})
                break
            except httpx2.TransportError:
                time.sleep(0.2)
        assert r.status_code == 401

        async def listed() -> list[str]:
            with anyio.fail_after(30):
                http = httpx2.AsyncClient(headers={"Authorization": "Bearer tok-123"})
                async with http, Client(streamable_http_client(url, http_client=http)) as c:
                    return [t.name for t in (await c.list_tools()).tools]

        assert "list_folder" in anyio.run(listed)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert "tok-123" not in stderr  # a token given is never printed


def test_serve_token_on_the_command_line_warns(profile: Path) -> None:
    """``--token`` still works, but says that other local users can read it."""
    import argparse
    import io

    from botpsy_desktop.cli.mcp import _serve_token

    err = io.StringIO()
    args = argparse.Namespace(token="tok-9", token_file=None)
    assert _serve_token(args, err) == "tok-9"
    assert "other users of this computer can read it" in err.getvalue()
    token_file = profile / "token.txt"
    token_file.write_text("tok-file\n", encoding="utf-8")
    err = io.StringIO()
    assert _serve_token(argparse.Namespace(token=None, token_file=str(token_file)), err) == (
        "tok-file"
    )
    assert err.getvalue() == ""


def test_served_calls_that_ask_wait_in_the_approval_queue(profile: Path, tmp_path: Path) -> None:
    """Approvals enabled: a served call that asks waits in the gate's inbox (the window's
    approval queue when the window hosts the server) and runs only once approved."""
    (tmp_path / "files" / "Documents" / "old.txt").write_text("x", encoding="utf-8")
    app = build_app(profile)
    try:
        refusing = ToolServer(app.registry, app.gate)
        ok, text = refusing.call("rename_or_move", {"source": "a", "destination": "b"})
        assert not ok and "no tool named" in text
        server = ToolServer(
            app.registry, app.gate, ServeSettings(allow_approvals=True, approval_timeout_s=20)
        )
        seen: list[ApprovalRequest] = []

        def listener(request: ApprovalRequest) -> None:
            if not request.decided:
                seen.append(request)
                decide = request.deny if len(seen) == 1 else request.approve
                threading.Timer(0.2, lambda: decide(by="user")).start()

        app.gate.inbox.add_listener(listener)
        args = {"source": "Documents/old.txt", "destination": "Documents/new.txt"}
        ok, text = server.call("rename_or_move", args)
        assert not ok and "did not approve" in text
        assert (tmp_path / "files" / "Documents" / "old.txt").exists()
        ok, text = server.call("rename_or_move", args)
        assert ok, text
        assert (tmp_path / "files" / "Documents" / "new.txt").exists()
        assert len(seen) == 2 and "Move Documents/old.txt to Documents/new.txt" in seen[0].receipt
    finally:
        app.close()
