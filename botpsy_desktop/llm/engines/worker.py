"""The engine worker process: loads one model and serves the engine to the app over a connection.

Started by llm/engines/engine_process.py as ``python -m botpsy_desktop.llm.engines.worker ADDRESS``
with the connection's key on stdin. A crash in here (llama.cpp, a damaged model, the out-of-memory
killer) ends this process only: the app reports it and starts another. ``faulthandler`` writes the
stack of every thread to stderr on a fatal signal, and stderr goes to a file the app reads into
its log when the worker dies. The worker imports no Qt and nothing of the agent.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import functools
import logging
import math
import os
import pickle
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Client, Connection
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.engines.worker_protocol import (
    CRASH_FILE_ENV,
    METHODS,
    STREAMING,
    Call,
    Cancel,
    Done,
    Failed,
    Item,
    LogLine,
    Ready,
    Shutdown,
    WorkerSpec,
    piece_message,
)
from botpsy_desktop.llm.types import TextPiece

if TYPE_CHECKING:
    from botpsy_desktop.core.config import ModelSettings

PROBE_MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Say hello in one short sentence."},
]


HOLD_MAX_S = 0.010
"""What is held goes out before its oldest piece would wait longer than this, as far as the
pace of the tokens so far predicts (a 60 Hz window paints every 17 ms)."""
HOLD_S = HOLD_MAX_S
"""A piece of text is held back, to go out with the next ones in one message, only while
tokens come less than this far apart: then the next one is due before the held one is
``HOLD_MAX_S`` late. A GPU's tokens (3-5 ms apart) go three or so to a message, a small model's
on a fast CPU (5-10 ms) two; BotPsy's on a laptop's CPU (25 ms or more) each at once."""


class _Sender:
    """The connection's sending side, shared by the serving thread and log records."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.fd = conn.fileno() if sys.platform != "win32" else None  # a socket, written as is

    def send(self, message: Any) -> None:
        with self.lock:
            self.conn.send(message)

    def send_plain(self, message: tuple[Any, ...]) -> None:
        """``send`` for a tuple of plain values (a piece of text): the same bytes on the wire,
        without the copy of the reducer table the connection's pickler makes per message, and
        on a socket one write of the length and the pickle, as the connection's own
        ``send_bytes`` makes after several calls of Python."""
        data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        if self.fd is None:
            with self.lock:
                self.conn.send_bytes(data)
            return
        frame = len(data).to_bytes(4, "big") + data  # a piece is far under 2 GiB
        with self.lock:
            while frame:
                frame = frame[os.write(self.fd, frame) :]


class PieceSender:
    """The streamed text of one call on its way to the app: each piece at once while tokens
    come slowly; while they come faster than ``HOLD_S`` apart, the pieces of a few tokens in one
    message (at most ``HOLD_MAX_S`` late, as the pace predicts), since a message costs the two
    processes more CPU than a token's own Python (docs/PERFORMANCE.md). Nothing is held past
    the call's next other item or its end; the first piece is never held."""

    __slots__ = ("call_id", "held", "last", "send", "since", "thinking")

    def __init__(self, call_id: int, send: Callable[[tuple[Any, ...]], None]) -> None:
        self.call_id = call_id
        self.send = send
        self.held: list[str] = []
        self.thinking = False
        self.since = 0.0  # when the oldest held piece came
        self.last = -math.inf  # when the previous piece came

    def add(self, text: str, thinking: bool, now: float) -> None:
        gap, self.last = now - self.last, now
        if self.held:
            if thinking != self.thinking:
                self.flush()
            else:
                self.held.append(text)
                if gap >= HOLD_S or now - self.since + gap > HOLD_MAX_S:
                    self.flush()
                return
        if gap >= HOLD_S:
            self.send(piece_message(self.call_id, text, thinking))
            return
        self.held.append(text)
        self.thinking, self.since = thinking, now

    def flush(self) -> None:
        if self.held:
            text = self.held[0] if len(self.held) == 1 else "".join(self.held)
            self.held = []
            self.send(piece_message(self.call_id, text, self.thinking))


class _ForwardLogs(logging.Handler):
    """Sends the worker's log records to the app, which logs them as its own."""

    def __init__(self, sender: _Sender) -> None:
        super().__init__(logging.INFO)
        self.sender = sender

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(OSError, ValueError):  # the app is gone: nothing to tell
            self.sender.send(LogLine(record.levelno, record.name, record.getMessage()))


