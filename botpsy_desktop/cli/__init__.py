"""The `botpsy` command: the assistant's core on a terminal, with no display needed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from botpsy_desktop import __version__
from botpsy_desktop.app import App, build_app
from botpsy_desktop.cli import (
    account,
    alarms,
    approvals,
    ask,
    bench,
    chat,
    contacts,
    daemon,
    db,
    doctor,
    engine,
    history,
    index,
    listen,
    log,
    mcp,
    model,
    routines,
    tools,
)
from botpsy_desktop.cli.common import EXIT_CANCELLED, EXIT_ERROR, EXIT_OK, EXIT_USAGE
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.text import terminal_safe
from botpsy_desktop.eval.command import add_eval_command, cmd_eval

__all__ = ["COMMANDS", "EXIT_CANCELLED", "EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "main"]

Command = Callable[[App, argparse.Namespace, TextIO, TextIO], int]

COMMANDS: dict[str, Command] = {
    "ask": ask.cmd_ask,
    "listen": listen.cmd_listen,
    "chat": chat.cmd_chat,
    "tools": tools.cmd_tools,
    "doctor": doctor.cmd_doctor,
    "model": model.cmd_model,
    "engine": engine.cmd_engine,
    "daemon": daemon.cmd_daemon,
    "approvals": approvals.cmd_approvals,
    "routines": routines.cmd_routines,
    "alarms": alarms.cmd_alarms,
    "index": index.cmd_index,
    "log": log.cmd_log,
    "undo": log.cmd_undo,
    "history": history.cmd_history,
    "account": account.cmd_account,
    "contacts": contacts.cmd_contacts,
    "bench": bench.cmd_bench,
    "eval": cmd_eval,
    "mcp": mcp.cmd_mcp,
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="botpsy", description="A private assistant running BotPsy locally through llama.cpp."
    )
    p.add_argument("--version", action="version", version=f"botpsy-desktop {__version__}")
    p.add_argument(
        "--home",
        metavar="DIR",
        help="keep config, data and models under DIR (default: $BOTPSY_HOME or the user's folders)",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    ask.add_command(sub)
    listen.add_command(sub)
    chat.add_command(sub)
    tools.add_command(sub)
    doctor.add_command(sub)
    model.add_command(sub)
    engine.add_command(sub)
    bench.add_command(sub)
    add_eval_command(sub)  # botpsy_desktop/eval/command.py
    mcp.add_command(sub)
    account.add_command(sub)
    contacts.add_command(sub)
    daemon.add_command(sub)
    approvals.add_command(sub)
    routines.add_command(sub)
    alarms.add_command(sub)
    index.add_command(sub)
    log.add_commands(sub)
    history.add_command(sub)
    db.add_command(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out, err = sys.stdout, sys.stderr
    if args.command == "db":  # works on a database the app would refuse to open
        return db.cmd_db(Paths.resolve(args.home), args, out, err)
    try:
        app = build_app(args.home)
    except BotpsyError as exc:
        print(terminal_safe(f"botpsy: {exc}"), file=err)
        return EXIT_ERROR
    from botpsy_desktop.agent.logs import setup_logging

    logs = setup_logging(app.paths, app.config.logs, app.secrets.known_values, face="cli")
    try:
        return COMMANDS[args.command](app, args, out, err)
    except BotpsyError as exc:
        print(terminal_safe(f"botpsy: {exc}"), file=err)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("\nbotpsy: stopped.", file=err)
        return EXIT_CANCELLED
    finally:
        app.close()
        logs.close()
