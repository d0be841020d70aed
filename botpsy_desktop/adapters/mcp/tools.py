"""Tool servers' tools as our own: namespaced names, their JSON Schema, effects the user declares.

A server's tool is declared through the same path as ours (core/tools.py ``Tool``): its JSON
Schema is carried as given (``input_schema``: the prompt, the XML parser's type conversion and
the call grammar read it; arguments are checked against it in full), its handler calls the
server, and its effects are what the *user* declared. A server's own hints (``readOnlyHint``,
``destructiveHint``, ``openWorldHint``) are untrusted by the spec: they are shown in the receipt
and decide nothing, unless the user chose, for that server, to trust its read-only hints.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from botpsy_desktop.adapters.mcp.client import LoopThread, RemoteTool, ServerConnection
from botpsy_desktop.adapters.mcp.config import ServerBook, ServerConfig
from botpsy_desktop.adapters.untrusted import neutralize
from botpsy_desktop.core.errors import BotpsyError, ConfigError
from botpsy_desktop.core.tools import ALL_ARGUMENTS, Effect, Tool

log = logging.getLogger(__name__)
SEPARATOR = "__"
MAX_NAME = 64
MAX_DESCRIPTION = 1024
UNDECLARED = frozenset({Effect.LOCAL_WRITE, Effect.OUTBOUND})
"""What a server's tool is taken to do until the user says otherwise: every call asks."""


class ServerArgs(BaseModel):
    """Arguments for a tool server's tool (checked against its JSON Schema)."""

    model_config = ConfigDict(extra="allow")


