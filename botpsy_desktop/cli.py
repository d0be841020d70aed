"""The `botpsy` command: the assistant's core on a terminal, with no display needed."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from botpsy_desktop import __version__
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    ApprovalRequest,
    ContextTrimmed,
    Error,
    Event,
    Thinking,
    Token,
    ToolResult,
    ToolStarted,
    Transcript,
    TurnFinished,
)
from botpsy_desktop.agent.routines import DaemonRoutines
from botpsy_desktop.app import App, build_app
from botpsy_desktop.cli_mcp import add_mcp_command, cmd_mcp
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.eval.command import add_eval_command, cmd_eval
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
    doctor.add_argument(
        "--bundle",
        nargs="?",
        const="",
        metavar="PATH",
        help="also write a diagnostics zip for a bug report (no passwords, no messages) to "
        "PATH (default: the data folder's diagnostics folder) and print where",
    )
    _add_model_commands(sub)
    _add_bench_command(sub)
    add_eval_command(sub)  # botpsy_desktop/eval/command.py
    add_mcp_command(sub)  # botpsy_desktop/cli_mcp.py
    _add_account_commands(sub)
    daemon = sub.add_parser(
        "daemon",
        help="ring alarms, timers and reminders and run routines in the foreground until Ctrl-C",
    )
    daemon.add_argument("--json", action="store_true", help="print one JSON object per event")
    daemon_src = daemon.add_mutually_exclusive_group()  # routines run on it (else model.path)
    daemon_src.add_argument("--model", metavar="PATH", help="GGUF model that runs routines")
    daemon_src.add_argument("--replay", metavar="FILE", help="replay routines' model output")
    log = sub.add_parser("log", help="actions the assistant carried out (the audit log)")
    log.add_argument("--limit", type=int, default=20, metavar="N", help="newest N (default 20)")
    log.add_argument("--json", action="store_true", help="print the entries as JSON")
    undo = sub.add_parser("undo", help="reverse the assistant's last reversible action")
    undo.add_argument("--json", action="store_true", help="print what was undone as JSON")
    _add_history_commands(sub)
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
        if request.scope is not None:
            print(f"  a = {request.scope.describe()}", file=self.stderr)
        self.stderr.write("Allow this? [y/N" + ("/a] " if request.scope is not None else "] "))
        self.stderr.flush()
        answer = self.stdin.readline().strip().lower()
        if answer in ("a", "all") and request.scope is not None:
            request.approve(by="user (for this conversation)", scope=True)
        elif answer in ("y", "yes"):
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
        elif isinstance(event, ContextTrimmed):
            print(f"[context] {event.message}", file=err)
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
    if getattr(args, "bundle", None) is not None:
        from botpsy_desktop.bundle import write_bundle

        written = write_bundle(app, Path(args.bundle) if args.bundle else None, checks)
        print(f"Diagnostics written to {written}", file=err)
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
    routines = _daemon_routines(app, args, emit, err)
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
        if routines is not None:
            routines.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print("botpsy daemon: stopped.", file=err, flush=True)
    return EXIT_OK


def _daemon_routines(
    app: App, args: argparse.Namespace, emit: Any, err: TextIO
) -> DaemonRoutines | None:
    """Run routines in the daemon on the model (loaded once), or say why they will not run."""
    from dataclasses import replace

    from botpsy_desktop.adapters.alarms import AlarmFired, AlarmKind
    from botpsy_desktop.agent.loop import AgentSession
    from botpsy_desktop.agent.routines import DAEMON_APPROVAL_TIMEOUT_S, DaemonRoutines
    from botpsy_desktop.llm.backend import Backend

    alarms = app.alarms
    assert alarms is not None
    if args.model is None and args.replay is None and not app.config.model.path:

        def not_run(event: AlarmFired) -> None:
            if event.kind is AlarmKind.ROUTINE:
                emit(
                    json.dumps({"event": "routine_not_run", "id": event.id, "reason": "no model"})
                    if args.json
                    else f"routine {event.id}: not run, no model is set up (set model.path "
                    "with `botpsy model use`, or start the daemon with --model or --replay)"
                )

        alarms.add_listener(not_run)
        return None
    model = args.replay or args.model or app.config.model.path

    def load() -> Backend:  # when the first routine fires, on the routines' engine thread
        return app.backend(model=args.model, replay=args.replay)

    timeout = app.config.agent.background_approval_timeout_s or DAEMON_APPROVAL_TIMEOUT_S
    settings = replace(app.loop_settings(), background_approval_timeout_s=timeout)

    def make_session(backend: Backend, conversation_id: str) -> AgentSession:
        return AgentSession(
            backend,
            app.registry,
            app.gate,
            app.store,
            settings,
            conversation_id,
            background=True,
        )

    routines = DaemonRoutines(
        None,
        app.store,
        alarms,
        make_session,
        emit,
        as_json=args.json,
        think=app.config.model.think,
        approval_timeout_s=timeout,
        load=load,
    )
    alarms.add_listener(routines.on_fired)
    print(
        f"botpsy daemon: routines run on {model} (loaded when the first one is due); their "
        "approval requests are denied "
        f"after {timeout:g} s (agent.background_approval_timeout_s), nobody can approve here.",
        file=err,
        flush=True,
    )
    return routines


COMMANDS = {"ask": cmd_ask, "chat": cmd_chat, "tools": cmd_tools, "doctor": cmd_doctor}
COMMANDS["model"] = cmd_model
COMMANDS["daemon"] = cmd_daemon


def cmd_log(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """The audit log, newest first: what ran, when, who approved it, and how to undo it."""
    from botpsy_desktop.agent.audit import AuditLog, format_entry

    entries = AuditLog(app.store).entries(max(args.limit, 1))
    if args.json:
        json.dump(entries, out, ensure_ascii=False, indent=2)
        out.write("\n")
    elif not entries:
        print("The assistant has not carried out any action yet.", file=out)
    for entry in [] if args.json else entries:
        print(format_entry(entry), file=out)
    return EXIT_OK


def cmd_undo(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Reverse the newest action that has an inverse and was not undone yet."""
    from botpsy_desktop.agent.audit import AuditLog, describe

    done = AuditLog(app.store).undo(app.registry)
    if args.json:
        data = {"undone": done.action, "inverse": done.inverse.as_dict(), "result": done.result}
        json.dump({**data, "entry_id": done.entry_id}, out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        print(f"Undid #{done.action['id']} {describe(done.action)}: {done.result}", file=out)
    return EXIT_OK


COMMANDS["log"] = cmd_log
COMMANDS["undo"] = cmd_undo


def _add_history_commands(sub: Any) -> None:
    history = sub.add_parser("history", help="saved conversations, or one conversation's messages")
    history.add_argument("conversation", nargs="?", metavar="ID", help="show this conversation")
    history.add_argument("--json", action="store_true", help="print them as JSON")
    db = sub.add_parser("db", help="check the profile's databases, or restore a backup")
    act = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    act.add_parser("check", help="integrity of each database, and its backups")
    restore = act.add_parser(
        "restore", help="put a database's newest backup (or BACKUP) in its place; app closed"
    )
    restore.add_argument("database", metavar="FILE", help="e.g. conversations.sqlite3")
    restore.add_argument("backup", nargs="?", metavar="BACKUP", help="a backup file to use")


def format_history(messages: list[dict[str, Any]]) -> list[str]:
    """A stored conversation as terminal lines; an interrupted reply or tool call says so."""
    lines: list[str] = []
    for m in messages:
        role, text = m.get("role"), str(m.get("content") or "").strip()
        cut = " (interrupted)" if m.get("interrupted") else ""
        if role == "user":
            lines.append(f"you> {text}")
        elif role == "assistant":
            if m.get("pending"):
                lines.append(f"botpsy (still being written)> {text}")
            elif text or cut:
                lines.append(f"botpsy{cut}> {text or '(stopped before the reply started)'}")
            for call in m.get("tool_calls") or []:
                fn = call.get("function", {})
                args = json.dumps(fn.get("arguments") or {}, ensure_ascii=False)
                lines.append(f"[tool] {fn.get('name', '?')} {args}")
        elif role == "tool":
            name = m.get("name", "")
            if cut:
                lines.append(f"[tool {name} interrupted: the app stopped while it ran]")
            else:
                lines.append(f"[tool {name}] {text[:300]}")
    return lines


def cmd_history(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """List conversations, or print one; interrupted replies are shown as interrupted."""
    if args.conversation is None:
        infos = app.store.conversations()
        if args.json:
            json.dump([vars(i) for i in infos], out, ensure_ascii=False, indent=2)
            out.write("\n")
        for i in [] if args.json else infos:
            print(f"{i.id}  {i.message_count:4d} messages  {i.title}", file=out)
        return EXIT_OK
    if not app.store.exists(args.conversation):
        print(f"botpsy: there is no conversation {args.conversation}.", file=err)
        return EXIT_ERROR
    messages = app.store.messages(args.conversation, pending=True)
    if args.json:
        json.dump(messages, out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        print("\n".join(format_history(messages)), file=out)
    return EXIT_OK


def cmd_db(paths: Paths, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Check or restore the profile's SQLite files; runs without opening them for the app."""
    from botpsy_desktop.core import dbsafety

    files = [paths.database, paths.data_dir / "alarms.sqlite3", paths.data_dir / "music.sqlite3"]
    if args.db_command == "check":
        bad = 0
        for file in files:
            if not file.exists():
                continue
            problems = dbsafety.check_file(file)
            bad += bool(problems)
            state = "ok" if not problems else "DAMAGED: " + "; ".join(problems[:3])
            print(f"{file}: {state}", file=out)
            for backup in dbsafety.list_backups(file):
                print(f"    backup {backup.name}", file=out)
            if problems:
                print(f"    -> {dbsafety.restore_hint(file)}", file=out)
        return EXIT_ERROR if bad else EXIT_OK
    target = next((f for f in files if f.name == Path(args.database).name), None)
    if target is None:
        names = ", ".join(f.name for f in files)
        print(f"botpsy: {args.database} is not one of the databases ({names}).", file=err)
        return EXIT_USAGE
    try:
        chosen = None if args.backup is None else Path(args.backup)
        if chosen is not None and not chosen.is_absolute():
            chosen = target.parent / chosen
        used, aside = dbsafety.restore(target, chosen)
    except BotpsyError as exc:
        print(f"botpsy: {exc}", file=err)
        return EXIT_ERROR
    kept = f"; the replaced file is kept as {aside}" if aside is not None else ""
    print(f"Restored {target} from {used.name}{kept}.", file=out)
    return EXIT_OK


COMMANDS["history"] = cmd_history


def _add_account_commands(sub: Any) -> None:
    acc = sub.add_parser("account", help="calendar (CalDAV) and mail (IMAP/SMTP) accounts")
    act = acc.add_subparsers(dest="account_command", required=True, metavar="ACTION")
    add = act.add_parser("add", help="add an account; its password goes to the OS keyring")
    kind = add.add_subparsers(dest="kind", required=True, metavar="KIND")
    dav = kind.add_parser("caldav", help="a CalDAV server (Nextcloud, Fastmail, iCloud...)")
    dav.add_argument("--url", required=True, help="CalDAV URL, e.g. https://host/remote.php/dav")
    dav.add_argument("--username", required=True)
    dav.add_argument("--calendar", help="calendar new events go to (default: the first)")
    dav.add_argument("--email", help="your address as organizer of invitations")
    mail = kind.add_parser("mail", help="a mailbox: IMAP to read, SMTP to send")
    mail.add_argument("--address", required=True, help="your email address")
    mail.add_argument("--username", help="login name (default: the address)")
    mail.add_argument("--display-name", default="", help="your name, shown to recipients")
    for side, port in (("imap", "993 ssl, 143 starttls"), ("smtp", "465 ssl, 587 starttls")):
        mail.add_argument(f"--{side}-host", required=True)
        mail.add_argument(f"--{side}-port", type=int, help=f"default {port}")
        mail.add_argument(f"--{side}-security", choices=("ssl", "starttls", "none"), default="ssl")
    mail.add_argument("--drafts-folder", help="default: the server's Drafts folder")
    mail.add_argument("--sent-folder", help="keep a copy of sent mail there (not for Gmail)")
    for sp in (dav, mail):
        sp.add_argument("name", help="a short name, e.g. work")
        sp.add_argument("--ca-file", help="extra CA certificate (PEM) to trust")
        sp.add_argument("--password-stdin", action="store_true", help="read it from stdin")
        sp.add_argument(
            "--session-only",
            action="store_true",
            help="store no password: it is given each session (no keyring needed)",
        )
    act.add_parser("list", help="the accounts and whether a password is stored").add_argument(
        "--json", action="store_true", help="print them as JSON"
    )
    for name, text in (
        ("test", "connect and say in one line what works"),
        ("password", "store a new password for an account"),
        ("remove", "forget an account and its stored password"),
    ):
        sp = act.add_parser(name, help=text)
        sp.add_argument("name")
        if name != "remove":
            sp.add_argument("--password-stdin", action="store_true", help="read it from stdin")


def cmd_account(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Add, list, test and remove accounts; passwords only ever go to the keyring (or memory)."""
    from pydantic import ValidationError

    from botpsy_desktop.core.accounts import AccountBook, CalDAVAccount, MailAccount
    from botpsy_desktop.core.secrets import KeyringUnavailable

    book, secrets, action = AccountBook.for_paths(app.paths), app.secrets, args.account_command

    def password(name: str) -> str:
        if args.password_stdin:
            return sys.stdin.readline().rstrip("\r\n")
        if not sys.stdin.isatty():
            raise BotpsyError("No terminal to ask the password on.", "Use --password-stdin.")
        import getpass

        return getpass.getpass(f"Password for {name}: ", stream=err)

    if action == "add":
        fields = {k: v for k, v in vars(args).items() if v is not None and v != ""}
        keep = CalDAVAccount.model_fields if args.kind == "caldav" else MailAccount.model_fields
        fields.setdefault("username", fields.get("address"))
        try:
            account: CalDAVAccount | MailAccount = (
                CalDAVAccount if args.kind == "caldav" else MailAccount
            ).model_validate({k: v for k, v in fields.items() if k in keep})
        except ValidationError as exc:
            why = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: " * bool(e["loc"])
                + e["msg"].removeprefix("Value error, ")
                for e in exc.errors()
            )
            raise BotpsyError(f"Invalid account ({why}).", "Correct the options.") from None
        if book.get(account.name) is not None:
            raise BotpsyError(
                f"There is already an account named {account.name!r}.",
                "Choose another name, or remove it first with `botpsy account remove`.",
            )
        if not args.session_only:
            secrets.set(account.name, password(account.name))  # nothing is saved if this fails
        book.add(account)
        where = "not stored (given each session)" if args.session_only else "in the OS keyring"
        print(
            f"Added {account.kind} account {account.name!r}; password {where}. "
            f"Check it with `botpsy account test {account.name}`.",
            file=out,
        )
        return EXIT_OK
    if action == "list":
        rows = []
        for a in book.load():
            try:
                stored = "keyring" if secrets.get(a.name) else "none"
            except KeyringUnavailable:
                stored = "unknown (no keyring)"
            host = a.url if isinstance(a, CalDAVAccount) else f"{a.imap_host}, {a.smtp_host}"
            rows.append(dict(name=a.name, kind=a.kind, user=a.username, server=host, pw=stored))
        if args.json:
            json.dump(rows, out, indent=2)
            out.write("\n")
        for r in [] if args.json else rows:
            line = f"{r['name']:<16} {r['kind']:<7} {r['user']} @ {r['server']}"
            print(f"{line} (password: {r['pw']})", file=out)
        if not rows and not args.json:
            print("No accounts. Add one with `botpsy account add caldav|mail NAME ...`.", file=out)
        return EXIT_OK
    found = book.get(args.name)
    if found is None:
        names = ", ".join(a.name for a in book.load()) or "none"
        raise BotpsyError(f"There is no account {args.name!r} (accounts: {names}).")
    if action == "remove":
        book.remove(found.name)
        try:
            gone = secrets.delete(found.name)
        except KeyringUnavailable as exc:
            print(f"Removed {found.name!r}; its keyring entry stays: {exc}", file=err)
            return EXIT_OK
        note = " and its password" if gone else ""
        print(f"Removed account {found.name!r}{note}.", file=out)
        return EXIT_OK
    if action == "password":
        secrets.set(found.name, password(found.name))
        print(f"Stored a new password for {found.name!r} in the OS keyring.", file=out)
        return EXIT_OK
    if args.password_stdin:  # test with a password given for this run only
        secrets.set(found.name, password(found.name), session_only=True)
    try:
        secrets.require(found.name)
    except BotpsyError as exc:
        print(f"{found.name} ({found.kind}): not tested: {exc}", file=out)
        return EXIT_ERROR
    checks: list[Any] = []
    if isinstance(found, CalDAVAccount):
        from botpsy_desktop.adapters.calendar import CalDAVSource

        timeout = app.config.calendar.timeout_s
        source = CalDAVSource(found, secrets.provider(found.name), timeout_s=timeout)
        checks.append(("CalDAV", source.check))
    else:
        from botpsy_desktop.adapters.email import MailClient

        timeout = app.config.email.timeout_s
        client = MailClient(found, secrets.provider(found.name), timeout_s=timeout)
        checks += [("IMAP", client.check_imap), ("SMTP", client.check_smtp)]
    parts, ok = [], True
    for label, check in checks:
        try:
            parts.append(check())
        except BotpsyError as exc:
            ok = False
            parts.append(f"{label} failed: {exc}")
    print(f"{found.name} ({found.kind}): {'; '.join(parts)}", file=out)
    return EXIT_OK if ok else EXIT_ERROR


COMMANDS["account"] = cmd_account


def _add_bench_command(sub: Any) -> None:
    bench = sub.add_parser(
        "bench", help="measure a model's speed and memory: raw llama.cpp against the app"
    )
    bench.add_argument("--model", metavar="PATH", help="GGUF file (default: the config's model)")
    bench.add_argument("--threads", type=int, default=2, metavar="N", help="threads (2)")
    bench.add_argument("--n-ctx", type=int, default=16384, metavar="N", help="context (16384)")
    bench.add_argument("--repeats", type=int, default=3, metavar="N", help="runs per figure (3)")
    bench.add_argument("--decode-tokens", type=int, default=64, metavar="N", help="(64)")
    bench.add_argument("--requests", type=int, default=100, metavar="N", help="memory run (100)")
    bench.add_argument("--follow-ups", type=int, default=4, metavar="N", help="(4)")
    bench.add_argument(
        "--depths", default="", metavar="N,N", help="also raw speed at these contexts (1024,...)"
    )
    bench.add_argument(
        "--thread-counts", default="", metavar="N,N", help="also raw speed per thread count"
    )
    bench.add_argument("--tools", default="", metavar="NAMES", help="only these tools (a,b)")
    bench.add_argument("--json", action="store_true", help="print only the JSON")


class _BenchHarness:
    """The agent path for `botpsy bench`: an isolated profile in a temporary folder, with the
    app's tools (nothing of the user's is read, the network is a closed local port) and every
    approval denied."""

    def __init__(self, home: str, only: Sequence[str]) -> None:
        from pathlib import Path

        from botpsy_desktop.agent.tools import ToolRegistry
        from botpsy_desktop.core.config import Config
        from botpsy_desktop.core.paths import Paths

        paths = Paths.resolve(home)
        paths.ensure()
        for sub in ("files", "music"):
            (Path(home) / sub).mkdir()
        config = Config()
        config.files.roots = [str(Path(home) / "files")]
        config.music.folders = [str(Path(home) / "music")]
        config.music.player = "none"
        config.weather.geocoding_url = config.weather.forecast_url = "http://127.0.0.1:9/"
        config.save(paths)
        self.app = build_app(home)
        if only:
            unknown = sorted(set(only) - set(self.app.registry.names()))
            if unknown:
                self.app.close()
                raise BotpsyError(
                    f"No tool named {', '.join(unknown)}.", "See `botpsy tools` for the names."
                )
            self.app.registry = ToolRegistry([t for t in self.app.registry if t.name in only])

    @property
    def system_prompt(self) -> str:
        return self.app.loop_settings().system_prompt

    @property
    def tools(self) -> list[dict[str, Any]]:
        return self.app.registry.schemas()

    def run(self, backend: Any, text: str, conversation_id: str | None) -> Any:
        import time

        from botpsy_desktop.llm.bench import AgentRun

        session = self.app.session(backend, conversation_id)
        run = AgentRun(session.conversation_id, 0.0)
        started = time.perf_counter()
        for event in session.run(text):
            if isinstance(event, ApprovalNeeded):
                event.request.deny(by="bench")
            elif isinstance(event, TurnFinished):
                run.turns.append(event.stats)
            elif isinstance(event, Answer):
                run.answered = True
        run.wall_s = time.perf_counter() - started
        return run

    def warm(self, backend: Any, conversation_id: str | None) -> None:
        self.app.warm(backend, conversation_id, think=False)

    def close(self) -> None:
        self.app.close()


def cmd_bench(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Speed and memory side by side in one run; a table and JSON (docs/PERFORMANCE.md)."""
    import tempfile
    import time
    from pathlib import Path

    from botpsy_desktop.llm.bench import BenchOptions, format_table, run_bench

    model = args.model or app.config.model.path
    if not model or not Path(model).expanduser().is_file():
        raise BotpsyError(
            f"No model file to measure{f' at {model}' if model else ''}.",
            "Pass --model FILE.gguf (python tools/bench.py builds a BotPsy-shaped one).",
        )
    try:
        depths = tuple(int(d) for d in args.depths.split(",") if d.strip())
        counts = tuple(int(d) for d in args.thread_counts.split(",") if d.strip())
    except ValueError:
        raise BotpsyError(
            f"--depths {args.depths!r} or --thread-counts {args.thread_counts!r} is not a list "
            "of numbers.",
            "Use e.g. --depths 1024,4096 --thread-counts 1,2",
        ) from None
    options = BenchOptions(
        threads=args.threads,
        n_ctx=args.n_ctx,
        repeats=max(args.repeats, 1),
        decode_tokens=max(args.decode_tokens, 2),
        requests=max(args.requests, 1),
        follow_ups=max(args.follow_ups, 1),
        depths=depths,
        thread_counts=counts,
    )
    started = time.perf_counter()

    def log(line: str) -> None:
        print(f"bench {time.perf_counter() - started:7.1f}s  {line}", file=err, flush=True)

    with tempfile.TemporaryDirectory(prefix="botpsy-bench-") as home:
        harness = _BenchHarness(home, [t for t in args.tools.split(",") if t.strip()])
        try:
            result = run_bench(Path(model).expanduser(), harness, options, log=log)
        finally:
            harness.close()
    if not args.json:
        print(format_table(result), file=out)
    print(json.dumps(result), file=out)
    return EXIT_OK


COMMANDS["bench"] = cmd_bench
COMMANDS["eval"] = cmd_eval
COMMANDS["mcp"] = cmd_mcp


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out, err = sys.stdout, sys.stderr
    if args.command == "db":  # works on a database the app would refuse to open
        return cmd_db(Paths.resolve(args.home), args, out, err)
    try:
        app = build_app(args.home)
    except BotpsyError as exc:
        print(f"botpsy: {exc}", file=err)
        return EXIT_ERROR
    from botpsy_desktop.agent.logs import setup_logging

    logs = setup_logging(app.paths, app.config.logs, app.secrets.known_values, face="cli")
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
        logs.close()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
