"""`botpsy mcp`: list, add, remove, test and import tool servers; serve our tools to other apps."""

from __future__ import annotations

import argparse
import json
import secrets as pysecrets
from pathlib import Path
from typing import Any, TextIO

from botpsy_desktop.adapters.mcp import (
    ServerBook,
    ServerConfig,
    ServerHub,
    ToolSwitch,
    default_import_sources,
    hint_words,
    namespaced,
)
from botpsy_desktop.app import App
from botpsy_desktop.core.errors import BotpsyError, ConfigError
from botpsy_desktop.core.tools import Effect


def add_command(sub: Any) -> None:
    """The `mcp` subcommand and its actions."""
    mcp = sub.add_parser("mcp", help="tool servers (MCP): add, test, import; serve our tools")
    act = mcp.add_subparsers(dest="mcp_command", required=True, metavar="ACTION")
    ls = act.add_parser("list", help="the tool servers, their status and tools")
    ls.add_argument("--json", action="store_true")
    add = act.add_parser("add", help="add a server: NAME -- COMMAND ARGS..., or NAME --url URL")
    add.add_argument("name")
    add.add_argument("--url", help="a streamable HTTP endpoint instead of a command")
    add.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    add.add_argument("--header", action="append", default=[], metavar="NAME: VALUE")
    add.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="KEY",
        help="keep this env or header value in the keyring (credential-like names always are)",
    )
    add.add_argument("--domain", help="the domain its tools are selected under (default: NAME)")
    add.add_argument(
        "--trust-read-only-hints",
        action="store_true",
        help="let the server's own readOnlyHint decide that a tool runs without asking",
    )
    add.add_argument("--timeout", type=float, default=None, metavar="S")
    add.add_argument("--no-test", action="store_true", help="do not start it now to list its tools")
    add.add_argument("command_line", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    rm = act.add_parser("remove", help="remove a server (and its secrets from the keyring)")
    rm.add_argument("name")
    test = act.add_parser("test", help="start a server, list its tools and keep that listing")
    test.add_argument("name", nargs="?")
    imp = act.add_parser("import", help="import Claude Desktop's or LM Studio's servers")
    imp.add_argument("file", nargs="?", help="claude_desktop_config.json or mcp.json")
    imp.add_argument("--replace", action="store_true", help="replace servers of the same name")
    tool = act.add_parser("tool", help="switch one tool on or off, or declare what it does")
    tool.add_argument("name", help="SERVER__TOOL or SERVER TOOL")
    tool.add_argument("tool", nargs="?")
    state = tool.add_mutually_exclusive_group(required=True)
    state.add_argument("--on", action="store_true")
    state.add_argument("--off", action="store_true")
    state.add_argument(
        "--effects",
        help="what it does, comma-separated: " + ", ".join(e.value for e in Effect),
    )
    state.add_argument("--undeclare", action="store_true", help="forget declared effects")
    serve = act.add_parser("serve", help="offer our read-only tools to other apps over MCP")
    serve.add_argument("--http", type=int, metavar="PORT", help="streamable HTTP on 127.0.0.1")
    serve.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the bearer token HTTP clients must send from this file ('-': standard "
        f"input); else ${TOKEN_ENV}, else a new one is made and printed",
    )
    serve.add_argument(
        "--token",
        help=argparse.SUPPRESS,  # on the command line other local users can read it: warns
    )
    serve.add_argument(
        "--allow-approvals",
        action="store_true",
        help="offer tools that ask too: their calls wait in the approval queue",
    )


def _hub(app: App) -> ServerHub:
    if app.tool_servers is None:
        raise BotpsyError("Tool servers are not available in this profile.", "")
    return app.tool_servers


def _pairs(items: list[str], sep: str, what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, found, value = item.partition(sep)
        if not found or not key.strip():
            raise ConfigError(
                f"{what} {item!r} is not KEY{sep}VALUE.", f"Write it as KEY{sep}VALUE."
            )
        out[key.strip()] = value.strip()
    return out


def cmd_mcp(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    hub = _hub(app)
    book = hub.book
    action = args.mcp_command
    if action == "list":
        return _list(hub, args, out)
    if action == "add":
        command = [c for c in args.command_line if c != "--"] if args.command_line else []
        if bool(command) == bool(args.url):
            raise ConfigError(
                "Give either a command after -- or --url.",
                "botpsy mcp add time -- mcp-server-time   |   botpsy mcp add web --url URL",
            )
        server = ServerConfig(
            name=args.name,
            command=command[0] if command else "",
            args=tuple(command[1:]),
            env=_pairs(args.env, "=", "--env"),
            url=args.url or "",
            headers=_pairs(args.header, ":", "--header"),
            domain=args.domain or "",
            trust_read_only_hints=args.trust_read_only_hints,
            timeout_s=args.timeout or 30.0,
        )
        if any(s.name == server.name for s in book.load()):
            raise ConfigError(
                f"A tool server named {server.name!r} exists already.",
                "Pick another name, or remove it first with `botpsy mcp remove`.",
            )
        book.save([*book.load(), book.protect(server, secret_keys=frozenset(args.secret))])
        print(f"Added tool server {server.name} ({server.transport}: {server.where()}).", file=out)
        if not args.no_test:
            return _test(hub, [book.get(server.name)], out, err)
        return 0
    if action == "remove":
        book.remove(args.name)
        hub.forget(args.name)
        print(f"Removed tool server {args.name}.", file=out)
        return 0
    if action == "test":
        servers = [book.get(args.name)] if args.name else book.load()
        return _test(hub, servers, out, err)
    if action == "import":
        sources = [Path(args.file).expanduser()] if args.file else default_import_sources()
        if not sources:
            raise ConfigError(
                "No Claude Desktop or LM Studio configuration was found.",
                "Give the file: botpsy mcp import PATH/claude_desktop_config.json",
            )
        for source in sources:
            added = book.import_file(source, replace_existing=args.replace)
            shown = ", ".join(added) or "nothing new"
            print(f"Imported from {source}: {shown}.", file=out)
            for name in added:
                hub.forget(name)
        print("Run `botpsy mcp test` to start them and list their tools.", file=out)
        return 0
    if action == "tool":
        return _tool(book, args, out)
    if action == "serve":
        return _serve(app, args, err)
    raise ConfigError(f"Unknown action {action!r}.", "See `botpsy mcp --help`.")


def _list(hub: ServerHub, args: argparse.Namespace, out: TextIO) -> int:
    rows: list[dict[str, Any]] = []
    for server in hub.book.load():
        tools = hub.cached(server.name)
        rows.append(
            {
                "name": server.name,
                "transport": server.transport,
                "where": server.where(),
                "enabled": server.enabled,
                "domain": server.tool_domain,
                "trust_read_only_hints": server.trust_read_only_hints,
                "listed": tools is not None,
                "tools": [
                    {
                        "name": namespaced(server.name, t.name),
                        "enabled": server.switch(t.name).enabled,
                        "effects": sorted(
                            e.value for e in server.switch(t.name).effects or frozenset()
                        ),
                        "hints": hint_words(t.annotations),
                    }
                    for t in tools or []
                ],
            }
        )
    if args.json:
        json.dump(rows, out, indent=2, ensure_ascii=False)
        out.write("\n")
        return 0
    if not rows:
        print("No tool servers. Add one with `botpsy mcp add` or `botpsy mcp import`.", file=out)
    for row in rows:
        state = "on" if row["enabled"] else "off"
        trust = ", trusts its read-only hints" if row["trust_read_only_hints"] else ""
        print(f"{row['name']} [{state}] {row['transport']}: {row['where']}{trust}", file=out)
        if not row["listed"]:
            print("    (tools not listed yet: botpsy mcp test)", file=out)
        for t in row["tools"]:
            flag = "" if t["enabled"] else " (off)"
            said = f" — the server says: {t['hints']}" if t["hints"] else ""
            eff = f" — you declared: {', '.join(t['effects'])}" if t["effects"] else " — asks"
            print(f"    {t['name']}{flag}{eff}{said}", file=out)
    return 0


def _test(hub: ServerHub, servers: list[ServerConfig], out: TextIO, err: TextIO) -> int:
    failed = 0
    for server in servers:
        try:
            tools = hub.refresh(server)
        except BotpsyError as exc:
            failed += 1
            print(f"{server.name}: FAILED — {exc}", file=err)
            continue
        names = ", ".join(namespaced(server.name, t.name) for t in tools) or "no tools"
        print(f"{server.name}: ok, {len(tools)} tool(s): {names}", file=out)
    return 1 if failed else 0


def _tool(book: ServerBook, args: argparse.Namespace, out: TextIO) -> int:
    if args.tool:
        server_name, tool = args.name, args.tool
    else:
        server_name, sep, tool = args.name.partition("__")
        if not sep:
            raise ConfigError(f"{args.name!r} is not SERVER__TOOL.", "botpsy mcp tool time NAME")
    server = book.get(server_name)
    switch = server.switch(tool)
    if args.on or args.off:
        switch = ToolSwitch(enabled=bool(args.on), effects=switch.effects)
    elif args.undeclare:
        switch = ToolSwitch(enabled=switch.enabled)
    else:
        try:
            effects = frozenset(Effect(e.strip()) for e in args.effects.split(",") if e.strip())
        except ValueError as exc:
            raise ConfigError(
                f"--effects {args.effects!r}: {exc}.",
                "Use: " + ", ".join(e.value for e in Effect),
            ) from exc
        switch = ToolSwitch(enabled=switch.enabled, effects=effects or None)
    book.update(server.with_tool(tool, switch))
    print(f"{server_name}__{tool}: {'on' if switch.enabled else 'off'}", file=out)
    return 0


TOKEN_ENV = "BOTPSY_MCP_TOKEN"
"""The environment variable ``botpsy mcp serve --http`` reads its bearer token from."""


def _serve_token(args: argparse.Namespace, err: TextIO) -> str:
    """The bearer token for ``mcp serve --http``: from --token-file (a file, or '-' for standard
    input), else the environment, else a new one (printed). Never from the command line, where
    ``ps`` shows it to every local user: ``--token`` still works but warns."""
    if args.token_file:
        where = "standard input" if args.token_file == "-" else args.token_file
        try:
            if args.token_file == "-":
                import sys

                text = sys.stdin.readline()
            else:
                text = Path(args.token_file).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise BotpsyError(
                f"Cannot read the token from {where}: {exc.strerror or exc}.",
                "Give a readable file with --token-file, or '-' to type it on standard input.",
            ) from exc
        token = text.strip()
        if not token:
            raise BotpsyError(f"{where} holds no token.", "Put the token on its first line.")
        return token
    if args.token:
        print(
            "Warning: --token puts the token on the command line, where other users of this "
            f"computer can read it (ps). Use --token-file PATH, --token-file - or ${TOKEN_ENV}.",
            file=err,
            flush=True,
        )
        return str(args.token)
    import os

    from_env = os.environ.get(TOKEN_ENV, "").strip()
    if from_env:
        return from_env
    token = pysecrets.token_urlsafe(24)
    print(f"Bearer token for this run: {token}", file=err)
    return token


def _serve(app: App, args: argparse.Namespace, err: TextIO) -> int:
    from botpsy_desktop.agent.mcp_serve import ServeSettings, ToolServer

    settings = ServeSettings(
        allow_approvals=args.allow_approvals,
        approval_timeout_s=app.config.agent.background_approval_timeout_s or 120.0,
        tool_timeout_s=app.config.agent.tool_timeout_s,
    )
    server = ToolServer(app.registry, app.gate, settings, secrets=app.secrets.known_values)
    names = ", ".join(t.name for t in server.offered())
    if args.http is None:
        print(f"botpsy mcp serve: stdio, offering {names}", file=err, flush=True)
        server.serve_stdio()
        return 0
    token = _serve_token(args, err)
    print(
        f"botpsy mcp serve: http://127.0.0.1:{args.http}/mcp, offering {names}",
        file=err,
        flush=True,
    )
    server.http_server(token, args.http).run()
    return 0
