"""The engine in its own process: a Backend whose model runs in a worker the app owns.

``EngineProcess`` starts ``llm/engines/worker.py`` (one per loaded model) and offers the same
interface as the in-process ``LlamaBackend``: streamed items, cancel within a token, warm-up, token
counts, the model's facts, and the bench's and the fidelity check's hooks. Checkpoints and prefix
states stay inside the worker. Messages are small pickled dataclasses over
``multiprocessing.connection`` (llm/engines/worker_protocol.py says why).

A crash of the worker (a signal, an exit, the out-of-memory killer) costs the call it was
serving: that call raises ``EngineCrashed`` with a plain sentence (the agent loop keeps the reply
so far, marked interrupted), the reason and the worker's last words (its stack from
``faulthandler``, llama.cpp's own messages) go to the app's log, and the next call starts a new
worker. Crashes in a row back off and say what to do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import itertools
import json
import logging
import os
import pickle
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.errors import BotpsyError, ModelError
from botpsy_desktop.llm.backend import Message
from botpsy_desktop.llm.engines.worker_protocol import (
    Call,
    Cancel,
    Done,
    Failed,
    Item,
    LogLine,
    Ready,
    Shutdown,
    WorkerSpec,
    item_of,
)
from botpsy_desktop.llm.types import Completion, GenerationStats, PromptProgress, TextPiece

log = logging.getLogger(__name__)

CRASHES_BEFORE_BACKOFF = 3
"""Crashes in a row after which new workers are started only after a pause."""
BACKOFF_S = 30.0
"""The first pause; it doubles with each further crash, up to ``BACKOFF_MAX_S``."""
BACKOFF_MAX_S = 600.0
CANCEL_POLL_S = 0.02
"""How often a waiting call looks at its cancel event (a cancel then reaches the worker at once
and stops generation within a token)."""
CANCEL_GRACE_S = 1.0
"""How long a cancelled call waits for the worker to end it; a worker that does not (hung in
native code, say) is killed, and the next call starts a new one."""
STDERR_TAIL = 16 * 1024
"""How much of a dead worker's last output goes into the log."""
WHAT_TO_DO = (
    "Run `botpsy doctor` to check the engine, and `botpsy doctor --bundle` to make a report "
    "to attach to a bug report."
)

_SIGNALS = {
    signal.SIGSEGV: "segmentation fault",
    signal.SIGABRT: "aborted",
    signal.SIGKILL: "killed, perhaps for lack of memory",
    signal.SIGILL: "illegal instruction",
    signal.SIGFPE: "arithmetic fault",
    signal.SIGTERM: "terminated",
}
for _name, _what in (("SIGBUS", "bus error"),):
    if hasattr(signal, _name):
        _SIGNALS[getattr(signal, _name)] = _what


class EngineCrashed(ModelError):
    """The engine worker died while serving a call; the next call starts a new one."""

    def __init__(
        self,
        message: str,
        hint: str = "",
        *,
        reason: str = "",
        returncode: int = 0,
        doing: str = "",
    ) -> None:
        super().__init__(message, hint)
        self.reason = reason
        self.returncode = returncode
        self.doing = doing


class EngineStopped(EngineCrashed):
    """A cancelled call the worker did not end within ``CANCEL_GRACE_S``: the worker was killed
    (not counted as a crash, nor blamed on the weight layout); the next call starts a new one."""


def describe_exit(returncode: int | None) -> str:
    """A few words for how a process ended: "segmentation fault", "exit code 3"."""
    if returncode is None:
        return "stopped answering"
    if returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"signal {-returncode}"
        return _SIGNALS.get(sig, sig.name)
    return f"exit code {returncode}"


# glibc's allocator raises its mmap threshold to the size of each large block freed (up to 32
# MiB), after which blocks of that size come from the heap and stay resident when freed: the
# temporary buffers llama.cpp uses to write and read a state file (a layer's attention cache,
# several MiB) would keep that memory. A fixed threshold keeps every block of 1 MiB or more in
# its own mapping, handed back when freed. Measured: see docs/PERFORMANCE.md (issue 34, item
# 3). Other C libraries ignore the variable; a value the person set is kept.
WORKER_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


def worker_env() -> dict[str, str]:
    """The worker's environment: this process's, with ``WORKER_ENV`` where it is not set."""
    return {**WORKER_ENV, **os.environ}


