"""Our tools for other apps over MCP (stdio, or streamable HTTP on 127.0.0.1 with a bearer token).

Read-only tools are offered; a call runs only when the gate allows it without asking. Anything
that would need the user's approval is refused, unless the user enabled approvals for served
calls: then the request waits in the gate's approval queue (the window's, when the window hosts
the server) until someone decides, or the wait runs out (denied). Tool servers' own tools are
never passed on. Outputs are cleaned of known secrets like any tool output.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.gate import Context, Decision, Gate
from botpsy_desktop.agent.hardening import clean_output, known_secrets
from botpsy_desktop.agent.tools import Effect, Tool, ToolArgumentsError, ToolRegistry
from botpsy_desktop.core.errors import BotpsyError

log = logging.getLogger(__name__)
ORIGIN = "mcp-serve"
MAX_OUTPUT_CHARS = 20_000
CALLER = Context(("the request of another app (over MCP)",))


@dataclass
class ServeSettings:
    allow_approvals: bool = False
    """Offer tools that ask too; their calls wait in the approval queue."""
    approval_timeout_s: float = 120.0
    tool_timeout_s: float = 30.0


def _is_server_tool(tool: Tool) -> bool:
    return str(getattr(tool.handler, "__module__", "")).startswith("botpsy_desktop.adapters.mcp")


class ToolServer:
    """The MCP server face of a registry and its gate."""

    def __init__(
        self,
        registry: ToolRegistry,
        gate: Gate,
        settings: ServeSettings | None = None,
        *,
        secrets: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self.registry = registry
        self.gate = gate
        self.settings = settings or ServeSettings()
        self._secrets = secrets

    def offered(self) -> list[Tool]:
        """What other apps see: read-only tools, and (approvals enabled) the ones that ask."""
        tools = [t for t in self.registry if not _is_server_tool(t)]
        if self.settings.allow_approvals:
            return tools
        return [t for t in tools if t.read_only]

    def listing(self) -> list[Any]:
        import mcp_types as types

        out = []
        for tool in self.offered():
            out.append(
                types.Tool(
                    name=tool.name,
                    description=tool.description,
                    input_schema=tool.parameters_schema(),
                    annotations=types.ToolAnnotations(
                        read_only_hint=tool.read_only,
                        destructive_hint=Effect.DESTRUCTIVE in tool.effects,
                        open_world_hint=Effect.OUTBOUND in tool.effects,
                    ),
                )
            )
        return out

    def call(self, name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        """Run one served call through the gate; (ok, text). Blocking: call it off the loop."""
        tool = self.registry.get(name)
        if tool is None or tool.name != name or tool not in self.offered():
            return False, f"There is no tool named {name!r} here."
        try:
            args_model = tool.validate(arguments)
        except ToolArgumentsError as exc:
            return False, str(exc)
        # what another app asks for is untrusted like tool output: reads that send text to a
        # service, and every change, ask (agent/gate.py)
        verdict = self.gate.check(tool, arguments, context=CALLER)
        if verdict.decision is Decision.DENY:
            return False, verdict.message or f"{name} is not allowed."
        decided_by = "allowed (read-only)"
        if verdict.decision is Decision.ASK:
            if not self.settings.allow_approvals:
                return False, (
                    f"{name} needs the user's approval on this computer, and approvals for "
                    "other apps are switched off, so it was not run."
                )
            request = self.gate.request(
                f"call_{uuid.uuid4().hex[:12]}",
                tool,
                arguments,
                verdict,
                conversation_id=ORIGIN,
                background=True,
            )
            self.gate.inbox.post(request, origin=ORIGIN)
            deadline = time.monotonic() + self.settings.approval_timeout_s
            try:
                while not request.decided and time.monotonic() < deadline:
                    request.wait(0.1)
                if not request.decided:
                    request.deny(by="nobody in time")
            except RuntimeError:
                pass  # decided meanwhile
            finally:
                self.gate.inbox.discard(request)
            if not request.approved or not request.consume(tool.name, arguments):
                return False, f"The user did not approve {name}; it was not run."
            decided_by = request.decided_by or "user"
        log.info("served call %s (%s)", name, decided_by)
        return self._run(tool, args_model)

    def _run(self, tool: Tool, args_model: Any) -> tuple[bool, str]:
        result: dict[str, Any] = {}
        done = threading.Event()

        def target() -> None:
            try:
                value = tool.call(args_model)
                text = value if isinstance(value, str) else json.dumps(value, default=str)
                result["ok"] = (True, text)
            except BotpsyError as exc:
                result["ok"] = (False, str(exc))
            except Exception as exc:
                result["ok"] = (False, f"{tool.name} failed: {type(exc).__name__}: {exc}")
            done.set()

        threading.Thread(target=target, name=f"serve-{tool.name}", daemon=True).start()
        if not done.wait(self.settings.tool_timeout_s):
            return False, f"{tool.name} did not finish within {self.settings.tool_timeout_s:g} s."
        ok, text = result["ok"]
        return ok, clean_output(text, MAX_OUTPUT_CHARS, known_secrets(self._secrets()))

    # --- the SDK server --------------------------------------------------------------------

    def sdk_server(self) -> Any:
        import anyio.to_thread
        import mcp_types as types
        from mcp.server.lowlevel import Server

        from botpsy_desktop import __version__

        async def on_list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=self.listing())

        async def on_call_tool(ctx: Any, params: Any) -> Any:
            args = dict(params.arguments or {})
            ok, text = await anyio.to_thread.run_sync(self.call, params.name, args)
            return types.CallToolResult(
                content=[types.TextContent(type="text", text=text)], is_error=not ok
            )

        return Server(
            "botpsy-desktop",
            version=__version__,
            on_list_tools=on_list_tools,
            on_call_tool=on_call_tool,
        )

    def serve_stdio(self) -> None:
        import anyio
        from mcp.server.stdio import stdio_server

        server = self.sdk_server()

        async def main() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        anyio.run(main)

    def http_app(self, token: str) -> Any:
        """The streamable HTTP app at /mcp, refusing any request without the bearer token."""
        app = self.sdk_server().streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
        expected = f"Bearer {token}".encode()

        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                given = dict(scope.get("headers") or []).get(b"authorization", b"")
                if not hmac.compare_digest(given, expected):
                    body = b'{"error": "a valid bearer token is required"}'
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 401,
                            "headers": [
                                (b"content-type", b"application/json"),
                                (b"www-authenticate", b"Bearer"),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": body})
                    return
            await app(scope, receive, send)

        return guarded

    def http_server(self, token: str, port: int) -> Any:
        """A uvicorn server on 127.0.0.1 (``.run()`` blocks; ``.should_exit = True`` stops)."""
        import uvicorn

        config = uvicorn.Config(
            self.http_app(token), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
        return uvicorn.Server(config)


class HttpService:
    """The HTTP server on a thread of its own (the window hosts it): ``start``, ``stop``."""

    def __init__(self, server: ToolServer, token: str, port: int) -> None:
        self._uvicorn = server.http_server(token, port)
        self.url = f"http://127.0.0.1:{port}/mcp"
        self._thread = threading.Thread(target=self._run, name="mcp-serve", daemon=True)
        self.problem = ""

    def _run(self) -> None:
        try:
            self._uvicorn.run()
        except (OSError, SystemExit) as exc:  # the port is taken: uvicorn exits
            self.problem = f"{self.url} could not be opened ({exc})"
            log.warning("serving tools: %s", self.problem)

    def start(self, wait_s: float = 10.0) -> bool:
        """Start it; True once it listens (False: see ``problem``)."""
        self._thread.start()
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and self._thread.is_alive():
            if self._uvicorn.started:
                return True
            time.sleep(0.05)
        if not self.problem:
            self.problem = f"{self.url} did not start"
        return False

    def stop(self) -> None:
        self._uvicorn.should_exit = True
        if self._thread.is_alive():
            self._thread.join(10)
