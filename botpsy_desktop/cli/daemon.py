"""`botpsy daemon`: ring alarms and run routines in the foreground until stopped."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_OK, set_from_signal_handler
from botpsy_desktop.core.errors import BotpsyError

if TYPE_CHECKING:
    from botpsy_desktop.agent.routines import DaemonRoutines


def add_command(sub: Any) -> None:
    """The `daemon` subcommand and its options."""
    daemon = sub.add_parser(
        "daemon",
        help="ring alarms, timers and reminders and run routines in the foreground until Ctrl-C",
    )
    daemon.add_argument("--json", action="store_true", help="print one JSON object per event")
    daemon_src = daemon.add_mutually_exclusive_group()  # routines run on it (else model.path)
    daemon_src.add_argument("--model", metavar="PATH", help="GGUF model that runs routines")
    daemon_src.add_argument("--replay", metavar="FILE", help="replay routines' model output")


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

    from botpsy_desktop.adapters.alarms import AlarmKind

    def on_ring(event: AlarmFired) -> None:
        if event.kind is AlarmKind.RESTORE:  # a way back: carried out, said by restored()
            return
        emit(json.dumps(event.as_dict(), ensure_ascii=False) if args.json else event.line())

    def restored(line: str) -> None:
        emit(json.dumps({"event": "restored", "text": line}) if args.json else line)

    if app.restores is not None:
        app.restores.said.append(restored)

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: set_from_signal_handler(stop))
    alarms.add_listener(on_ring)
    routines = _daemon_routines(app, args, emit, err)
    app.start_indexing()  # the documents index catches up, then follows changes, until stopped
    try:
        now = alarms.now()
        missed = alarms.start()
        for miss in missed:
            if miss.kind is AlarmKind.RESTORE:
                continue  # carried out just below
            emit(json.dumps(miss.as_dict(), ensure_ascii=False) if args.json else miss.line(now))
        if app.restores is not None:
            app.restores.catch_up(missed)
        if routines is not None:
            from botpsy_desktop.agent.routines import catch_up

            for fired in catch_up(alarms, missed):  # each missed routine that catches up, once
                on_ring(fired)
                routines.on_fired(fired)
            assert routines.queue is not None
            routines.queue.watch(adopt=True)  # parked runs of ended processes go on here
        upcoming = [a for a in alarms.alarms() if a.next_ring is not None]
        from botpsy_desktop.cli.alarms import warn_unreadable

        warn_unreadable(alarms, err)  # the rest rings; these are named with the way out
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
            routines.close()  # runs parked for an approval stay stored, for the next start
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
    from botpsy_desktop.agent.approval_notes import ApprovalNotifications
    from botpsy_desktop.agent.loop import AgentSession
    from botpsy_desktop.agent.routines import DaemonRoutines
    from botpsy_desktop.core.dbus_notifications import DesktopNotifications
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

    # approvals are answered from a notification, the window or `botpsy approvals`; a run
    # waits (parked: it holds nothing up) until agent.background_approval_timeout_s
    settings = app.loop_settings()
    timeout = settings.background_approval_timeout_s
    settings = replace(settings, background_approval_timeout_s=timeout)

    def make_session(backend: Backend, conversation_id: str) -> AgentSession:
        return AgentSession(
            backend,
            app.registry,
            app.gate,
            app.store,
            settings,
            conversation_id,
            background=True,
            busy=app.busy,  # the documents index waits while a routine's model writes
        )

    queue = app.approvals()
    desktop = DesktopNotifications().start()  # the desktop's notifications (any OS), if any

    def notify(title: str, text: str) -> None:
        desktop.notify(f"note:{title}", title, text, [("default", "Open BotPsy")])

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
        queue=queue,
        notify=notify,
    )
    notes = ApprovalNotifications(
        queue, desktop, open_app=lambda _s: open_window(args.home), tz=alarms.tz
    )
    routines.on_close += [queue.close, notes.close, desktop.shutdown]
    alarms.add_listener(routines.on_fired)
    waits = "until decided" if timeout is None else f"up to {timeout:g} s"
    print(
        f"botpsy daemon: routines run on {model} (loaded when the first one is due); their "
        f"approval requests wait {waits} (agent.background_approval_timeout_s) for an answer "
        "from a notification, the window or `botpsy approvals`.",
        file=err,
        flush=True,
    )
    return routines


def open_window(home: str | None) -> None:
    """What a notification's Open does in the daemon: the window, with its approvals queue."""
    exe = shutil.which("botpsy-desktop")
    command = [exe] if exe else [sys.executable, "-m", "botpsy_desktop.ui.main"]
    command.append("--approvals")
    if home:
        command += ["--home", home]
    subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)