def _crash_if_asked(sent: int, tokens: int) -> None:
    """The test-only crash hook (worker_protocol.CRASH_FILE_ENV), after ``sent`` items of
    which ``tokens`` were pieces of text."""
    path = os.environ.get(CRASH_FILE_ENV)
    if not path or not os.path.exists(path):
        return
    try:
        words = Path(path).read_text(encoding="utf-8").split() or ["SIGSEGV"]
    except OSError:
        return
    how, after = words[0], int(words[1]) if len(words) > 1 else 1
    if (tokens if words[2:3] == ["tokens"] else sent) < after:
        return
    try:
        os.unlink(path)
    except OSError:
        return  # another worker took it
    if how == "hang":  # like a decode stuck in native code: no more items, cancels unheard
        sys.stderr.write("engine worker: hanging on purpose, as the test hook asked\n")
        sys.stderr.flush()
        threading.Event().wait()
    sys.stderr.write(f"engine worker: crashing on purpose ({how}), as the test hook asked\n")
    sys.stderr.flush()
    if how == "exit":
        os._exit(3)
    if how == "SIGSEGV":
        ctypes.string_at(0)  # a real invalid read in native code
    os.kill(os.getpid(), getattr(signal, how))


class Worker:
    """Serves one loaded engine: one call at a time, Cancel and Shutdown read alongside."""

    def __init__(self, conn: Connection, engine: Any, sender: _Sender) -> None:
        self.conn = conn
        self.sender = sender
        self.engine = engine
        self.calls: queue.Queue[Call | None] = queue.Queue()
        self.cancels: dict[int, threading.Event] = {}
        self.lock = threading.Lock()
        self.crash_hook = bool(os.environ.get(CRASH_FILE_ENV))

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            if isinstance(message, Call):
                with self.lock:
                    self.cancels[message.id] = threading.Event()
                self.calls.put(message)
            elif isinstance(message, Cancel):
                with self.lock:
                    event = self.cancels.get(message.id)
                if event is not None:
                    event.set()
            elif isinstance(message, Shutdown):
                break
        with self.lock:  # the app left (or closed the engine): stop what runs, within a token
            for event in self.cancels.values():
                event.set()
        self.calls.put(None)

    def serve(self) -> None:
        threading.Thread(target=self._read, name="engine-worker-reader", daemon=True).start()
        while (call := self.calls.get()) is not None:
            with self.lock:
                cancel = self.cancels[call.id]
            try:
                self._run(call, cancel)
            except BotpsyError as exc:
                self.sender.send(Failed(call.id, type(exc).__name__, exc.message, exc.hint))
            except Exception as exc:  # a bug or an unexpected library error: told, not fatal
                logging.getLogger(__name__).exception("engine call %s failed", call.method)
                self.sender.send(Failed(call.id, type(exc).__name__, str(exc)))
            finally:
                with self.lock:
                    self.cancels.pop(call.id, None)
        self.engine.close()

    def _run(self, call: Call, cancel: threading.Event) -> None:
        if call.method not in METHODS:
            raise BotpsyError(f"The engine has no method {call.method!r}.")
        if call.method == "probe":
            self.sender.send(Done(call.id, probe(self.engine, cancel)))
            return
        if call.method == "state":
            self.sender.send(Done(call.id, engine_state(self.engine)))
            return
        if call.method.startswith("bench"):  # the bench's raw llama.cpp side (llm/bench/raw.py)
            from botpsy_desktop.llm.bench import raw as bench_raw

            if call.method == "bench":
                self.sender.send(Done(call.id, bench_raw.worker_op(self.engine, *call.args)))
                return
            method: Callable[..., Any] = functools.partial(
                bench_raw.STREAMS[call.method], self.engine
            )
        else:
            method = getattr(self.engine, call.method)
        kwargs = dict(call.kwargs)
        if call.method in STREAMING or call.method == "warm":
            kwargs["cancel"] = cancel
        if call.method == "warm" and kwargs.pop("progress", False):
            call_id = call.id
            kwargs["progress"] = lambda p: self.sender.send(Item(call_id, p))
        if call.method not in STREAMING:
            self.sender.send(Done(call.id, method(*call.args, **kwargs)))
            return
        tokens = 0
        pieces = PieceSender(call.id, self.sender.send_plain)
        clock = time.perf_counter
        try:
            for n, value in enumerate(method(*call.args, **kwargs)):
                if self.crash_hook:
                    pieces.flush()  # the hook counts what reached the app
                    _crash_if_asked(n, tokens)
                if type(value) is TextPiece:  # one per token: compact, perhaps coalesced
                    pieces.add(value.text, value.started_in_thinking, clock())
                    tokens += 1
                else:
                    pieces.flush()
                    self.sender.send(Item(call.id, value))
        finally:  # what was written reaches the app before the end or the error
            pieces.flush()
        self.sender.send(Done(call.id))


