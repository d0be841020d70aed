"""A streamable-HTTP tool server built with the SDK (MCPServer), run by the tests on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations


@dataclass
class HttpToolServer:
    url: str = ""
    authorizations: list[str] = field(default_factory=list)
    """The Authorization header of every request it got."""
    calls: list[dict[str, Any]] = field(default_factory=list)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def http_tool_server() -> Iterator[HttpToolServer]:
    state = HttpToolServer()
    server: MCPServer[Any] = MCPServer("units", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def convert_length(value: float, unit: str) -> str:
        """Convert a length between metres and feet (unit: 'm' or 'ft')."""
        state.calls.append({"value": value, "unit": unit})
        if unit == "m":
            return f"{value} m = {value / 0.3048:.2f} ft"
        return f"{value} ft = {value * 0.3048:.2f} m"

    app = server.streamable_http_app(host="127.0.0.1")

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            state.authorizations.append(headers.get(b"authorization", b"").decode())
        await app(scope, receive, send)

    port = _free_port()
    config = uvicorn.Config(recording, host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, name="mcp-http-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not uv.started and time.monotonic() < deadline:
        time.sleep(0.05)
    state.url = f"http://127.0.0.1:{port}/mcp"
    try:
        yield state
    finally:
        uv.should_exit = True
        thread.join(10)
