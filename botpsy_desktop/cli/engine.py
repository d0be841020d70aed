"""`botpsy engine`: run the model here (local) or on a llama-server, and show which."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_ERROR, EXIT_OK
from botpsy_desktop.core.config import (
    Config,
    engine_origin,
    normalize_engine_url,
    plain_http_problem,
)
from botpsy_desktop.core.errors import BotpsyError, ConfigError
from botpsy_desktop.core.secrets import KeyringUnavailable, engine_entry
from botpsy_desktop.core.text import terminal_safe


def add_command(sub: Any) -> None:
    """The `engine` subcommand and its actions."""
    eng = sub.add_parser(
        "engine", help="where the model runs: on this computer or on a llama-server"
    )
    act = eng.add_subparsers(dest="engine_command", required=True, metavar="ACTION")
    set_ = act.add_parser(
        "set",
        help="use the llama-server at URL (only the prompt travels; tools stay here)",
    )
    set_.add_argument(
        "url", metavar="URL", help="e.g. https://gpu-box:8080 or http://127.0.0.1:8080"
    )
    set_.add_argument(
        "--api-key-stdin",
        action="store_true",
        help="read the server's API key (llama-server --api-key) from stdin into the OS keyring",
    )
    set_.add_argument(
        "--allow-plain-http",
        action="store_true",
        help="allow http:// to another computer: prompts (mail, calendar, files) and the key "
        "then travel unencrypted",
    )
    set_.add_argument(
        "--forget-key", action="store_true", help="remove a stored API key for this server"
    )
    act.add_parser("local", help="run the model on this computer again (the default)")
    act.add_parser("show", help="the engine in use; with a server, test it").add_argument(
        "--json", action="store_true", help="print it as JSON"
    )


def cmd_engine(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    action = args.engine_command
    if action == "local":
        app.config.engine.url = None
        app.config.save(app.paths)
        print("The model runs on this computer.", file=out)
        return EXIT_OK
    if action == "set":
        return _set(app, args, out, err)
    return _show(app, args, out)


def _set(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        url = normalize_engine_url(args.url)
    except ValueError as exc:
        raise ConfigError(
            f"Not an engine address: {exc}.", "Example: https://gpu-box:8080"
        ) from exc
    allow = app.config.engine.allow_plain_http or args.allow_plain_http
    problem = plain_http_problem(url, allow)
    if problem:
        print(
            f"botpsy: refusing {url}: {problem}. Use https:// or an SSH tunnel "
            "(ssh -L 8080:127.0.0.1:8080 HOST, then http://127.0.0.1:8080), or accept that "
            "with --allow-plain-http.",
            file=err,
        )
        return EXIT_ERROR
    entry = engine_entry(engine_origin(url))
    key: str | None = None
    if args.api_key_stdin:
        key = sys.stdin.readline().strip()
        if not key:
            raise BotpsyError("No API key was given on stdin.", "Pipe the key, e.g. from a file.")
    elif not args.forget_key:
        try:
            key = app.secrets.get("", entry=entry)
        except KeyringUnavailable:  # a server without a key still works
            key = None
    config = Config.model_validate(app.config.model_dump())
    config.engine.url = url
    config.engine.allow_plain_http = allow
    # the server is tried before anything is saved: a wrong address never replaces a working
    # engine, and the key is stored only for a server that took it
    from botpsy_desktop.llm.engines.remote import RemoteBackend

    try:
        backend = RemoteBackend(config.engine, config.model, url=url, api_key=key)
        try:
            backend.try_answer()
        except BaseException:
            backend.close()
            raise
    except BotpsyError as exc:
        now = app.config.engine.url
        where = f"the llama-server at {now}" if now else "this computer"
        print(terminal_safe(f"botpsy: {url} was not saved: {exc}"), file=err)
        print(
            f"The model still runs on {where}; `botpsy engine local` runs it on this computer.",
            file=err,
        )
        return EXIT_ERROR
    try:
        info = backend.info
    finally:
        backend.close()
    if args.api_key_stdin and key:
        app.secrets.set("", key, entry=entry)
    elif args.forget_key:
        app.secrets.delete("", entry=entry)
    config.save(app.paths)
    app.config = config
    print(f"The model now runs on {url} (only prompts travel there).", file=out)
    print(f"Connected: {info.model}, {info.n_ctx} tokens of context per slot.", file=out)
    print("`botpsy engine local` runs it on this computer again.", file=out)
    return EXIT_OK


def _show(app: App, args: argparse.Namespace, out: TextIO) -> int:
    engine = app.config.engine
    data: dict[str, Any] = {"engine": "local" if engine.url is None else "llama-server"}
    if engine.url is None:
        data["model"] = app.config.model.path
    else:
        data["url"] = engine.url
        data["allow_plain_http"] = engine.allow_plain_http
        try:
            has_key = bool(app.secrets.get("", entry=engine_entry(engine_origin(engine.url))))
            data["api_key"] = "stored in the keyring" if has_key else "none"
        except BotpsyError as exc:
            data["api_key"] = f"unknown ({exc.message})"
        try:
            backend = app.remote_backend(engine.url)
        except BotpsyError as exc:
            data["status"] = f"not working: {exc}"
        else:
            try:
                info = backend.info
                data.update(
                    status="connected",
                    server_model=info.model,
                    n_ctx=info.n_ctx,
                    slots=info.slots,
                    template=info.template_source,
                    round_trip_ms=round(backend.round_trip_s() * 1000, 1),
                )
            finally:
                backend.close()
    if args.json:
        json.dump(data, out, indent=2)
        out.write("\n")
        return EXIT_OK
    for key, value in data.items():
        print(f"{key}: {value}", file=out)
    return EXIT_OK if not str(data.get("status", "")).startswith("not") else EXIT_ERROR
