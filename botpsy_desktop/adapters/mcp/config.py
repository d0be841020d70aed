"""Tool servers' configuration: the ecosystem's ``mcpServers`` file, our switches, keyring secrets.

The file is ``mcp.json`` in the profile's config folder, in the format Claude Desktop
(``claude_desktop_config.json``) and LM Studio (``mcp.json``) use, so it can be read by eye and
copied between apps::

    {"mcpServers": {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
        "search": {"url": "https://example.org/mcp",
                   "headers": {"Authorization": "${keyring:mcp:search:header:Authorization}"}}}}

Our own keys sit next to the ecosystem's in each entry (other apps ignore unknown keys):
``enabled``, ``domain`` (for per-request tool selection), ``trust_read_only_hints``,
``timeout_s``, ``max_output_chars`` and ``tools`` (per tool: ``enabled``, ``effects`` the user
declares). Secret values (tokens in headers, keys in env) are never written here: the file holds
``${keyring:NAME}`` and the value is in the OS keyring (core/secrets.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from botpsy_desktop.core.errors import ConfigError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.secrets import SecretStore
from botpsy_desktop.core.tools import Effect

FILE_NAME = "mcp.json"
TOOLS_CACHE = "mcp-tools.json"
SERVER_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
SECRET_REF_RE = re.compile(r"^\$\{keyring:([^}]+)\}$")
_SECRET_WORDS = re.compile(
    r"(?i)(authorization|token|secret|password|passwd|api[-_]?key|apikey|cookie|credential|"
    r"private|auth|bearer|_key$|^key$)"
)
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_OUTPUT_CHARS = 100_000


def looks_secret(name: str) -> bool:
    """Whether an env variable or header name usually holds a credential."""
    return bool(_SECRET_WORDS.search(name))


def secret_account(server: str, kind: str, key: str) -> str:
    """The keyring entry for one secret value of a server (``kind``: env or header)."""
    return f"mcp:{server}:{kind}:{key}"


@dataclass(frozen=True)
class ToolSwitch:
    """The user's word on one tool of a server: on or off, and what it does (if they say)."""

    enabled: bool = True
    effects: frozenset[Effect] | None = None
    """What the user declares the tool does; None: not declared (every call asks)."""


