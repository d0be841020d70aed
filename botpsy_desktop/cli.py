"""The `botpsy` command: the assistant's core on a terminal, with no display needed."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from botpsy_desktop import __version__
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    ApprovalRequest,
    Error,
    Event,
    Thinking,
    Token,
    ToolResult,
    ToolStarted,
    Transcript,
    TurnFinished,
)
from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.download import format_progress, human_bytes
from botpsy_desktop.llm.models import ModelEvent, Status

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130


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

    def run_options(sp: argparse.ArgumentParser) -> None:
        src = sp.add_mutually_exclusive_group()
        src.add_argument("--model", metavar="PATH", help="GGUF model file to use")
        src.add_argument(
            "--replay",
            metavar="FILE",
            help="replay raw model completions from a JSON list instead of a model",
        )
        sp.add_argument(
            "--approve",
            choices=("ask", "deny", "all"),
            default="ask",
            help="answer approval requests: ask on the terminal (deny when there is "
            "none), deny all, or approve all",
        )
        sp.add_argument(
            "--think",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="let the model think before answering (default from config)",
        )
        sp.add_argument("--conversation", metavar="ID", help="continue a saved conversation")

    ask = sub.add_parser("ask", help="ask one question and print the answer")
    ask.add_argument("text", help="what to ask")
    run_options(ask)
    ask.add_argument(
        "--json",
        action="store_true",
        help="print the whole transcript as JSON (tool calls, answer, timings)",
    )

    chat = sub.add_parser("chat", help="an interactive conversation on the terminal")
    run_options(chat)

    tools = sub.add_parser("tools", help="list the tools the assistant can use")
    tools.add_argument("--json", action="store_true", help="schemas and effects as JSON")

    doctor = sub.add_parser("doctor", help="check llama.cpp, the model, keyring and folders")
    doctor.add_argument("--model", metavar="PATH", help="check this GGUF instead of the config's")
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    _add_model_commands(sub)
    daemon = sub.add_parser(
        "daemon", help="ring alarms, timers and reminders in the foreground until Ctrl-C"
    )
    daemon.add_argument("--json", action="store_true", help="print one JSON object per event")
    return p


class _Approver:
    """Decides approval requests for the CLI, per --approve."""

    def __init__(self, mode: str, stdin: TextIO, stderr: TextIO) -> None:
        self.mode, self.stdin, self.stderr = mode, stdin, stderr

    def decide(self, request: ApprovalRequest) -> None:
        if self.mode == "all":
            request.approve(by="--approve all")
            return
        if self.mode == "deny":
            request.deny(by="--approve deny")
            return
        if not (self.stdin.isatty() and self.stderr.isatty()):
            print(
                f"\n[approval needed] {request.receipt}\n"
                "Denied: no terminal to ask on (use --approve all to allow).",
                file=self.stderr,
            )
            request.deny(by="no terminal")
            return
        print(f"\n[approval needed] {request.receipt}", file=self.stderr)
        self.stderr.write("Allow this? [y/N] ")
        self.stderr.flush()
        answer = self.stdin.readline().strip().lower()
        if answer in ("y", "yes"):
            request.approve(by="user")
        else:
            request.deny(by="user")


def _drive(events: Iterator[Event], cancel: threading.Event) -> Iterator[Event]:
    """Iterate the loop; Ctrl-C stops the request cleanly instead of killing the process."""
    while True:
        try:
            event = next(events)
        except StopIteration:
            return
        except KeyboardInterrupt:
            cancel.set()
            continue
        yield event


def _run_request(
    app: App,
    args: argparse.Namespace,
    text: str,
    session: Any,
    out: TextIO,
    err: TextIO,
    as_json: bool,
) -> tuple[int, Transcript]:
    approver = _Approver(args.approve, sys.stdin, err)
    think = app.config.model.think if args.think is None else args.think
    cancel = threading.Event()
    transcript = Transcript(text)
    in_thinking = False
    code = EXIT_OK
    for event in _drive(session.run(text, cancel=cancel, think=think), cancel):
        transcript.add(event)
        if isinstance(event, ApprovalNeeded):
            approver.decide(event.request)
            continue
        if as_json:
            continue
        if isinstance(event, Thinking):
            if not in_thinking:
                err.write("[thinking] ")
                in_thinking = True
            err.write(event.text)
            err.flush()
        elif isinstance(event, Token):
            if in_thinking:
                err.write("\n")
                in_thinking = False
            out.write(event.text)
            out.flush()
        elif isinstance(event, ToolStarted):
            args_text = json.dumps(event.arguments, ensure_ascii=False)
            print(f"\n[tool] {event.name} {args_text}", file=err)
        elif isinstance(event, ToolResult):
            status = "ok" if event.ok else "failed"
            preview = event.output if len(event.output) < 300 else event.output[:300] + " ..."
            print(f"[tool {status}, {event.decision}] {preview}", file=err)
        elif isinstance(event, Answer):
            out.write("\n")
        elif isinstance(event, Error):
            print(f"\n{event.message}", file=err)
        elif isinstance(event, TurnFinished):
            pass
    if transcript.error is not None:
        code = EXIT_CANCELLED if transcript.error["kind"] == "cancelled" else EXIT_ERROR
    return code, transcript


def cmd_ask(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not _first_run(app, args, err):
        return EXIT_ERROR
    backend = app.backend(model=args.model, replay=args.replay)
    try:
        session = app.session(backend, args.conversation)
        code, transcript = _run_request(app, args, args.text, session, out, err, args.json)
        if args.json:
            data = transcript.as_dict()
            data["model"] = backend.name
            data["conversation_id"] = session.conversation_id
            json.dump(data, out, ensure_ascii=False, indent=2)
            out.write("\n")
        return code
    finally:
        backend.close()


def cmd_chat(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not _first_run(app, args, err):
        return EXIT_ERROR
    backend = app.backend(model=args.model, replay=args.replay)
    try:
        session = app.session(backend, args.conversation)
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
            _run_request(app, args, line.strip(), session, out, err, False)
    finally:
        backend.close()


def cmd_tools(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    items = [
        {
            **tool.schema()["function"],
            "effects": sorted(e.value for e in tool.effects),
            "needs_approval": not tool.read_only,
        }
        for tool in app.registry
    ]
    if args.json:
        json.dump(items, out, ensure_ascii=False, indent=2)
        out.write("\n")
        return EXIT_OK
    for item in items:
        params = ", ".join(item["parameters"]["properties"])
        flag = " (asks first)" if item["needs_approval"] else ""
        print(f"{item['name']}({params}) [{', '.join(item['effects'])}]{flag}", file=out)
        print(f"    {item['description'].splitlines()[0]}", file=out)
    return EXIT_OK


def cmd_doctor(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from botpsy_desktop.doctor import run_checks

    checks = run_checks(app, model=args.model)
    if args.json:
        json.dump([c.as_dict() for c in checks], out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        for c in checks:
            mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL", "info": "    "}[c.status]
            print(f"[{mark}] {c.name}: {c.detail}", file=out)
            if c.hint and c.status in ("warn", "fail"):
                print(f"       -> {c.hint}", file=out)
    return EXIT_ERROR if any(c.status == "fail" for c in checks) else EXIT_OK


def _add_model_commands(sub: Any) -> None:
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
        help="catalog ID[:QUANT] (botpsy-0.8b, smollm2-135m-demo) or hf://OWNER/REPO[@REV]/FILE",
    )
    pull.add_argument("--quant", metavar="QUANT", help="quantization, e.g. Q4_K_M or Q8_0")
    imp = act.add_parser("import", help="add a GGUF file you have (copied into the models folder)")
    imp.add_argument("path", metavar="PATH", help="the .gguf file")
    imp.add_argument("--link", action="store_true", help="use the file where it is, no copy")
    imp.add_argument("--name", metavar="ID", help="the model's id (default: the file name)")
    for sp in (pull, imp):
        sp.add_argument("--use", action="store_true", help="make it active (default: if none is)")
    act.add_parser("use", help="check a model's SHA-256 and make it active").add_argument("id")
    act.add_parser("verify", help="re-check installed files' SHA-256").add_argument("id", nargs="?")
    act.add_parser("remove", help="forget a model and delete its copy").add_argument("id")


class _EventPrinter:
    """Shows model events: a live bar with speed and time left on a terminal, else a few lines."""

    def __init__(self, err: TextIO) -> None:
        self.err, self.tty, self.live, self.step = err, err.isatty(), False, -1

    def end_line(self) -> None:
        if self.live:
            self.err.write("\n")
            self.live = False

    def __call__(self, event: ModelEvent) -> None:
        if isinstance(event, Status):
            self.end_line()
            print(event.message, file=self.err)
            return
        line = format_progress(event)
        if self.tty:
            self.err.write(f"\r{line}\x1b[K")
            self.live = True
            if event.finished:
                self.end_line()
        elif event.finished or int(event.fraction * 4) > self.step:
            print(line, file=self.err)
            self.step = -1 if event.finished else int(event.fraction * 4)
        self.err.flush()


def _first_run(app: App, args: argparse.Namespace, err: TextIO) -> bool:
    """No model yet: one sentence on how to get one; on a terminal, offer the default download."""
    if args.model or args.replay or app.config.model.path:
        return True
    models = app.models()
    print(models.first_run_message(), file=err)
    if models.installed() or not (sys.stdin.isatty() and err.isatty()):
        return False
    entry = models.catalog.default_entry
    err.write(f"Download {entry.name} {entry.default_quantization} now? [y/N] ")
    err.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        return False
    show = _EventPrinter(err)
    try:
        models.pull(use=True, on_event=show)
    finally:
        show.end_line()
    return True


def cmd_model(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    models, show, action = app.models(), _EventPrinter(err), args.model_command
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
        print("Get one with `botpsy model pull ID[:QUANT]` or `... pull hf://REPO/FILE`.", file=out)
        return EXIT_OK
    try:
        if action == "pull":
            models.pull(args.ref, args.quant, use=args.use or None, on_event=show)
        elif action == "import":
            models.import_file(
                args.path, link=args.link, name=args.name, use=args.use or None, on_event=show
            )
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


def cmd_daemon(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Ring alarms in the foreground: missed ones first, then one line per ring, until stopped."""
    import signal

    from botpsy_desktop.adapters.alarms import AlarmFired

    alarms = app.alarms
    if alarms is None:
        raise BotpsyError("This profile has no alarm service.", "Run `botpsy daemon` again.")
    stop = threading.Event()
    printing = threading.Lock()

    def emit(line: str) -> None:
        with printing:
            print(line, file=out, flush=True)

    def on_ring(event: AlarmFired) -> None:
        emit(json.dumps(event.as_dict(), ensure_ascii=False) if args.json else event.line())

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    alarms.add_listener(on_ring)
    try:
        now = alarms.now()
        for missed in alarms.start():
            emit(
                json.dumps(missed.as_dict(), ensure_ascii=False) if args.json else missed.line(now)
            )
        upcoming = [a for a in alarms.alarms() if a.next_ring is not None]
        print(
            f"botpsy daemon: {len(upcoming)} set to ring, time zone {alarms.time_zone_name}, "
            f"store {alarms.path}. Ctrl-C stops.",
            file=err,
            flush=True,
        )
        while not stop.wait(0.5):
            pass
    finally:
        alarms.remove_listener(on_ring)
        alarms.shutdown()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print("botpsy daemon: stopped.", file=err, flush=True)
    return EXIT_OK


COMMANDS = {"ask": cmd_ask, "chat": cmd_chat, "tools": cmd_tools, "doctor": cmd_doctor}
COMMANDS["model"] = cmd_model
COMMANDS["daemon"] = cmd_daemon


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out, err = sys.stdout, sys.stderr
    try:
        app = build_app(args.home)
    except BotpsyError as exc:
        print(f"botpsy: {exc}", file=err)
        return EXIT_ERROR
    try:
        return COMMANDS[args.command](app, args, out, err)
    except BotpsyError as exc:
        print(f"botpsy: {exc}", file=err)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("\nbotpsy: stopped.", file=err)
        return EXIT_CANCELLED
    finally:
        app.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
