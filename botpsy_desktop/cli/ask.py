"""`botpsy ask`: one question, its answer printed (or the whole transcript as JSON)."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_ERROR, EXIT_OK, first_run
from botpsy_desktop.cli.turns import add_run_options, opened_session, run_request


def add_command(sub: Any) -> None:
    """The `ask` subcommand and its options."""
    ask = sub.add_parser("ask", help="ask one question and print the answer")
    ask.add_argument("text", help="what to ask")
    add_run_options(ask)
    ask.add_argument(
        "--json",
        action="store_true",
        help="print the whole transcript as JSON (tool calls, answer, timings)",
    )


def cmd_ask(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not first_run(app, args, err):
        return EXIT_ERROR
    # an existing documents index catches up while the model answers (search_documents
    # waits a little for it; a quit keeps what it did). None yet: the first search builds it
    # (or the window, or `botpsy index update`), so one question never walks a whole home
    if app.documents is not None and app.documents.exists():
        app.start_indexing()
    with opened_session(app, args) as (backend, session):
        code, transcript = run_request(app, args, args.text, session, out, err, args.json)
        if args.json:
            data = transcript.as_dict()
            data["model"] = backend.name
            data["conversation_id"] = session.conversation_id
            json.dump(data, out, ensure_ascii=False, indent=2)
            out.write("\n")
        if code == EXIT_OK:
            out.flush()
            # the conversation as its next request starts, kept on disk for the next process
            app.keep_for_next(backend, session.conversation_id)
        return code
