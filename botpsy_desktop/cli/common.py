"""What the `botpsy` commands share: exit codes, model progress on the terminal, first run."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import TYPE_CHECKING, TextIO

from botpsy_desktop.app import App

if TYPE_CHECKING:
    from botpsy_desktop.llm.models.installed import ModelEvent

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130

MAX_ID = 2**63 - 1
"""The largest number a stored row's id can be (SQLite's 64-bit integer)."""


def row_id(text: str) -> int:
    """An argparse type for the number of a stored row (an approval, a routine, an alarm): a
    whole number from 1 to 2**63-1, else a usage error saying so (never a traceback)."""
    try:
        value = int(text.strip(), 10) if len(text) <= 40 else None
    except ValueError:
        value = None
    if value is None or not 1 <= value <= MAX_ID:
        shown = text if len(text) <= 30 else text[:27] + "..."
        raise argparse.ArgumentTypeError(
            f"{shown!r} is not an ID: give the number the list shows (a whole number from 1 "
            f"to {MAX_ID})"
        )
    return value


class EventPrinter:
    """Shows model events: a live bar with speed and time left on a terminal, else a few lines."""

    def __init__(self, err: TextIO) -> None:
        self.err, self.tty, self.live, self.step = err, err.isatty(), False, -1

    def end_line(self) -> None:
        if self.live:
            self.err.write("\n")
            self.live = False

    def __call__(self, event: ModelEvent) -> None:
        from botpsy_desktop.llm.models.download import format_progress
        from botpsy_desktop.llm.models.installed import Status

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


def first_run(app: App, args: argparse.Namespace, err: TextIO) -> bool:
    """No model yet: one sentence on how to get one; on a terminal, offer the default download."""
    if args.model or args.replay or args.engine or app.config.engine.url or app.config.model.path:
        return True
    models = app.models()
    demo = models.demo_fallback()  # the `demo` extra: a first answer with no download
    if demo is not None:
        args.model = str(models.path_of(demo))
        notice = models.demo_notice(demo)
        if notice:
            print(notice, file=err)
        return True
    print(models.first_run_message(), file=err)
    if models.installed() or not (sys.stdin.isatty() and err.isatty()):
        return False
    entry = models.catalog.default_entry
    err.write(f"Download {entry.name} {entry.default_quantization} now? [y/N] ")
    err.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        return False
    show = EventPrinter(err)
    try:
        models.pull(use=True, on_event=show)
    finally:
        show.end_line()
    return True


def set_from_signal_handler(event: threading.Event) -> None:
    """Set ``event`` from a signal handler without the risk of a deadlock.

    A handler runs in the main thread between two of its bytecodes, possibly while that thread
    holds the event's internal lock (inside ``event.wait``); ``event.set()`` there waits for that
    lock forever. A short-lived thread sets it instead, as soon as the lock is free.
    """
    threading.Thread(target=event.set, name="signal-set", daemon=True).start()
