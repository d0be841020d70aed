"""One request on the terminal: the options `ask` and `chat` share, approvals, printed events."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

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
    outcome_line,
    progress_text,
)
from botpsy_desktop.app import App
from botpsy_desktop.cli.common import (
    EXIT_CANCELLED,
    EXIT_ERROR,
    EXIT_OK,
    set_from_signal_handler,
)
from botpsy_desktop.core.text import terminal_safe
from botpsy_desktop.llm.types import PromptProgress

if TYPE_CHECKING:
    from botpsy_desktop.agent.loop import AgentSession
    from botpsy_desktop.llm.backend import Backend


def add_run_options(sp: argparse.ArgumentParser) -> None:
    """The model, approval, thinking and conversation options of `ask` and `chat`."""
    src = sp.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="PATH", help="GGUF model file to use")
    src.add_argument(
        "--engine",
        metavar="URL",
        help="use the llama-server at URL for this command (see `botpsy engine`)",
    )
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


@contextmanager
def opened_session(app: App, args: argparse.Namespace) -> Iterator[tuple[Backend, AgentSession]]:
    """The backend (per --model or --replay) and the session (per --conversation) of `ask` and
    `chat`; the backend is closed when the command is done."""
    problem = app.account_problem()
    if problem is not None:  # said once at the start, not only when a calendar tool fails
        print(
            terminal_safe(
                f"botpsy: warning: calendar and mail are off: {problem.message} {problem.hint}"
            ),
            file=sys.stderr,
        )
    backend = app.backend(model=args.model, replay=args.replay, engine=args.engine)
    try:
        yield backend, app.session(backend, args.conversation)
    finally:
        backend.close()


class Approver:
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
                f"\n[approval needed] {terminal_safe(request.receipt)}\n"
                "Denied: no terminal to ask on (use --approve all to allow).",
                file=self.stderr,
            )
            request.deny(by="no terminal")
            return
        print(f"\n[approval needed] {terminal_safe(request.receipt)}", file=self.stderr)
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


class CtrlC:
    """Ctrl-C while the model or a tool works stops the request: it sets ``cancel`` and the
    request ends as stopped (the loop keeps what was written; the engine stops within a token,
    or its worker is killed within a second). A second Ctrl-C, or one while the terminal waits
    for the person (an approval), leaves at once. Outside the main thread it does nothing."""

    def __init__(self, cancel: threading.Event) -> None:
        self.cancel = cancel
        self.working = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> CtrlC:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN  # ignored: left so
        ):
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.cancel.is_set() or not self.working:
            raise KeyboardInterrupt
        set_from_signal_handler(self.cancel)  # the main thread may be inside cancel.wait


def drive(events: Iterator[Event], ctrl_c: CtrlC) -> Iterator[Event]:
    """Iterate the loop; Ctrl-C meanwhile stops the request cleanly (see CtrlC)."""
    while True:
        ctrl_c.working = True
        try:
            event = next(events)
        except StopIteration:
            return
        finally:
            ctrl_c.working = False
        yield event


class ProgressLine:
    """Prompt evaluation progress on stderr: one line rewritten in place on a terminal, else a
    line at each tenth (so a log of the run shows it without flooding)."""

    def __init__(self, err: TextIO) -> None:
        self.err = err
        self.tty = err.isatty()
        self.shown = -1  # the tenth last printed (not a terminal)
        self.open = False  # a line is being rewritten

    def show(self, progress: PromptProgress) -> None:
        text = progress_text(progress)
        if self.tty:
            self.err.write(f"\r\033[K[prompt] {text}")
            self.err.flush()
            self.open = True
            return
        tenth = int(progress.fraction * 10)
        if tenth != self.shown:
            self.shown = tenth
            print(f"[prompt] {text}", file=self.err)

    def end(self) -> None:
        if self.open:
            self.err.write("\r\033[K")
            self.err.flush()
            self.open = False
        self.shown = -1


def run_request(
    app: App,
    args: argparse.Namespace,
    text: str,
    session: Any,
    out: TextIO,
    err: TextIO,
    as_json: bool,
) -> tuple[int, Transcript]:
    approver = Approver(args.approve, sys.stdin, err)
    think = app.config.model.think if args.think is None else args.think
    cancel = threading.Event()
    transcript = Transcript(text)
    in_thinking = False
    code = EXIT_OK
    progress = ProgressLine(err)
    outcomes: list[str] = []
    with CtrlC(cancel) as ctrl_c:
        for event in drive(session.run(text, cancel=cancel, think=think), ctrl_c):
            transcript.add(event)
            if isinstance(event, ApprovalNeeded):
                progress.end()
                approver.decide(event.request)
                continue
            if as_json:
                continue
            if isinstance(event, PromptProgress):
                progress.show(event)
                continue
            progress.end()
            if isinstance(event, Thinking):
                if not in_thinking:
                    err.write("[thinking] ")
                    in_thinking = True
                err.write(terminal_safe(event.text))
                err.flush()
            elif isinstance(event, Token):
                if in_thinking:
                    err.write("\n")
                    in_thinking = False
                out.write(terminal_safe(event.text))
                out.flush()
            elif isinstance(event, ToolStarted):
                args_text = json.dumps(event.arguments, ensure_ascii=False)
                print(terminal_safe(f"\n[tool] {event.name} {args_text}"), file=err)
            elif isinstance(event, ToolResult):
                status = "ok" if event.ok else "failed"
                preview = event.output if len(event.output) < 300 else event.output[:300] + " ..."
                print(terminal_safe(f"[tool {status}, {event.decision}] {preview}"), file=err)
                outcomes.append(outcome_line(event))
            elif isinstance(event, Answer):
                out.write("\n")
                # what was carried out, refused or failed, and a claim no tool backs: every time
                if event.note:
                    print(f"[note] {event.note}", file=err)
                for line in outcomes:
                    print(f"[outcome] {line}", file=err)
            elif isinstance(event, Error):
                print(terminal_safe(f"\n{event.message}"), file=err)
                if event.kept:
                    print(terminal_safe(event.kept), file=err)
                for line in outcomes:
                    print(terminal_safe(f"[outcome] {line}"), file=err)
            elif isinstance(event, ContextTrimmed):
                print(terminal_safe(f"[context] {event.message}"), file=err)
            elif isinstance(event, TurnFinished):
                pass
    if transcript.error is not None:
        code = EXIT_CANCELLED if transcript.error["kind"] == "cancelled" else EXIT_ERROR
    return code, transcript
