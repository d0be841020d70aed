"""`botpsy model`: download, import, choose, verify and remove models."""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_CANCELLED, EXIT_ERROR, EXIT_OK, EventPrinter
from botpsy_desktop.core.errors import BotpsyError


def add_command(sub: Any) -> None:
    """The `model` subcommand and its actions."""
    model = sub.add_parser("model", help="download, import, choose, check and remove models")
    act = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")
    act.add_parser("list", help="installed models (* = active) and the catalog").add_argument(
        "--json", action="store_true", help="print them as JSON"
    )
    pull = act.add_parser("pull", help="download a model (default: BotPsy-0.8B Q4_K_M)")
    pull.add_argument(
        "ref",
        nargs="?",
        metavar="MODEL",
        help="catalog ID[:QUANT] (botpsy-0.8b, smollm2-135m-demo, or a speech model: "
        "whisper-base, whisper-tiny, whisper-small) or hf://OWNER/REPO[@REV]/FILE",
    )
    pull.add_argument("--quant", metavar="QUANT", help="quantization, e.g. Q4_K_M or Q8_0")
    imp = act.add_parser("import", help="add a GGUF file you have (copied into the models folder)")
    imp.add_argument("path", metavar="PATH", help="the .gguf file")
    imp.add_argument("--link", action="store_true", help="use the file where it is, no copy")
    imp.add_argument("--name", metavar="ID", help="the model's id (default: the file name)")
    for sp in (pull, imp):
        sp.add_argument("--use", action="store_true", help="make it active (default: if none is)")
        sp.add_argument(
            "--no-prepare",
            action="store_true",
            help="do not prepare the active model for its first question now (that question "
            "will, and take longer)",
        )
    act.add_parser("use", help="check a model's SHA-256 and make it active").add_argument("id")
    act.add_parser("verify", help="re-check installed files' SHA-256").add_argument("id", nargs="?")
    act.add_parser("remove", help="forget a model and delete its copy").add_argument("id")


def cmd_model(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from botpsy_desktop.llm.models.download import human_bytes

    models, show, action = app.models(), EventPrinter(err), args.model_command
    if action == "list":
        active = models.active()
        rows = [(m, m == active, models.path_of(m)) for m in models.installed()]
        if args.json:
            data = {
                "installed": [
                    {**m.model_dump(), "path": str(p), "active": a, "present": p.is_file()}
                    for m, a, p in rows
                ],
                "catalog": [e.model_dump() for e in models.catalog.models],
            }
            json.dump(data, out, ensure_ascii=False, indent=2)
            out.write("\n")
            return EXIT_OK
        for m, a, p in rows:
            flag = "" if p.is_file() else " MISSING"
            note = f"  ({m.note})" if m.note else ""
            print(
                f"{'*' if a else ' '} {m.id:<24} {human_bytes(m.size):>10}  {p}{flag}{note}",
                file=out,
            )
        if not rows:
            print(models.first_run_message(), file=out)
        for e in models.catalog.models:
            print(f"available: {e.id} ({e.name}: {e.note or e.description})", file=out)
        for st in app.voice().models.states():
            where = f"installed at {st.path}" if st.present else "not installed"
            print(
                f"speech: {st.entry.id} ({st.entry.name}, {human_bytes(st.entry.size)}): {where}",
                file=out,
            )
        print("Get one with `botpsy model pull ID[:QUANT]` or `... pull hf://REPO/FILE`.", file=out)
        return EXIT_OK
    try:
        speech = models.catalog.speech(args.ref) if action == "pull" and args.ref else None
        if speech is not None:
            from botpsy_desktop.llm.models.installed import Status

            voice = app.voice()
            show(Status(f"Getting the speech model {speech.name} ..."))
            path = voice.models.pull(speech.id, on_progress=show)
            show(
                Status(f"Installed {speech.id} at {path}: SHA-256 {speech.sha256[:12]}… verified.")
            )
            if app.config.voice.model != speech.id:
                print(f"To use it: set voice.model to {speech.id!r} in the settings.", file=out)
        elif action == "pull":
            pulled = models.pull(args.ref, args.quant, use=args.use or None, on_event=show)
            if not args.no_prepare:
                _prepare_if_active(app, models.path_of(pulled), show, err)
        elif action == "import":
            imported = models.import_file(
                args.path, link=args.link, name=args.name, use=args.use or None, on_event=show
            )
            if not args.no_prepare:
                _prepare_if_active(app, models.path_of(imported), show, err)
        elif action == "use":
            models.use(args.id, on_event=show)
        elif action == "remove":
            models.remove(args.id, on_event=show)
        else:
            results = models.verify(args.id, on_event=show)
            for r in results:
                print(f"[{'ok  ' if r.ok else 'FAIL'}] {r.model.id}: {r.detail}", file=out)
            if not results:
                print("No models are installed.", file=out)
            return EXIT_OK if all(r.ok for r in results) else EXIT_ERROR
    except KeyboardInterrupt:
        show.end_line()
        print("botpsy: stopped; run the same command again to resume a download.", file=err)
        return EXIT_CANCELLED
    finally:
        show.end_line()
    return EXIT_OK


def _prepare_if_active(app: App, path: Path, show: EventPrinter, err: TextIO) -> None:
    """A model just installed and active: prepare it for its first question (App.prepare_model),
    with its progress; Ctrl-C skips the rest (the first question then finishes it). Only a head
    start: a model that cannot be prepared is still installed, and its first question says why."""
    from botpsy_desktop.cli.turns import CtrlC, ProgressLine
    from botpsy_desktop.llm.models.installed import Status

    if app.config.engine.url or Path(app.config.model.path or "") != path:
        return
    show(Status("Preparing the model for its first question (Ctrl-C skips this)..."))
    cancel = threading.Event()
    line = ProgressLine(err)
    started = time.monotonic()
    try:
        with CtrlC(cancel) as ctrl_c:
            ctrl_c.working = True
            done = app.prepare_model(str(path), cancel=cancel, progress=lambda p, _: line.show(p))
    except BotpsyError as exc:
        line.end()
        show(Status(f"It could not be prepared ahead ({exc.message}); its first question will be."))
        return
    line.end()
    if done:
        seconds = time.monotonic() - started
        show(Status(f"Prepared in {seconds:.1f} s: the first question starts as a later one does."))
    else:
        if app.prepare_yielded:
            show(
                Status(
                    "Preparing stopped: a question is being answered (in the window or another "
                    "`botpsy`), and it gets the computer to itself; the model's first question "
                    "there finishes preparing it."
                )
            )
        else:
            show(Status("Preparing stopped; the first question will finish it."))
