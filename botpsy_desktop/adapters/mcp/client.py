"""Connections to tool servers (the official ``mcp`` SDK), driven from plain threads with limits.

The SDK is async. One event loop thread (:class:`LoopThread`) owns every session; each server
has one long-lived task that holds its ``mcp.Client`` open (the SDK's contexts must be entered
and left by the same task), and calls from other threads are handed to that loop and waited on
with a time limit. Whatever goes wrong with a server (it does not start, hangs, crashes, floods
its output, answers with junk, changes a tool behind our back) becomes one :class:`ServerError`
with a sentence for the conversation; the connection is dropped and started again on the next
call. A stdio server's stderr goes to the log, line by line.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Coroutine, Mapping
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from botpsy_desktop import __version__
from botpsy_desktop.adapters.mcp.config import ServerBook, ServerConfig
from botpsy_desktop.core.errors import BotpsyError, ToolError

if TYPE_CHECKING:
    import asyncio

# asyncio (and the ssl module it imports, about 5 MiB with OpenSSL) is imported where a
# connection is made: the app's process holds no event loop until a tool server is used.

log = logging.getLogger(__name__)
T = TypeVar("T")
CONNECT_TIMEOUT_S = 20.0
"""Starting a server and listing its tools (a busy machine starts Python servers slowly)."""
STDERR_LINE_CHARS = 2000


class ServerError(ToolError):
    """A tool server failed; the message says which and what happened, for model and user."""


@dataclass(frozen=True)
class RemoteTool:
    """A tool as a server lists it: its own name, description, schema and hints."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": dict(self.input_schema),
            "annotations": dict(self.annotations),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RemoteTool:
        return cls(
            str(data["name"]),
            str(data.get("description") or ""),
            dict(data.get("input_schema") or {}),
            dict(data.get("annotations") or {}),
        )

    def fingerprint(self) -> str:
        """What must not change once listed: description, schema and hints."""
        return json.dumps(self.to_json(), sort_keys=True, ensure_ascii=True)


class LoopThread:
    """One asyncio event loop on a daemon thread; ``run`` waits for a coroutine with a limit."""

    def __init__(self) -> None:
        import asyncio

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-loop", daemon=True)
        self._thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        import asyncio

        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self._loop.close()