def worker_command(address: str) -> list[str]:
    """How to start a worker with this interpreter (or this bundled program)."""
    if getattr(sys, "frozen", False):  # the installers' program (packaging/entry_*.py)
        return [sys.executable, "--engine-worker", address]
    return [sys.executable, "-m", "botpsy_desktop.llm.engines.worker", address]


LAYOUT_FILE = "layouts.json"
FAULTS = frozenset(
    getattr(signal, name)
    for name in ("SIGSEGV", "SIGILL", "SIGBUS", "SIGABRT", "SIGFPE")
    if hasattr(signal, name)
)
"""Signals of a fault in native code: a first decode that ends in one of these is blamed on the
weight layout (not SIGKILL: the out-of-memory killer is no fault of the layout)."""


def llama_build() -> str:
    """The llama.cpp build the workers run (llama-cpp-python's version), without importing it."""
    try:
        return "llama-cpp-python " + importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        return "llama-cpp-python (bundled)"


class LayoutMemory:
    """Which weight layouts (llm/models/cpu_layout.py) each model has decoded with on this llama.cpp
    build, and the models that fell back to the plain layout after a crash in their first decode
    (the profile's ``cache/engine/layouts.json``; `botpsy doctor` shows it)."""

    def __init__(self, folder: Path | None) -> None:
        self.path = folder / LAYOUT_FILE if folder is not None else None

    @staticmethod
    def key(path: Path) -> str:
        """The model file (where, size, time) and the llama.cpp build."""
        try:
            st = path.stat()
            ident = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        except OSError:
            ident = str(path)
        return f"{ident} {llama_build()}"

    def _load(self) -> dict[str, Any]:
        """The models' entries, each checked: a value of the wrong type (the file edited by
        hand, written by another version, or damaged) is dropped with a warning, and the file
        is written back without it, so it is repaired once and never stops a run."""
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning(
                "%s cannot be read (%s): the layouts it held are tried again", self.path, exc
            )
            return {}
        models = data.get("models") if isinstance(data, dict) else None
        if not isinstance(models, dict):
            log.warning("%s holds no models: the layouts it held are tried again", self.path)
            self._save({})
            return {}
        clean = {key: _checked_entry(entry) for key, entry in models.items()}
        clean = {key: entry for key, entry in clean.items() if entry}
        if clean != models:
            log.warning(
                "%s had entries of the wrong type; they were dropped (the layouts they named "
                "are tried again)",
                self.path,
            )
            self._save(clean)
        return clean

    def _save(self, models: dict[str, Any]) -> None:
        if self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"version": 1, "models": models}, indent=1), "utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("could not write %s: %s", self.path, exc)

    def get(self, key: str) -> dict[str, Any]:
        entry = self._load().get(key)
        return entry if isinstance(entry, dict) else {}

    def forget(self, key: str, kind: str = "plain") -> dict[str, Any] | None:
        """Drop the plain-layout verdict of ``key`` (doctor, once the blamed layout decodes
        again), or with ``kind`` "cpu" the verdict against its GPU; what it said, or None."""
        models = self._load()
        entry = models.get(key, {})
        verdict: dict[str, Any] | None = entry.pop(kind, None)
        if verdict is not None:
            self._save(models)
        return verdict

    def decoded(self, key: str, layout: str) -> None:
        """``layout`` answered with this model: a later crash is not blamed on it."""
        models = self._load()
        entry = models.setdefault(key, {})
        if layout not in entry.setdefault("ok", []):
            entry["ok"].append(layout)
            self._save(models)

    def fall_back(
        self, key: str, name: str, layout: str, reason: str, verdict: str = "plain"
    ) -> None:
        """Remember that ``key`` runs with the plain layout (``verdict`` "plain") or on the CPU
        (``verdict`` "cpu": ``layout`` then names the GPU device that crashed)."""
        models = self._load()
        models.setdefault(key, {})[verdict] = {
            "model": name,
            "after": layout,
            "reason": reason,
            "at": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        self._save(models)

    def fallbacks(self) -> list[dict[str, Any]]:
        """Every model that runs plain after a crash, with the layout that crashed and why."""
        return [
            {"key": key, **entry["plain"]}
            for key, entry in self._load().items()
            if isinstance(entry, dict) and isinstance(entry.get("plain"), dict)
        ]


def _checked_entry(entry: Any) -> dict[str, Any]:
    """A model's entry in layouts.json with only well-typed values: ``ok``, a list of layout
    names; ``plain`` and ``cpu``, the verdicts (model, after, reason, at: text). Anything else
    is dropped."""
    if not isinstance(entry, dict):
        return {}
    clean: dict[str, Any] = {}
    ok = entry.get("ok")
    if isinstance(ok, list) and all(isinstance(x, str) for x in ok):
        clean["ok"] = ok
    fields = ("model", "after", "reason", "at")
    for kind in ("plain", "cpu"):
        verdict = entry.get(kind)
        if isinstance(verdict, dict) and all(isinstance(verdict.get(f), str) for f in fields):
            clean[kind] = {f: verdict[f] for f in fields}
    return clean


class _Worker:
    """One running worker: its process, connection and the file its stderr goes to."""

    def __init__(self, proc: subprocess.Popen[bytes], conn: Connection, stderr: Path) -> None:
        self.proc = proc
        self.conn = conn
        self.stderr = stderr
        self.ready: Ready | None = None
        self.decoded = False  # a streamed call finished in this worker
        self.stop_by: float | None = None  # a cancel was sent: the call must end by then
        self._poller: Any = None
        self._plain = sys.platform != "win32" and hasattr(select, "poll")  # a socket: read it
        self._buf = bytearray()  # bytes read of the messages that follow

    def readable(self, timeout: float) -> bool:
        """Whether a message waits, or comes within ``timeout`` seconds (or the connection
        broke: the read says so). ``Connection.poll`` builds a selector for every call, which
        costs more than a streamed piece's unpickling; a poll object registered once costs one
        system call."""
        if not self._plain:
            return bool(self.conn.poll(timeout))
        if self._framed() is not None:  # read already, with the message before
            return True
        poller = self._poller
        if poller is None:
            poller = self._poller = select.poll()
            poller.register(self.conn.fileno(), select.POLLIN)
        return bool(poller.poll(timeout * 1000))

    def _framed(self) -> tuple[int, int] | None:
        """Where the first message read lies in ``_buf`` (``Connection``'s framing: a 4-byte
        big-endian length, or -1 and an 8-byte one, then the pickle), if it is whole."""
        buf = self._buf
        if len(buf) < 4:
            return None
        size, start = int.from_bytes(buf[:4], "big", signed=True), 4
        if size == -1:  # over 2 GiB
            if len(buf) < 12:
                return None
            size, start = int.from_bytes(buf[4:12], "big"), 12
        return (start, start + size) if len(buf) >= start + size else None

    def receive(self) -> Any:
        """The next message, as ``Connection.recv`` reads it, but with one read of whatever
        the socket holds instead of two per message (the length, then the rest): a message
        read along with the one before costs no system call at all."""
        if not self._plain:
            return self.conn.recv()
        while (frame := self._framed()) is None:
            chunk = os.read(self.conn.fileno(), 1 << 16)
            if not chunk:
                raise EOFError
            self._buf += chunk
        start, end = frame
        message = pickle.loads(self._buf[start:end])
        del self._buf[:end]
        return message

    def tail(self) -> str:
        try:
            with open(self.stderr, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - STDERR_TAIL))
                return f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def discard(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.stderr.unlink()


class EngineProcess:
    """A Backend backed by a worker process running ``LlamaBackend`` (see the module doc).

    Not thread-safe, like the engine: one thread drives it at a time (a lock keeps calls whole).
    The model is loaded when it is made: a model that does not load raises ModelError here.
    """

    def __init__(
        self,
        settings: ModelSettings,
        path: str | os.PathLike[str],
        *,
        prefix_cache_dir: Path | None = None,
        prefix_cache_mb: int = 0,
        model_sha256: str | None = None,
        layout: str | None = None,
        work_dir: Path | None = None,
    ) -> None:
        """``prefix_cache_dir`` keeps prefix states on disk (llm/cache/prefix_store.py);
        ``work_dir`` holds the workers' stderr files (the system's temporary folder if None)."""
        self.settings = settings
        self.path = Path(path)
        self.spec = WorkerSpec(
            model_path=str(path),
            settings=settings.model_dump(),
            model_sha256=model_sha256,
            prefix_cache_dir=str(prefix_cache_dir) if prefix_cache_dir is not None else None,
            prefix_cache_mb=prefix_cache_mb,
            layout=layout,
        )
        self.work_dir = work_dir
        self.layouts = LayoutMemory(work_dir)
        self._layout_key = LayoutMemory.key(self.path)
        self.fallback: dict[str, Any] | None = None
        """Why this model runs with the plain layout here (a crash in its first decode with
        another one), or None."""
        if layout is None and settings.cpu_layout == "auto":
            remembered = self.layouts.get(self._layout_key).get("plain")
            if isinstance(remembered, dict):
                self.fallback = remembered
                self.spec = dataclasses.replace(self.spec, layout="plain")
        self.gpu_fallback: dict[str, Any] | None = None
        """Why this model runs on the CPU here (its GPU backend crashed in its first decode on
        that device), or None."""
        if settings.device != "cpu":
            remembered = self.layouts.get(self._layout_key).get("cpu")
            if isinstance(remembered, dict):
                self.gpu_fallback = remembered
                self.spec = dataclasses.replace(self.spec, device="cpu")
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._worker: _Worker | None = None
        self._ready: Ready | None = None
        self._renderer: Any = None
        self._crashes = 0  # in a row, without a finished call since
        self._last_crash = 0.0
        self.restarts = 0
        self.last_crash: EngineCrashed | None = None
        self._closed = False
        self._start()

    # -- the worker's life ----------------------------------------------------------------
    def _start(self) -> _Worker:
        if self._crashes >= CRASHES_BEFORE_BACKOFF:
            pause = min(BACKOFF_S * 2 ** (self._crashes - CRASHES_BEFORE_BACKOFF), BACKOFF_MAX_S)
            wait = self._last_crash + pause - time.monotonic()
            if wait > 0:
                raise EngineCrashed(
                    f"The model engine stopped unexpectedly {self._crashes} times in a row "
                    f"(last: {self.last_crash.reason if self.last_crash else 'unknown'}); it "
                    f"will be tried again in {wait:.0f} s.",
                    WHAT_TO_DO,
                    reason="backing off",
                )
        if self.work_dir is not None:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="engine-worker-", suffix=".log", dir=self.work_dir)
        stderr = Path(name)
        key = secrets.token_bytes(32)
        family = "AF_PIPE" if sys.platform == "win32" else "AF_UNIX"
        with Listener(family=family, authkey=key) as listener:
            address = str(listener.address)
            try:
                proc = subprocess.Popen(
                    worker_command(address),
                    env=worker_env(),
                    stdin=subprocess.PIPE,
                    stdout=fd,
                    stderr=fd,
                    close_fds=True,
                )
            except OSError as exc:
                os.close(fd)
                stderr.unlink(missing_ok=True)
                raise ModelError(f"The model engine could not be started: {exc}.") from exc
            os.close(fd)
            assert proc.stdin is not None
            try:
                proc.stdin.write(key.hex().encode() + b"\n")
                proc.stdin.close()
            except OSError:
                pass  # it died at once: found out below
            conn = self._accept(listener, address, key, proc)
        if conn is None:
            worker = _Worker(proc, _ClosedConnection(), stderr)  # type: ignore[arg-type]
            raise self._died(worker, "while starting")
        worker = _Worker(proc, conn, stderr)
        try:
            conn.send(self.spec)
            message = self._receive(worker, None, 0)
        except EngineCrashed:
            raise
        if isinstance(message, Failed):
            worker.discard()
            raise _error(message)
        if not isinstance(message, Ready):
            worker.discard()
            raise ModelError(f"The model engine answered {type(message).__name__} to a load.")
        worker.ready = message
        self._ready = message
        self._renderer = None
        self._worker = worker
        log.info(
            "model engine started (pid %d): %s, layout %s",
            message.pid,
            message.name,
            message.layout or "default",
        )
        return worker

    @staticmethod
    def _accept(
        listener: Listener, address: str, key: bytes, proc: subprocess.Popen[bytes]
    ) -> Connection | None:
        """The worker's connection; None if the worker died before making it."""
        accepted = threading.Event()
        died = threading.Event()

        def watch() -> None:  # unblock accept() if the worker dies first
            while not accepted.wait(0.05):
                if proc.poll() is not None:
                    died.set()
                    with contextlib.suppress(OSError, EOFError):
                        Client(address, authkey=key).close()
                    return

        watcher = threading.Thread(target=watch, name="engine-start-watch", daemon=True)
        watcher.start()
        try:
            conn = listener.accept()
        finally:
            accepted.set()
            watcher.join()
        if died.is_set():
            conn.close()
            return None
        return conn

    def _worker_now(self) -> _Worker:
        if self._closed:
            raise ModelError("The model was closed.", "Load it again.")
        worker = self._worker
        if worker is not None and worker.proc.poll() is not None:
            self._died(worker, "while idle")  # logged; this call starts a new one
            worker = None
        if worker is None:
            worker = self._start()
            self.restarts += 1
        return worker

    def _died(self, worker: _Worker, doing: str) -> EngineCrashed:
        """Bury a dead worker: log why, count the crash, make the sentence for the caller."""
        with contextlib.suppress(OSError):
            worker.conn.close()
        try:
            returncode: int | None = worker.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # the connection broke but the process lives on
            worker.proc.kill()
            worker.proc.wait()
            returncode = None
        reason = describe_exit(returncode)
        tail = worker.tail()
        log.error(
            "the model engine (pid %d, %s) stopped %s: %s%s",
            worker.proc.pid,
            self.path.name,
            doing,
            reason,
            f"; its last output:\n{tail}" if tail else " (no output)",
        )
        with contextlib.suppress(OSError):
            worker.stderr.unlink()
        if self._worker is worker:
            self._worker = None
        self._crashes += 1
        self._last_crash = time.monotonic()
        layout = worker.ready.layout if worker.ready is not None else None
        device = worker.ready.device if worker.ready is not None else {}
        gpu = device.get("description") or device.get("device") or "cpu"
        if (
            returncode is not None
            and -returncode in FAULTS
            and not worker.decoded
            and doing != "while idle"
            and gpu != "cpu"
            and f"gpu:{gpu}" not in self.layouts.get(self._layout_key).get("ok", [])
        ):
            # its first decode on this GPU crashed: run the model on the CPU from now on
            self.layouts.fall_back(self._layout_key, self.path.name, gpu, reason, "cpu")
            self.gpu_fallback = self.layouts.get(self._layout_key).get("cpu")
            self.spec = dataclasses.replace(self.spec, device="cpu")
            self._crashes = 0  # the next worker runs otherwise
            log.warning(
                "%s crashed llama.cpp's %s backend in its first decode on %s: it runs on the "
                "CPU from now on (llama.cpp build %s)",
                self.path.name,
                device.get("device", "GPU"),
                gpu,
                llama_build(),
            )
            error = EngineCrashed(
                f"The model engine stopped unexpectedly ({reason}) {doing}, the first time it "
                f"ran {self.path.name} on {gpu}. It will restart on the CPU for your next "
                "request (slower, but safe here; `botpsy doctor` shows it); nothing was lost.",
                reason=reason,
                returncode=returncode,
                doing=doing,
            )
            self.last_crash = error
            return error
        if (
            returncode is not None
            and -returncode in FAULTS
            and not worker.decoded
            and doing != "while idle"
            and layout not in (None, "plain")
            and self.settings.cpu_layout == "auto"
            and layout not in self.layouts.get(self._layout_key).get("ok", [])
        ):
            # its first decode with this layout crashed: run the model plain from now on
            self.layouts.fall_back(self._layout_key, self.path.name, str(layout), reason)
            self.fallback = self.layouts.get(self._layout_key).get("plain")
            self.spec = dataclasses.replace(self.spec, layout="plain")
            self._crashes = 0  # the next worker runs otherwise
            log.warning(
                "%s crashed llama.cpp in its first decode with the %s weight layout: it runs "
                "with the plain layout from now on (llama.cpp build %s)",
                self.path.name,
                layout,
                llama_build(),
            )
            error = EngineCrashed(
                f"The model engine stopped unexpectedly ({reason}) {doing}, the first time it "
                f"ran {self.path.name} with the {layout} weight layout. It will restart with "
                "the plain layout for your next request (slower, but safe here; `botpsy "
                "doctor` shows it); nothing was lost.",
                reason=reason,
                returncode=returncode,
                doing=doing,
            )
            self.last_crash = error
            return error
        if self._crashes >= CRASHES_BEFORE_BACKOFF:
            error = EngineCrashed(
                f"The model engine stopped unexpectedly ({reason}) {doing}, "
                f"{self._crashes} times in a row. Nothing was lost.",
                WHAT_TO_DO,
                reason=reason,
                returncode=returncode or 0,
                doing=doing,
            )
        else:
            error = EngineCrashed(
                f"The model engine stopped unexpectedly ({reason}) {doing}. It will restart "
                "for your next request; nothing was lost.",
                reason=reason,
                returncode=returncode or 0,
                doing=doing,
            )
        self.last_crash = error
        return error

    def _receive(self, worker: _Worker, cancel: threading.Event | None, call_id: int) -> Any:
        """The next message for ``call_id``; forwards ``cancel`` once it is set. Once a cancel
        is sent, the call must end within ``CANCEL_GRACE_S``, or the worker is killed
        (EngineStopped): a hung worker never holds the caller."""
        doing = "while answering" if call_id else "while loading the model"
        while True:
            try:
                if cancel is not None and worker.stop_by is None:
                    if cancel.is_set():
                        worker.conn.send(Cancel(call_id))
                        worker.stop_by = time.monotonic() + CANCEL_GRACE_S
                    elif not worker.readable(CANCEL_POLL_S):
                        continue
                if worker.stop_by is not None and not worker.readable(
                    max(worker.stop_by - time.monotonic(), 0.0)
                ):
                    raise self._stop_hung(worker)
                message = item_of(worker.receive())
            except (EOFError, OSError) as exc:
                raise self._died(worker, doing) from exc
            if isinstance(message, LogLine):
                logging.getLogger(message.logger).log(message.level, "%s", message.message)
                continue
            if getattr(message, "id", call_id) != call_id and not isinstance(message, Ready):
                continue  # the end of a call abandoned earlier
            return message

    def _stop_hung(self, worker: _Worker) -> EngineStopped:
        """Kill a worker that did not end a cancelled call in time; the next call starts anew."""
        with contextlib.suppress(OSError):
            worker.conn.close()
        if worker.proc.poll() is None:
            worker.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.proc.wait(timeout=10)
        tail = worker.tail()
        log.warning(
            "the model engine (pid %d, %s) did not stop within %g s of being asked to: it was "
            "killed, and a new one starts for the next request%s",
            worker.proc.pid,
            self.path.name,
            CANCEL_GRACE_S,
            f"; its last output:\n{tail}" if tail else "",
        )
        with contextlib.suppress(OSError):
            worker.stderr.unlink()
        if self._worker is worker:
            self._worker = None
        return EngineStopped(
            f"The model engine did not stop within {CANCEL_GRACE_S:g} s of being asked to, so "
            "it was stopped; it starts again for your next request.",
            reason="did not stop when asked",
            doing="while stopping",
        )

    # -- calls --------------------------------------------------------------------------
    def stream(
        self,
        method: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        cancel: threading.Event | None,
    ) -> Iterator[Any]:
        """Run a streaming method in the worker (worker_protocol.STREAMING), yielding its
        items as they come; ``cancel`` stops it within a token."""
        with self._lock:
            worker = self._worker_now()
            worker.stop_by = None
            call_id = next(self._ids)
            ended = False
            try:
                try:
                    worker.conn.send(Call(call_id, method, args, kwargs))
                except OSError as exc:
                    raise self._died(worker, "while answering") from exc
                while True:
                    message = self._receive(worker, cancel, call_id)
                    if isinstance(message, Item):
                        if not worker.decoded and isinstance(message.value, TextPiece):
                            self._layout_decodes(worker)
                        yield message.value
                    elif isinstance(message, Done):
                        ended = True
                        self._decoded(worker)
                        return
                    elif isinstance(message, Failed):
                        ended = True
                        raise _error(message)
            except EngineCrashed:
                ended = True
                raise
            finally:
                if not ended and self._worker is worker:
                    self._abandon(worker, call_id)

    def _abandon(self, worker: _Worker, call_id: int) -> None:
        """The caller stopped reading a stream: cancel it and read up to its end (the worker
        is killed if that does not come within ``CANCEL_GRACE_S``)."""
        try:
            worker.conn.send(Cancel(call_id))
            if worker.stop_by is None:
                worker.stop_by = time.monotonic() + CANCEL_GRACE_S
            while True:
                message = self._receive(worker, None, call_id)
                if isinstance(message, Done):  # it ran to its end (the caller had enough)
                    self._decoded(worker)
                    return
                if isinstance(message, Failed):
                    return
        except EngineCrashed:
            pass
        except OSError:  # the connection broke as the cancel went out: found out next call
            pass

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run an engine method in the worker and return its result (worker_protocol.METHODS)."""
        cancel = kwargs.pop("cancel", None)
        progress: Callable[[Any], None] | None = kwargs.pop("progress", None)
        if progress is not None:
            kwargs["progress"] = True  # the worker sends Item messages on the way (warm)
        with self._lock:
            worker = self._worker_now()
            worker.stop_by = None
            call_id = next(self._ids)
            doing = "while preparing" if method == "warm" else "while answering"
            try:
                worker.conn.send(Call(call_id, method, args, kwargs))
            except OSError as exc:
                raise self._died(worker, doing) from exc
            try:
                message = self._receive(worker, cancel, call_id)
                while isinstance(message, Item):  # progress on the way
                    if progress is not None:
                        progress(message.value)
                    message = self._receive(worker, cancel, call_id)
            except EngineCrashed as exc:
                if doing != "while answering" and not isinstance(exc, EngineStopped):
                    raise self._reworded(exc, doing) from None
                raise
            if isinstance(message, Failed):
                raise _error(message)
            if not isinstance(message, Done):
                raise ModelError(f"The model engine answered {type(message).__name__}.")
            if method in ("warm", "probe"):
                self._decoded(worker)
            return message.value

    def _decoded(self, worker: _Worker) -> None:
        """A call that decodes finished: the crash count ends, the layout is known to work."""
        self._crashes = 0
        if not worker.decoded:
            worker.decoded = True
            self._known_good(worker)

    def _layout_decodes(self, worker: _Worker) -> None:
        """A first token was decoded (the prompt's batches went through): a crash later in
        this answer is not the layout's (the crash count still waits for a finished call)."""
        worker.decoded = True
        self._known_good(worker)

    def _known_good(self, worker: _Worker) -> None:
        """The worker's layout and GPU device decoded with this model: a later crash is not
        blamed on them."""
        if worker.ready is None:
            return
        if worker.ready.layout is not None:
            self.layouts.decoded(self._layout_key, worker.ready.layout)
        gpu = worker.ready.device.get("description") or worker.ready.device.get("device")
        if gpu and gpu != "cpu":
            self.layouts.decoded(self._layout_key, f"gpu:{gpu}")

    def _reworded(self, exc: EngineCrashed, doing: str) -> EngineCrashed:
        error = EngineCrashed(
            exc.message.replace("while answering", doing),
            exc.hint,
            reason=exc.reason,
            returncode=exc.returncode,
            doing=doing,
        )
        self.last_crash = error
        return error

    # -- the Backend interface ------------------------------------------------------------
    @property
    def ready(self) -> Ready:
        assert self._ready is not None
        return self._ready

    @property
    def name(self) -> str:
        return self.ready.name

    @property
    def n_ctx(self) -> int:
        return self.ready.n_ctx

    @property
    def info(self) -> Any:
        """The model's header (GGUFInfo)."""
        return self.ready.info

    @property
    def memory_estimate(self) -> dict[str, int]:
        return self.ready.memory_estimate

    @property
    def hybrid(self) -> bool:
        return self.ready.hybrid

    @property
    def layout(self) -> str | None:
        return self.ready.layout

    @property
    def device(self) -> dict[str, Any]:
        """Where the model runs (gpu_device.Placement.describe())."""
        return self.ready.device

    @property
    def pid(self) -> int | None:
        """The running worker's process id (None between a crash and the next call)."""
        return self._worker.proc.pid if self._worker is not None else None

    @property
    def renderer(self) -> Any:
        """The model's chat template (the same renderer the worker uses)."""
        if self._renderer is None:
            from botpsy_desktop.llm.language.prompt import PromptRenderer

            r = self.ready
            self._renderer = PromptRenderer(
                r.template, bos_token=r.bos_token, eos_token=r.eos_token
            )
        return self._renderer

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        **options: Any,
    ) -> Iterator[TextPiece | Completion]:
        """As ``LlamaBackend.complete`` (``options``: max_tokens, force_tool_call): every item
        the engine yields is passed on as it is."""
        kwargs = {"enable_thinking": enable_thinking, **options}
        return self.stream("complete", (_plain(messages), _plain(tools)), kwargs, cancel)

    def generate(
        self, prompt: str, *, cancel: threading.Event | None = None, **options: Any
    ) -> Iterator[TextPiece | Completion]:
        return self.stream("generate", (prompt,), options, cancel)

    def count_tokens(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> int:
        return int(
            self.call(
                "count_tokens", _plain(messages), _plain(tools), enable_thinking=enable_thinking
            )
        )

    def warm(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
        cancel: threading.Event | None = None,
        progress: Callable[[PromptProgress], None] | None = None,
        keep: str | None = None,
        most: int | None = None,
    ) -> GenerationStats:
        """Evaluate ahead what the next request will start with (LlamaBackend.warm), in the
        worker; ``progress`` hears how far it is, passed on from the worker as it goes;
        ``keep`` keeps a conversation's warmed state on disk; ``most``: nothing when more
        tokens than that would need evaluating."""
        stats: GenerationStats = self.call(
            "warm",
            _plain(messages),
            _plain(tools),
            enable_thinking=enable_thinking,
            cancel=cancel,
            progress=progress,
            keep=keep,
            most=most,
        )
        return stats

    def probe(self) -> dict[str, Any]:
        """Prove the engine: a short prompt evaluated in one batch, a few tokens generated."""
        result: dict[str, Any] = self.call("probe")
        return result

    def tokenize(self, text: str) -> list[int]:
        return list(self.call("tokenize", text))

    def prompt_tokens(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> list[int]:
        return list(
            self.call(
                "prompt_tokens", _plain(messages), _plain(tools), enable_thinking=enable_thinking
            )
        )

    def prefix_text(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
    ) -> str:
        return str(
            self.call(
                "prefix_text", _plain(messages), _plain(tools), enable_thinking=enable_thinking
            )
        )

    def reset(self) -> None:
        self.call("reset")

    def flush_prefix_writes(self) -> None:
        self.call("flush_prefix_writes")

    def state(self) -> dict[str, Any]:
        """The engine's counters: disk restores and saves, the last prompt's tokens, ..."""
        result: dict[str, Any] = self.call("state")
        return result

    @property
    def last_prompt_tokens(self) -> list[int]:
        return list(self.state()["last_prompt_tokens"])

    def close(self) -> None:
        """Let the worker finish its disk writes and exit (killed if it does not in time)."""
        with self._lock:
            self._closed = True
            worker, self._worker = self._worker, None
            if worker is None:
                return
            with contextlib.suppress(OSError):
                worker.conn.send(Shutdown())
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.proc.wait(timeout=30)
            worker.discard()


class _ClosedConnection:
    def close(self) -> None:
        pass


def _plain(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(item) for item in items]


def _error(failed: Failed) -> BotpsyError:
    """The worker's error as the app's own type (ModelError for anything unexpected)."""
    from botpsy_desktop.core import errors

    kind = getattr(errors, failed.kind, None)
    if isinstance(kind, type) and issubclass(kind, BotpsyError):
        return kind(failed.message, failed.hint)
    return ModelError(f"The model engine failed: {failed.kind}: {failed.message}")


def prove_model(
    settings: ModelSettings,
    path: str | os.PathLike[str],
    *,
    work_dir: Path | None = None,
    layout: str | None = None,
) -> dict[str, Any]:
    """Load ``path`` in a new worker and decode a few tokens (a prompt in one batch, then token
    by token): what import, verify and doctor run to prove a model works here, where a crash
    costs nothing. Returns the probe's figures; raises ModelError saying what went wrong."""
    small = settings.model_copy(
        update={"n_ctx": min(settings.n_ctx, 2048), "max_tokens": 4, "state_checkpoints": 0}
    )
    name = Path(path).name
    try:
        engine = EngineProcess(small, path, work_dir=work_dir, layout=layout)
        try:
            try:
                result = engine.probe()
            except EngineCrashed:
                fell_back = (engine.spec.layout == "plain" and engine.fallback is not None) or (
                    engine.spec.device == "cpu" and engine.gpu_fallback is not None
                )
                if not fell_back:
                    raise
                result = engine.probe()  # it fell back to plain or the CPU: prove that one
        finally:
            engine.close()
    except EngineCrashed as exc:
        doing = "decoding" if exc.doing == "while answering" else "loading"
        raise ModelError(
            f"{name} crashed the model engine ({exc.reason}) while {doing} it.",
            "The file may be damaged or need a newer llama.cpp; the log has the details "
            "(`botpsy doctor --bundle`).",
        ) from exc
    result["layout"] = engine.layout
    result["fallback"] = engine.fallback
    result["device"] = engine.device
    result["gpu_fallback"] = engine.gpu_fallback
    return result
