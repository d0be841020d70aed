"""`botpsy index`: the documents index: its state, an update or a rebuild now, a folder left out,
or the whole index deleted."""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from botpsy_desktop.adapters.documents import DocumentIndex
from botpsy_desktop.adapters.documents.index import Progress
from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_OK
from botpsy_desktop.core.errors import BotpsyError


def add_command(sub: Any) -> None:
    """The `index` subcommand: status, update, rebuild, exclude PATH, forget."""
    index = sub.add_parser(
        "index", help="the index of your documents: status, update, rebuild, exclude, forget"
    )
    index.add_argument("--json", action="store_true", help="print JSON")
    what = index.add_subparsers(dest="action", metavar="ACTION")
    for name, text in (
        ("status", "what is indexed, what could not be and why, the last scan"),
        ("update", "read new and changed documents now, forget removed ones"),
        ("rebuild", "delete the index and read every document again"),
        ("forget", "delete the index (it is built again the next time the app runs)"),
    ):
        action = what.add_parser(name, help=text)
        action.add_argument("--json", action="store_true", default=argparse.SUPPRESS)
    exclude = what.add_parser("exclude", help="never index the documents in folder PATH")
    exclude.add_argument("path", metavar="PATH")
    exclude.add_argument("--json", action="store_true", default=argparse.SUPPRESS)


def _index(app: App) -> DocumentIndex:
    if app.documents is None:
        raise BotpsyError(
            "The documents index is off in the settings.",
            'Set "documents": {"index": true} in the config file to turn it on.',
        )
    return app.documents


def cmd_index(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    action = args.action or "status"
    as_json = bool(getattr(args, "json", False))
    if action == "exclude":
        return _exclude(app, args.path, as_json, out)
    index = _index(app)
    if action == "forget":
        existed = index.forget()
        result: dict[str, Any] = {"forgotten": existed, "index": str(index.file)}
        text = (
            f"Deleted the documents index ({index.file}); it is built again the next time "
            "the app runs, or with `botpsy index update`."
            if existed
            else "There was no documents index to delete."
        )
        return _done(result, text, as_json, out)
    if action in ("update", "rebuild"):
        if action == "rebuild":
            index.forget()

        def show(p: Progress) -> None:
            if not as_json:
                print(p.line(), file=err, flush=True)

        state = index.update(progress=show)
        status = index.status()
        result = {"action": action, "scan": state.line(), **status}
        text = (
            f"{state.line()}. The index holds {status['indexed']:,} documents "
            f"({status['passages']:,} passages, {status['bytes'] / 1e6:.1f} MB)."
        )
        return _done(result, text, as_json, out)
    status = index.status()
    if as_json:
        print(json.dumps(status, ensure_ascii=False, indent=2), file=out)
        return EXIT_OK
    for line in _status_lines(app, index, status):
        print(line, file=out)
    return EXIT_OK


def _status_lines(app: App, index: DocumentIndex, status: dict[str, Any]) -> list[str]:
    roots = ", ".join(str(r) for r in index.jail.roots) if index.jail else "none"
    lines = [f"Folders: {roots}"]
    if app.config.documents.exclude:
        lines.append(f"Left out: {', '.join(app.config.documents.exclude)}")
    if not status["exists"]:
        lines.append("No index yet: it is built when the app runs, or with `botpsy index update`.")
        return lines
    lines.append(
        f"Indexed: {status['indexed']:,} documents, {status['passages']:,} passages, "
        f"{status['text_chars']:,} characters of text; index {status['bytes'] / 1e6:.1f} MB "
        f"({index.file})"
    )
    when = status.get("last_complete_scan")
    complete = (
        datetime.fromtimestamp(when).astimezone().isoformat(timespec="seconds") if when else "never"
    )
    lines.append(f"Last scan: {status['last_scan']}; last complete scan: {complete}")
    if status["last_scan"].startswith("paused "):
        why = status["last_scan"].removeprefix("paused ").split(":")[0]
        lines.append(
            f"Indexing is paused {why}; it goes on by itself after (while the app or "
            "`botpsy daemon` runs)."
        )
    elif not status["complete"]:
        lines.append("The last scan did not finish; the next one goes on from where it stopped.")
    if status["not_indexed"]:
        lines.append(f"Not indexed: {status['not_indexed']:,} files")
        lines += [f"  {r['path']}: {r['reason']}" for r in status["reasons"]]
    return lines


def _exclude(app: App, path: str, as_json: bool, out: TextIO) -> int:
    folder = Path(os.path.realpath(os.path.expanduser(path)))
    if not folder.is_dir():
        raise BotpsyError(
            f"{path} is not a folder.", "Give a folder whose documents should not be indexed."
        )
    config = app.config
    shown = str(folder)
    if shown not in config.documents.exclude:
        config.documents.exclude = [*config.documents.exclude, shown]
        config.save(app.paths)
    removed = app.documents.forget_under(folder) if app.documents is not None else 0
    result = {"excluded": shown, "removed_from_index": removed}
    text = (
        f"The documents in {shown} are no longer indexed ({removed:,} removed from the index). "
        'Undo it by removing the folder from "documents": {"exclude": [...]} in the settings.'
    )
    return _done(result, text, as_json, out)


def _done(result: dict[str, Any], text: str, as_json: bool, out: TextIO) -> int:
    if as_json:
        print(json.dumps(result, ensure_ascii=False, indent=2), file=out)
    else:
        print(text, file=out)
    return EXIT_OK