def _ident(text: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return out if out and not out[0].isdigit() else f"t_{out}"


def namespaced(server: str, tool: str) -> str:
    """``time`` + ``get_current_time`` -> ``time__get_current_time`` (an ASCII identifier)."""
    return f"{_ident(server)}{SEPARATOR}{_ident(tool)}"[:MAX_NAME]


_HINT_WORDS: tuple[tuple[str, str, str | None], ...] = (
    ("read_only_hint", "read-only", "changes things"),
    ("destructive_hint", "destructive", "not destructive"),
    ("open_world_hint", "reaches the outside world", "closed world"),
    ("idempotent_hint", "idempotent", None),
)
"""Each hint a server may give, in words when it says true and when it says false."""


def hint_words(annotations: Mapping[str, Any]) -> str:
    """A server's hints in words ("read-only, not destructive"), or '' when it gives none."""
    words = []
    for key, if_true, if_false in _HINT_WORDS:
        value = annotations.get(key)
        if value is True:
            words.append(if_true)
        elif value is False and if_false is not None:
            words.append(if_false)
    return ", ".join(words)


def effects_for(server: ServerConfig, remote: RemoteTool) -> tuple[frozenset[Effect], str]:
    """What the gate is told the tool does, and who said so (for the receipt)."""
    declared = server.switch(remote.name).effects
    if declared is not None:
        return declared, "you declared what it does"
    ann = remote.annotations
    if server.trust_read_only_hints and ann.get("read_only_hint") is True:
        return frozenset({Effect.READ}), "you chose to trust this server's read-only hints"
    effects = set(UNDECLARED)
    if ann.get("destructive_hint") is True:
        effects.add(Effect.DESTRUCTIVE)  # a hint may only add caution
    return frozenset(effects), "what it does is not declared by you, so every call asks"


_PROSE = frozenset({"description", "title"})
"""Schema keys whose text is only read (by the model), never checked against a value."""


def _defused(node: Any, where: str, tool: str) -> Any:
    """A server's schema with its prose defused like tool output (adapters/untrusted.py): chat
    control tokens and call tags in descriptions and titles made inert. Markup anywhere else
    (a property name, an enum value: text a call must match exactly) leaves the tool out."""
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if neutralize(str(key)) != str(key):
                raise ConfigError(f"{tool}: its schema's name {key!r} holds markup.", "")
            if key in _PROSE and isinstance(value, str):
                out[key] = neutralize(value)
            else:
                out[key] = _defused(value, f"{where}.{key}", tool)
        return out
    if isinstance(node, list):
        return [_defused(v, where, tool) for v in node]
    if isinstance(node, str) and neutralize(node) != node:
        raise ConfigError(f"{tool}: its schema's value at {where} holds markup.", "")
    return node


def _schema(remote: RemoteTool) -> dict[str, Any]:
    given = dict(remote.input_schema) if isinstance(remote.input_schema, Mapping) else {}
    schema: dict[str, Any] = dict(_defused(given, "schema", remote.name))
    if schema.get("type") not in (None, "object"):
        raise ConfigError(f"{remote.name}: its input schema is not an object schema.", "")
    schema["type"] = "object"
    schema.setdefault("properties", {})
    if not isinstance(schema["properties"], Mapping):
        raise ConfigError(f"{remote.name}: its input schema's properties are not an object.", "")
    return schema


def make_server_tool(
    connection: ServerConnection, remote: RemoteTool, name: str | None = None
) -> Tool:
    """Our declaration of one server tool; its handler calls the server with limits."""
    server = connection.config
    effects, why = effects_for(server, remote)
    hints = hint_words(remote.annotations)
    said = f" The server says it is: {hints} (its own claim, not checked)." if hints else ""
    notes = (
        f"From the tool server '{server.name}' ({server.transport}: {server.where()}); "
        f"{why}.{said}",
    )
    # the server author's words, in every prompt that offers the tool: defused like tool
    # output, and counted as untrusted content in the request (``author``, agent/steps/prompt.py)
    description = neutralize(" ".join(remote.description.split()))[:MAX_DESCRIPTION]
    description = description or remote.name

    def handler(args: ServerArgs) -> str:
        arguments = dict(args.model_extra or {})
        return connection.call(remote, arguments)

    handler.__module__ = __name__  # agent.tool_timeouts.mcp applies to every server tool
    schema = _schema(remote)
    return Tool(
        name or namespaced(server.name, remote.name),
        description,
        ServerArgs,
        handler,
        effects,
        domain=server.tool_domain,
        input_schema=schema,
        notes=notes,
        # the receipt's first line: the server's own description is its claim, not ours
        summary=lambda _args: f"Run {remote.name} on the tool server '{server.name}'",
        # every argument goes to the server, named in its schema or not (it may allow
        # additional properties): once the request's context holds untrusted content, even a
        # tool the user declared read-only asks (agent/gate.py)
        sends=(ALL_ARGUMENTS,),
        author=f"the tool server '{server.name}'",
    )


class ServerHub:
    """Every configured tool server: one event loop, one connection each, their tools.

    The tools shown to the model are the ones each server listed when it was added or last
    tested (kept in ``mcp-tools.json``); a server never listed yet is asked once, with a limit.
    A later listing that differs for a tool stops calls to that tool until the user tests the
    server again (client.py).
    """

    def __init__(self, book: ServerBook, servers: list[ServerConfig] | None = None) -> None:
        self.book = book
        self.problem = ""
        if servers is None:
            try:
                servers = book.load()
            except ConfigError as exc:
                servers, self.problem = [], str(exc)
        self.servers = servers
        self._loop: LoopThread | None = None
        self._lock = threading.Lock()
        self._connections: dict[str, ServerConnection] = {}

    @property
    def loop(self) -> LoopThread:
        with self._lock:
            if self._loop is None:
                self._loop = LoopThread()
            return self._loop

    def connection(self, server: ServerConfig) -> ServerConnection:
        with self._lock:
            conn = self._connections.get(server.name)
            if conn is not None and conn.config == server:
                return conn
        loop = self.loop
        with self._lock:
            old = self._connections.get(server.name)
            conn = ServerConnection(server, self.book, loop)
            self._connections[server.name] = conn
        if old is not None:
            old.stop()
        return conn

    # --- the listing we show the model ---------------------------------------------------------

    def _cache(self) -> dict[str, Any]:
        try:
            data = json.loads(self.book.tools_cache.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def cached(self, name: str) -> list[RemoteTool] | None:
        entry = self._cache().get(name)
        if not isinstance(entry, Mapping) or not isinstance(entry.get("tools"), list):
            return None
        try:
            return [RemoteTool.from_json(t) for t in entry["tools"]]
        except (KeyError, TypeError, ValueError):
            return None

    def _remember(self, name: str, tools: list[RemoteTool] | None) -> None:
        data = self._cache()
        if tools is None:
            data.pop(name, None)
        else:
            data[name] = {
                "listed_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "tools": [t.to_json() for t in tools],
            }
        path = self.book.tools_cache
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
        tmp.replace(path)

    def refresh(self, server: ServerConfig) -> list[RemoteTool]:
        """Connect, list its tools now and keep that listing as the one shown (``test``)."""
        conn = self.connection(server)
        conn.stop()
        tools = conn.list_tools()
        self._remember(server.name, tools)
        return tools

    def forget(self, name: str) -> None:
        with self._lock:
            conn = self._connections.pop(name, None)
        if conn is not None:
            conn.stop()
        self._remember(name, None)

    def listing(self, server: ServerConfig) -> list[RemoteTool]:
        """The kept listing, or (never listed) the live one; [] when it cannot be had."""
        tools = self.cached(server.name)
        if tools is not None:
            return tools
        try:
            return self.refresh(server)
        except BotpsyError as exc:
            log.warning("tool server %s: %s", server.name, exc)
            return []

    def tools(self) -> list[Tool]:
        """Our declarations of every enabled tool of every enabled server."""
        out: list[Tool] = []
        taken: set[str] = set()
        for server in self.servers:
            if not server.enabled:
                continue
            conn = self.connection(server)
            for remote in self.listing(server):
                if not server.switch(remote.name).enabled:
                    continue
                name = namespaced(server.name, remote.name)
                n = 2
                while name in taken:
                    name = f"{namespaced(server.name, remote.name)[: MAX_NAME - 3]}_{n}"
                    n += 1
                try:
                    tool = make_server_tool(conn, remote, name)
                except (ConfigError, ValueError) as exc:
                    log.warning("tool server %s: tool %s left out: %s", server.name, name, exc)
                    continue
                taken.add(name)
                out.append(tool)
        return out

    def status(self, name: str) -> str:
        with self._lock:
            conn = self._connections.get(name)
        return conn.status if conn is not None else "not started"

    def close(self) -> None:
        with self._lock:
            conns = list(self._connections.values())
            self._connections.clear()
            loop, self._loop = self._loop, None
        for conn in conns:
            conn.stop()
        if loop is not None:
            loop.close()
