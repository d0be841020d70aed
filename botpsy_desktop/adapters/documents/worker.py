"""Text extraction in a child process with a time limit, so one bad file never stalls the index.

Parsers meet files crafted or damaged in every way: a PDF whose objects loop, a spreadsheet of
a million rows. Run in the indexing thread, such a file could hold the index (and its lock)
for ever, or take the app's memory with it. ``IsolatedReader`` sends each path to a worker
process (``python -m botpsy_desktop.adapters.documents.worker``, JSON lines over its standard
input and output), waits at most ``timeout_s`` (plus ``PER_MB_S`` a megabyte) for the text,
and kills and replaces the worker when it does not answer in time or dies; that file is
recorded as not indexed with the reason.
On Linux the worker's address space is limited (``WORKER_MEMORY``), so a file that would take
gigabytes ends in a MemoryError for that file. In a frozen bundle (no ``-m``) and where
``isolate`` is off, ``InProcessReader`` reads in the calling thread, unbounded in time.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import threading
from typing import IO, Any, Protocol

from botpsy_desktop.adapters.documents.extract import Extracted, Passage, Unreadable, extract

log = logging.getLogger(__name__)

PER_MB_S = 2.0
"""Seconds a file may take per megabyte, on top of the time limit (pypdf reads about 1 MB of
PDF a second on one slow core)."""

WORKER_MEMORY = 2 * 1024**3
"""The worker's address-space limit on Linux (bytes)."""


class Reader(Protocol):
    """Turns a path into its passages (raises Unreadable with the reason)."""

    def read(self, path: str, max_bytes: int) -> Extracted: ...

    def close(self) -> None: ...


class InProcessReader:
    """Extraction in the calling thread (tests of the extractors; frozen bundles)."""

    def read(self, path: str, max_bytes: int) -> Extracted:
        return extract(path, max_bytes)

    def close(self) -> None:
        return None


class IsolatedReader:
    """Extraction in a worker process, ``timeout_s`` per file (see the module's notes)."""

    def __init__(self, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes] = queue.Queue()

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._lines = queue.Queue()
        proc = subprocess.Popen(
            [sys.executable, "-m", "botpsy_desktop.adapters.documents.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        lines = self._lines
        out = proc.stdout
        assert out is not None

        def pump(stream: IO[bytes]) -> None:
            try:
                for line in stream:
                    lines.put(line)
            except (OSError, ValueError):  # closed under it: the worker was killed
                pass
            lines.put(b"")  # the worker ended

        threading.Thread(target=pump, args=(out,), daemon=True, name="documents-reader").start()
        self._proc = proc
        return proc

    def read(self, path: str, max_bytes: int) -> Extracted:
        proc = self._start()
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps({"path": path, "max_bytes": max_bytes}).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            self._kill()
            raise Unreadable("the reader process stopped on this file") from None
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0
        allowed = self.timeout_s + PER_MB_S * size / 1e6  # a 500-page PDF takes its time
        try:
            line = self._lines.get(timeout=allowed)
        except queue.Empty:
            self._kill()
            raise Unreadable(f"took longer than {allowed:.3g} s to read") from None
        if not line:
            self._kill()
            raise Unreadable("the reader process stopped on this file (out of memory or a crash)")
        answer: dict[str, Any] = json.loads(line)
        if "unreadable" in answer:
            raise Unreadable(str(answer["unreadable"]))
        return Extracted(
            [Passage(str(p), str(t)) for p, t in answer["passages"]], str(answer.get("note", ""))
        )

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
        if proc is not None:
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()

    def close(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None and proc.stdin is not None:
            try:
                proc.stdin.close()  # the worker ends at the end of its input
                proc.wait(timeout=2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()


def reader(isolate: bool = True, timeout_s: float = 30.0) -> Reader:
    """The reader the index uses: isolated unless asked not to or in a frozen bundle."""
    if isolate and not getattr(sys, "frozen", False):
        return IsolatedReader(timeout_s)
    return InProcessReader()


def _limit_memory() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    except (ImportError, ValueError, OSError):  # not Linux, or not allowed: unbounded
        pass


def main() -> None:
    """The worker: one JSON request per input line, one JSON answer per output line."""
    logging.disable(logging.WARNING)
    if sys.platform.startswith("linux"):
        _limit_memory()
    if hasattr(os, "nice"):  # background work: the model and the window come first
        os.nice(10)
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        request = json.loads(line)
        try:
            found = extract(request["path"], int(request["max_bytes"]))
            answer: dict[str, Any] = {
                "passages": [(p.place, p.text) for p in found.passages],
                "note": found.note,
            }
        except Unreadable as exc:
            answer = {"unreadable": str(exc)}
        except MemoryError:
            answer = {"unreadable": "too large to read in the memory allowed"}
        out.write(json.dumps(answer).encode("ascii") + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