def probe(engine: Any, cancel: threading.Event | None = None) -> dict[str, Any]:
    """Prove the engine: evaluate a short prompt in one batch and generate a few tokens."""
    completion = None
    for item in engine.complete(
        PROBE_MESSAGES, [], enable_thinking=False, cancel=cancel, max_tokens=4
    ):
        completion = item
    stats = getattr(completion, "stats", None)
    return {
        "prompt_tokens": getattr(stats, "prompt_tokens", 0),
        "completion_tokens": getattr(stats, "completion_tokens", 0),
        "prefill_s": round(getattr(stats, "prefill_s", 0.0), 4),
        "decode_s": round(getattr(stats, "decode_s", 0.0), 4),
        "text": getattr(completion, "text", ""),
    }


def engine_state(engine: Any) -> dict[str, Any]:
    """Counters the bench and the fidelity check read after a call."""
    states = getattr(engine, "states", None)
    return {
        "disk_restores": engine.disk_restores,
        "disk_saves": engine.disk_saves,
        "last_disk_read_s": engine.last_disk_read_s,
        "last_disk_restore_s": engine.last_disk_restore_s,
        "last_prompt_tokens": list(engine.last_prompt_tokens),
        "checkpoints_nbytes": states.nbytes if states is not None else 0,
        "checkpoints_on_disk": states.on_disk if states is not None else 0,
        "checkpoint_disk_reads": states.disk_reads if states is not None else 0,
        "checkpoints": [
            {"label": c.label, "n_tokens": c.n_tokens, "pinned": c.pinned}
            for c in (states.checkpoints if states is not None else [])
        ],
        "n_tokens": int(engine._llama.n_tokens),  # what the context holds now
    }


def load(spec: WorkerSpec) -> Any:
    from botpsy_desktop.llm.cache.prefix_store import PrefixStore
    from botpsy_desktop.llm.engines.engine import LlamaBackend

    # The app validated the settings (core/config.py: ModelSettings) before sending them as
    # plain data; the engine reads them as attributes. Validating them again here would import
    # pydantic and every settings model: about 10 MiB of this process's memory, measured.
    settings = cast("ModelSettings", SimpleNamespace(**spec.settings))
    store = None
    if spec.prefix_cache_dir is not None:
        store = PrefixStore.for_profile(Path(spec.prefix_cache_dir), spec.prefix_cache_mb)
    kwargs: dict[str, Any] = {"prefix_store": store, "model_sha256": spec.model_sha256}
    if spec.layout is not None:
        kwargs["layout"] = spec.layout
    if spec.device is not None:
        kwargs["device"] = spec.device
    return LlamaBackend(settings, spec.model_path, **kwargs)


def ready(engine: Any, spec: WorkerSpec) -> Ready:
    renderer = engine.renderer
    return Ready(
        pid=os.getpid(),
        name=engine.name,
        n_ctx=engine.n_ctx,
        info=engine.info,
        memory_estimate=dict(engine.memory_estimate),
        hybrid=bool(engine.hybrid),
        template=renderer.source if not renderer.uses_fallback else None,
        bos_token=renderer.bos_token,
        eos_token=renderer.eos_token,
        layout=engine.layout.layout,  # the layout llm/models/cpu_layout.py chose
        device=engine.placement.describe(),  # where llm/models/gpu_device.py placed it
    )


def main(argv: list[str]) -> int:
    faulthandler.enable(sys.stderr, all_threads=True)
    if len(argv) != 2:
        sys.stderr.write(
            "usage: python -m botpsy_desktop.llm.engines.worker ADDRESS (key on stdin)\n"
        )
        return 2
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    conn = Client(argv[1], authkey=authkey)
    sender = _Sender(conn)
    root = logging.getLogger()
    root.addHandler(_ForwardLogs(sender))
    root.setLevel(logging.INFO)
    spec: WorkerSpec = conn.recv()
    try:
        engine = load(spec)
    except BotpsyError as exc:
        sender.send(Failed(0, type(exc).__name__, exc.message, exc.hint))
        return 1
    except Exception as exc:
        sender.send(Failed(0, type(exc).__name__, str(exc)))
        return 1
    sender.send(ready(engine, spec))
    Worker(conn, engine, sender).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
