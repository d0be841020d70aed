"""`botpsy chat`: an interactive conversation on the terminal."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from botpsy_desktop import __version__
from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_ERROR, EXIT_OK, first_run
from botpsy_desktop.cli.turns import add_run_options, opened_session, run_request
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.text import terminal_safe


def add_command(sub: Any) -> None:
    """The `chat` subcommand and its options."""
    chat = sub.add_parser("chat", help="an interactive conversation on the terminal")
    add_run_options(chat)


def cmd_chat(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not first_run(app, args, err):
        return EXIT_ERROR
    app.start_indexing()  # the documents index catches up (and follows changes) meanwhile
    with opened_session(app, args) as (backend, session):
        print(
            f"botpsy {__version__} with {backend.name}. Ctrl-D or /quit to leave, "
            "Ctrl-C stops an answer.",
            file=err,
        )
        while True:
            try:
                err.write("\nyou> ")
                err.flush()
                line = sys.stdin.readline()
            except KeyboardInterrupt:
                continue
            if not line or line.strip() in ("/quit", "/exit"):
                print(f"Conversation saved as {session.conversation_id}.", file=err)
                return EXIT_OK
            if not line.strip():
                continue
            out.write("botpsy> ")
            try:
                run_request(app, args, line.strip(), session, out, err, False)
            except BotpsyError as exc:  # this request failed; the conversation goes on
                print(terminal_safe(f"\nbotpsy: {exc}"), file=err)