@dataclass(frozen=True)
class ServerConfig:
    """One tool server: how to reach it (stdio command or streamable HTTP URL) and our switches."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str = ""
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    domain: str = ""
    trust_read_only_hints: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    tools: Mapping[str, ToolSwitch] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not SERVER_NAME_RE.match(self.name):
            raise ConfigError(
                f"Tool server name {self.name!r} is not usable.",
                "Use a short name of letters, digits, '-' or '_', starting with a letter.",
            )
        if bool(self.command) == bool(self.url):
            raise ConfigError(
                f"Tool server {self.name!r} needs either a command (stdio) or a url (HTTP).",
                'Give "command" (and "args") to start a local server, or "url" for a remote one.',
            )
        if self.url and not re.match(r"^https?://", self.url):
            raise ConfigError(
                f"Tool server {self.name!r}: {self.url!r} is not an http(s) address.",
                "Give the server's streamable HTTP endpoint, such as http://127.0.0.1:8000/mcp.",
            )
        if self.timeout_s <= 0 or self.max_output_chars <= 0:
            raise ConfigError(
                f"Tool server {self.name!r}: timeout_s and max_output_chars must be positive.",
                "Fix the numbers in mcp.json, or remove them to use the defaults.",
            )

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    @property
    def tool_domain(self) -> str:
        """The domain its tools take part in per-request selection under (default: its name)."""
        return self.domain or self.name

    def where(self) -> str:
        """How it is reached, for people (secrets are references, so this shows none)."""
        if self.url:
            return self.url
        return " ".join([self.command, *self.args])

    def switch(self, tool: str) -> ToolSwitch:
        return self.tools.get(tool, ToolSwitch())

    def with_tool(self, tool: str, switch: ToolSwitch) -> ServerConfig:
        return replace(self, tools={**self.tools, tool: switch})

    def secret_refs(self) -> list[str]:
        """Keyring entries its env and headers refer to."""
        out = []
        for value in [*self.env.values(), *self.headers.values()]:
            match = SECRET_REF_RE.match(value)
            if match:
                out.append(match.group(1))
        return out

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {}
        if self.command:
            entry["command"] = self.command
            entry["args"] = list(self.args)
            if self.env:
                entry["env"] = dict(self.env)
            if self.cwd:
                entry["cwd"] = self.cwd
        else:
            entry["url"] = self.url
            if self.headers:
                entry["headers"] = dict(self.headers)
        if not self.enabled:
            entry["enabled"] = False
        if self.domain:
            entry["domain"] = self.domain
        if self.trust_read_only_hints:
            entry["trust_read_only_hints"] = True
        if self.timeout_s != DEFAULT_TIMEOUT_S:
            entry["timeout_s"] = self.timeout_s
        if self.max_output_chars != DEFAULT_MAX_OUTPUT_CHARS:
            entry["max_output_chars"] = self.max_output_chars
        tools: dict[str, Any] = {}
        for name, sw in sorted(self.tools.items()):
            item: dict[str, Any] = {"enabled": sw.enabled}
            if sw.effects is not None:
                item["effects"] = sorted(e.value for e in sw.effects)
            tools[name] = item
        if tools:
            entry["tools"] = tools
        return entry


SERVE_TOKEN_ACCOUNT = "mcp:serve:token"
DEFAULT_SERVE_PORT = 8765


@dataclass(frozen=True)
class ServeConfig:
    """The window offering our tools to other apps (``"serve"`` in mcp.json)."""

    window: bool = False
    """Serve over streamable HTTP on 127.0.0.1 while the window runs."""
    port: int = DEFAULT_SERVE_PORT
    allow_approvals: bool = False
    """Offer tools that ask too; each call waits in the window's approval queue."""

    def to_json(self) -> dict[str, Any]:
        return {"window": self.window, "port": self.port, "allow_approvals": self.allow_approvals}


def _strings(value: Any, what: str, server: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str | int | float) for k, v in value.items()
    ):
        raise ConfigError(
            f"Tool server {server!r}: {what} must map names to text.",
            f'Write {what} as {{"NAME": "value"}}.',
        )
    return {k: str(v) for k, v in value.items()}


def _effects(value: Any, server: str, tool: str) -> frozenset[Effect] | None:
    if value is None:
        return None
    try:
        effects = frozenset(Effect(v) for v in value)
    except (ValueError, TypeError) as exc:
        known = ", ".join(e.value for e in Effect)
        raise ConfigError(
            f"Tool server {server!r}, tool {tool!r}: effects must be a list of: {known}.",
            'For a tool that only reads, write "effects": ["read"].',
        ) from exc
    return effects or None


def server_from_json(name: str, entry: Any) -> ServerConfig:
    """One ``mcpServers`` entry (ecosystem keys and ours) as a ServerConfig."""
    if not isinstance(entry, Mapping):
        raise ConfigError(
            f"Tool server {name!r} is not an object in mcp.json.", "See README: Tool servers."
        )
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
        raise ConfigError(f"Tool server {name!r}: args must be a list of text.", "Fix mcp.json.")
    tools_raw = entry.get("tools", {})
    if not isinstance(tools_raw, Mapping):
        raise ConfigError(f"Tool server {name!r}: tools must be an object.", "Fix mcp.json.")
    tools: dict[str, ToolSwitch] = {}
    for tool, sw in tools_raw.items():
        if isinstance(sw, bool):
            tools[str(tool)] = ToolSwitch(enabled=sw)
        elif isinstance(sw, Mapping):
            tools[str(tool)] = ToolSwitch(
                enabled=bool(sw.get("enabled", True)),
                effects=_effects(sw.get("effects"), name, str(tool)),
            )
        else:
            raise ConfigError(
                f"Tool server {name!r}: tool {tool!r} must be true/false or an object.",
                "Fix mcp.json.",
            )
    url = entry.get("url") or entry.get("serverUrl") or ""
    try:
        timeout = float(entry.get("timeout_s", DEFAULT_TIMEOUT_S))
        max_chars = int(entry.get("max_output_chars", DEFAULT_MAX_OUTPUT_CHARS))
    except (TypeError, ValueError) as exc:
        raise ConfigError(
            f"Tool server {name!r}: timeout_s and max_output_chars must be numbers.",
            "Fix mcp.json.",
        ) from exc
    return ServerConfig(
        name=name,
        command=str(entry.get("command") or ""),
        args=tuple(str(a) for a in args),
        env=_strings(entry.get("env"), "env", name),
        cwd=str(entry.get("cwd") or ""),
        url=str(url),
        headers=_strings(entry.get("headers"), "headers", name),
        enabled=bool(entry.get("enabled", not entry.get("disabled", False))),
        domain=str(entry.get("domain") or ""),
        trust_read_only_hints=bool(entry.get("trust_read_only_hints", False)),
        timeout_s=timeout,
        max_output_chars=max_chars,
        tools=tools,
    )