class _StderrPump:
    """A pipe for a server's stderr and a thread that writes its lines to the log."""

    def __init__(self, server: str) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = os.fdopen(write_fd, "w", encoding="utf-8", errors="replace")
        self._reader = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self._server = server
        self.lines = 0
        self._thread = threading.Thread(target=self._pump, name=f"mcp-stderr-{server}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        try:
            for line in self._reader:
                self.lines += 1
                text = line.rstrip("\n")
                if len(text) > STDERR_LINE_CHARS:
                    text = f"{text[:STDERR_LINE_CHARS]}… ({len(text)} characters)"
                log.info("tool server %s stderr: %s", self._server, text)
        except (OSError, ValueError):
            pass
        finally:
            self._reader.close()

    def close(self) -> None:
        with suppress(OSError):
            self.writer.close()


def render_result(result: Any, limit: int) -> str:
    """A CallToolResult as text for the model: text blocks, resources, structured content."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(block.text))
        elif kind in ("image", "audio"):
            size = len(base64.b64decode(block.data or "", validate=False)) if block.data else 0
            parts.append(f"[{kind} ({block.mime_type}, {size:,} bytes) not shown]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.name}: {block.uri}]")
        elif kind == "resource":
            res = block.resource
            text = getattr(res, "text", None)
            parts.append(str(text) if text is not None else f"[binary resource {res.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    text = "\n".join(parts)
    if len(text) > limit:
        text = (
            f"{text[:limit]}\n[the tool server sent {len(text) - limit:,} more characters; "
            "they were cut off]"
        )
    return text


class ServerConnection:
    """One tool server: connects on first use, lists tools, calls them with limits, restarts."""

    def __init__(self, config: ServerConfig, book: ServerBook, loop: LoopThread) -> None:
        self.config = config
        self._book = book
        self._loop = loop
        self._lock = threading.Lock()
        self._client: Any = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Future[None] | None = None
        self._pump: _StderrPump | None = None
        self.live: dict[str, RemoteTool] = {}
        self.status = "not started"
        self.starts = 0
        self.last_error = ""

    # --- connecting ----------------------------------------------------------------------------

    def _transport(self) -> tuple[Any, Any]:
        """The SDK transport for this server (secrets filled from the keyring now)."""
        env, headers = self._book.resolve(self.config)
        if self.config.command:
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=self.config.command,
                args=list(self.config.args),
                env=env or None,
                cwd=self.config.cwd or None,
            )
            self._pump = _StderrPump(self.config.name)
            return stdio_client(params, errlog=self._pump.writer), None
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        timeout = self.config.timeout_s
        http = httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(timeout, read=max(timeout, 60.0))
        )
        return streamable_http_client(self.config.url, http_client=http), http

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """Hold the session open until asked to stop (enter and exit in this one task)."""
        import asyncio

        from mcp import Client
        from mcp.types import Implementation

        self._stop = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                transport, http = self._transport()
                if http is not None:
                    await stack.enter_async_context(http)
                client = Client(
                    transport,
                    read_timeout_seconds=self.config.timeout_s,
                    client_info=Implementation(name="botpsy-desktop", version=__version__),
                    cache=None,
                )
                await stack.enter_async_context(client)
                self._client = client
                if not ready.done():
                    ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                log.info("tool server %s: connection ended: %s", self.config.name, _why(exc))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._client = None
            if self._pump is not None:
                self._pump.close()
                self._pump = None

    async def _connect(self) -> None:
        import asyncio

        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owner = asyncio.ensure_future(self._own(ready))
        await ready
        tools = await self._list()
        self.live = {t.name: t for t in tools}

    async def _list(self) -> list[RemoteTool]:
        out: list[RemoteTool] = []
        cursor: str | None = None
        for _ in range(50):
            page = await self._client.list_tools(cursor=cursor)
            for t in page.tools:
                ann = t.annotations.model_dump(exclude_none=True) if t.annotations else {}
                out.append(RemoteTool(t.name, t.description or "", dict(t.input_schema or {}), ann))
            cursor = page.next_cursor
            if not cursor:
                break
        return out

    async def _disconnect(self) -> None:
        import asyncio

        if self._stop is not None:
            self._stop.set()
        owner, self._owner = self._owner, None
        if owner is not None and not owner.done():
            try:
                await asyncio.wait_for(asyncio.shield(owner), 8)
            except (TimeoutError, asyncio.CancelledError, Exception):
                owner.cancel()

    def _ensure(self) -> None:
        """Connected, or a ServerError; called with the lock held."""
        if self._client is not None and self._owner is not None and not self._owner.done():
            return
        self._drop()
        self.starts += 1
        try:
            self._loop.run(self._connect(), CONNECT_TIMEOUT_S)
        except Exception as exc:
            self._drop()
            self.status = f"failed to start: {_why(exc)}"
            raise self._error(f"could not be started or reached ({_why(exc)})") from exc
        self.status = "connected"

    def _drop(self) -> None:
        if self._owner is None and self._client is None:
            return
        try:
            self._loop.run(self._disconnect(), 10)
        except Exception as exc:
            log.info("tool server %s: stopping it failed: %s", self.config.name, _why(exc))
        self._client = None

    def _error(self, what: str) -> ServerError:
        self.last_error = what
        return ServerError(
            f"The tool server '{self.config.name}' {what}. Nothing more was done; it will be "
            "started again on the next call. Tell the user, and do not retry more than once."
        )

    # --- public --------------------------------------------------------------------------------

    def list_tools(self) -> list[RemoteTool]:
        """Connect (again if needed) and return the tools the server lists now."""
        with self._lock:
            self._ensure()
            return list(self.live.values())

    def call(self, listed: RemoteTool, arguments: Mapping[str, Any]) -> str:
        """Call one tool as it was listed when added; the result as text, capped in size."""
        with self._lock:
            self._ensure()
            now = self.live.get(listed.name)
            if now is None or now.fingerprint() != listed.fingerprint():
                changed = "no longer lists it" if now is None else "changed it since it was added"
                self.last_error = f"{listed.name}: the server {changed}"
                raise ServerError(
                    f"The tool server '{self.config.name}' {changed} ({listed.name}: its "
                    "description, parameters or hints are different), so it was not run. The "
                    "user can review it in Settings > Tool servers (Test) or with "
                    f"`botpsy mcp test {self.config.name}`."
                )
            timeout = self.config.timeout_s
            import asyncio

            try:
                result = self._loop.run(
                    asyncio.wait_for(self._client.call_tool(listed.name, dict(arguments)), timeout),
                    timeout + 2,
                )
            except TimeoutError as exc:
                self._drop()
                self.status = "stopped after a timeout"
                raise self._error(
                    f"did not answer {listed.name} within {timeout:g} s and was stopped"
                ) from exc
            except BotpsyError:
                raise
            except Exception as exc:
                died = self._owner is None or self._owner.done() or "onnection closed" in str(exc)
                self._drop()
                self.status = f"failed: {_why(exc)}"
                what = "stopped or crashed during" if died else "failed on"
                raise self._error(f"{what} {listed.name} ({_why(exc)})") from exc
            if getattr(result, "is_error", False):
                text = render_result(result, self.config.max_output_chars)
                raise ToolError(f"{listed.name} reported an error: {text or 'no details'}")
            try:
                return render_result(result, self.config.max_output_chars)
            except Exception as exc:
                self._drop()
                raise self._error(f"sent a result that could not be read ({_why(exc)})") from exc

    def stop(self) -> None:
        with self._lock:
            self._drop()
            self.status = "stopped"


def _why(exc: BaseException) -> str:
    """A short description of an exception (the SDK wraps errors in groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return f"{name}: {text[:300]}" if text else name