class ServerBook:
    """The profile's tool servers file: load, save (atomically), add, remove, import."""

    def __init__(self, path: Path, secrets: SecretStore | None = None) -> None:
        self.path = path
        self.secrets = secrets or SecretStore()

    @classmethod
    def for_paths(cls, paths: Paths, secrets: SecretStore | None = None) -> ServerBook:
        return cls(paths.config_dir / FILE_NAME, secrets)

    @property
    def tools_cache(self) -> Path:
        """The tools each server listed when last reached (what the model is shown)."""
        return self.path.with_name(TOOLS_CACHE)

    def _data(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"The tool servers file {self.path} cannot be read: {exc}.",
                "Fix the JSON, or move the file away and add the servers again.",
            ) from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{self.path} is not a JSON object.", "See README: Tool servers.")
        return data

    def serve_config(self) -> ServeConfig:
        raw = self._data().get("serve") or {}
        if not isinstance(raw, Mapping):
            return ServeConfig()
        try:
            port = int(raw.get("port", DEFAULT_SERVE_PORT))
        except (TypeError, ValueError):
            port = DEFAULT_SERVE_PORT
        return ServeConfig(
            window=bool(raw.get("window", False)),
            port=port if 1024 <= port <= 65535 else DEFAULT_SERVE_PORT,
            allow_approvals=bool(raw.get("allow_approvals", False)),
        )

    def save_serve(self, serve: ServeConfig) -> None:
        self._write(self.load(), serve)

    def serve_token(self) -> str:
        """The bearer token other apps use (made and kept in the keyring on first use)."""
        token = self.secrets.get(SERVE_TOKEN_ACCOUNT)
        if not token:
            import secrets as pysecrets

            token = pysecrets.token_urlsafe(24)
            self.secrets.set(SERVE_TOKEN_ACCOUNT, token)
        return token

    def load(self) -> list[ServerConfig]:
        data = self._data()
        if not data:
            return []
        servers = data.get("mcpServers", {})
        if not isinstance(servers, Mapping):
            raise ConfigError(
                f'{self.path} has no "mcpServers" object.',
                'Write it as {"mcpServers": {"name": {"command": ...}}}.',
            )
        return [server_from_json(str(n), e) for n, e in servers.items()]

    def get(self, name: str) -> ServerConfig:
        for server in self.load():
            if server.name == name:
                return server
        known = ", ".join(s.name for s in self.load()) or "none"
        raise ConfigError(
            f"There is no tool server named {name!r} (configured: {known}).",
            "List them with `botpsy mcp list`.",
        )

    def save(self, servers: list[ServerConfig]) -> None:
        for server in servers:
            for value in [*server.env.values(), *server.headers.values()]:
                if "${keyring:" not in value and value and self._is_secret_value(server, value):
                    raise ConfigError(
                        f"Tool server {server.name!r}: a secret would be written to the file.",
                        "Store it with ServerBook.protect first.",
                    )
        self._write(servers, self.serve_config() if self.path.exists() else None)

    def _write(self, servers: list[ServerConfig], serve: ServeConfig | None) -> None:
        data: dict[str, Any] = {"mcpServers": {s.name: s.to_json() for s in servers}}
        if serve is not None and serve != ServeConfig():
            data["serve"] = serve.to_json()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    @staticmethod
    def _is_secret_value(server: ServerConfig, value: str) -> bool:
        names = [k for k, v in [*server.env.items(), *server.headers.items()] if v == value]
        return any(looks_secret(n) for n in names)

    def protect(
        self, server: ServerConfig, *, secret_keys: frozenset[str] = frozenset()
    ) -> ServerConfig:
        """Move secret env and header values into the keyring; the config keeps references.

        A value is secret when its name looks like a credential or is in ``secret_keys``.
        Raises KeyringUnavailable when there is no keyring to keep them in.
        """

        def move(kind: str, values: Mapping[str, str]) -> dict[str, str]:
            out = {}
            for key, value in values.items():
                if SECRET_REF_RE.match(value) or not value:
                    out[key] = value
                elif looks_secret(key) or key in secret_keys:
                    account = secret_account(server.name, kind, key)
                    self.secrets.set(account, value)
                    out[key] = f"${{keyring:{account}}}"
                else:
                    out[key] = value
            return out

        return replace(server, env=move("env", server.env), headers=move("header", server.headers))

    def add(self, server: ServerConfig, *, replace_existing: bool = False) -> None:
        servers = self.load()
        if any(s.name == server.name for s in servers) and not replace_existing:
            raise ConfigError(
                f"A tool server named {server.name!r} exists already.",
                "Pick another name, or remove it first with `botpsy mcp remove`.",
            )
        servers = [s for s in servers if s.name != server.name] + [self.protect(server)]
        self.save(servers)

    def update(self, server: ServerConfig) -> None:
        self.add(server, replace_existing=True)

    def remove(self, name: str) -> ServerConfig:
        server = self.get(name)
        self.save([s for s in self.load() if s.name != name])
        for account in server.secret_refs():
            self.secrets.delete(account)
        return server

    def resolve(self, server: ServerConfig) -> tuple[dict[str, str], dict[str, str]]:
        """Env and headers with keyring references replaced by their values (at connect time)."""

        def fill(values: Mapping[str, str]) -> dict[str, str]:
            out = {}
            for key, value in values.items():
                match = SECRET_REF_RE.match(value)
                out[key] = self.secrets.require(match.group(1)) if match else value
            return out

        return fill(server.env), fill(server.headers)

    def import_file(self, path: Path, *, replace_existing: bool = False) -> list[str]:
        """Add the servers of a Claude Desktop or LM Studio file; the names added.

        Secrets in their env and headers move to the keyring. A name that exists already is
        skipped unless ``replace_existing``.
        """
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"{path} cannot be read as JSON: {exc}.",
                "Give the path of claude_desktop_config.json or LM Studio's mcp.json.",
            ) from exc
        entries = data.get("mcpServers") if isinstance(data, Mapping) else None
        if not isinstance(entries, Mapping):
            raise ConfigError(
                f'{path} has no "mcpServers" object.',
                "Give the path of claude_desktop_config.json or LM Studio's mcp.json.",
            )
        existing = {s.name for s in self.load()}
        added: list[str] = []
        for raw_name, entry in entries.items():
            name = re.sub(r"[^A-Za-z0-9_-]", "-", str(raw_name)).strip("-")[:32] or "server"
            if not name[0].isalpha():
                name = f"s-{name}"[:32]
            if name in existing and not replace_existing:
                continue
            server = server_from_json(name, entry)
            self.add(server, replace_existing=replace_existing)
            added.append(name)
        return added


def default_import_sources() -> list[Path]:
    """Where Claude Desktop and LM Studio keep their files on this computer (existing ones)."""
    home = Path.home()
    candidates = [
        home / ".config" / "Claude" / "claude_desktop_config.json",
        home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json",
        Path(os.environ.get("APPDATA", home / "AppData" / "Roaming"))
        / "Claude"
        / "claude_desktop_config.json",
        home / ".lmstudio" / "mcp.json",
        home / ".cache" / "lm-studio" / "mcp.json",
    ]
    return [p for p in candidates if p.is_file()]
