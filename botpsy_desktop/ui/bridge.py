"""The bridge between the Qt window and the Qt-free core: one scheduler thread owns the model."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Any

from PySide6.QtCore import QObject, QThread, QTimer, Signal

from botpsy_desktop.agent.approvals import RoutineInfo, StoredApproval
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    ContextTrimmed,
    Error,
    Thinking,
    Token,
    ToolResult,
    ToolStarted,
    TurnFinished,
)
from botpsy_desktop.agent.loop import AgentSession
from botpsy_desktop.agent.routines import keep_title
from botpsy_desktop.agent.scheduler import (
    EngineContext,
    Finished,
    Item,
    Parked,
    Priority,
    Queued,
    Request,
    RequestScheduler,
    session_job,
)
from botpsy_desktop.app import App
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.backend import Backend
from botpsy_desktop.llm.types import PromptProgress

NO_MODEL = "No model is loaded yet. Use File ▸ Get a model… or File ▸ Open model file…."
WARM_SAY_TOKENS = 512  # a warm-up of fewer tokens is over before it could be read
TOKEN_BATCH_S = 0.03  # streamed text reaches the GUI at most ~33 times a second


class EngineWorker(QObject):
    """The window's face of the request scheduler (``agent/scheduler.py``) that owns the model.

    Requests from the window, the quick-command box and warm-ups go through one priority queue
    and run one at a time on the scheduler's engine thread; every core event becomes a signal
    (emitted from that thread, delivered queued to GUI objects). The GUI thread never waits on
    the model, the disk or a tool. An approval of a request someone watches holds the engine
    (never the GUI) until the user decides or Stop is pressed; a background run (a routine)
    waiting for one is parked instead: the user's requests run meanwhile, and it goes on once
    the approval is decided (or gives up after agent.background_approval_timeout_s).
    """

    modelLoaded = Signal(str, dict)  # backend name, details (quantization, context, ...)
    modelFailed = Signal(str)
    # every request signal starts with the request id, so several callers (the window, the
    # quick-command box) can share one engine and each take only its own events
    queued = Signal(str, int)  # request id, requests that run before it (while it waits)
    requestStarted = Signal(str, str)  # request id, conversation id
    thinking = Signal(str, str)  # request id, text
    token = Signal(str, str)  # request id, text
    toolStarted = Signal(str, str, str, dict)  # request id, call id, tool, arguments
    toolResult = Signal(str, object)  # request id, ToolResult
    approvalNeeded = Signal(str, object)  # request id, ApprovalRequest
    parked = Signal(str, str)  # request id, call id: a background run gave the engine up
    turnFinished = Signal(str, object)  # request id, TurnFinished
    answer = Signal(str, object)  # request id, Answer
    failed = Signal(str, str, str)  # request id, kind, message
    contextTrimmed = Signal(str, str)  # request id, what was left out of the prompt (a sentence)
    requestFinished = Signal(str, str)  # request id, conversation id
    promptProgress = Signal(str, object)  # request id, PromptProgress of its prompt evaluation
    streamed = Signal(str, int, float)  # request id, pieces streamed this turn, seconds since
    # a warm-up's progress (PromptProgress, what is prepared in words); None when it is over
    warmProgress = Signal(object, str)

    def __init__(self, app: App) -> None:
        super().__init__()
        self.app = app
        self.scheduler = RequestScheduler(name="botpsy-engine")
        self._requests: dict[str, Request] = {}
        self._conversations: dict[str, dict[str, str]] = {}  # request id -> its conversation
        self._lock = threading.Lock()
        self._closing = False

    @property
    def backend(self) -> Backend | None:
        return self.scheduler.backend

    def submit(
        self,
        conversation_id: str,
        text: str,
        think: bool,
        priority: Priority = Priority.INTERACTIVE,
        request_id: str | None = None,
        *,
        background: bool = False,
        title: str | None = None,
        origin: str | None = None,
        routine: RoutineInfo | None = None,
        resume: StoredApproval | None = None,
    ) -> str:
        """Queue a request (from any thread); returns its id at once.

        ``background`` (a routine, nobody watching): its approval requests wait in the gate's
        inbox (the pending-approvals queue), never in a dialog, and are kept in the stored queue
        (agent/approvals.py) with ``routine``, who asked. ``resume``: go on with a run parked
        by an earlier process instead of asking ``text``. ``title`` names the conversation
        again once the request is over (a first request otherwise names it after its text).
        """
        rid = request_id or uuid.uuid4().hex
        if conversation_id and not background:
            self._stop_parked_in(conversation_id)
        conv = {"id": conversation_id}
        relay = _Relay(self, rid, conv, think)

        def make_session(backend: Backend) -> AgentSession:
            session = self.app.session(backend, conversation_id or None, background=background)
            conv["id"] = session.conversation_id
            self.requestStarted.emit(rid, session.conversation_id)
            return session

        job = session_job(
            make_session,
            text,
            think=think,
            no_model=NO_MODEL,
            origin=origin,
            queue=self.app.approvals() if background else None,
            routine=routine,
            resume=resume,
        )
        if title:
            job = keep_title(job, self.app.store, lambda: conv["id"], title)
        request = self.scheduler.submit(
            job,
            priority,
            label=text[:40],
            on_item=relay.on_item,
            request_id=rid,
        )
        with self._lock:
            if not request.finished:
                self._requests[rid] = request
                self._conversations[rid] = conv
        return rid

    def _stop_parked_in(self, conversation_id: str) -> None:
        """The user writes in a conversation whose background run is parked mid-turn: that run
        is stopped first (its approval denied; it winds up before the user's request runs), so
        that two requests never write one conversation at once."""
        parked = {r.id for r in self.scheduler.parked()}
        with self._lock:
            stale = [
                self._requests[rid]
                for rid, conv in self._conversations.items()
                if rid in parked and conv["id"] == conversation_id and rid in self._requests
            ]
        for request in stale:
            request.cancel()
        # one taken over from an ended process and not running (agent/approvals.py) ends too
        self.app.approvals().stop_held(conversation_id)

    def cancel(self, request_id: str) -> None:
        with self._lock:
            request = self._requests.get(request_id)
        if request is not None:
            request.cancel()

    def cancel_all(self) -> None:
        """Stop every request and any warm-up for good (the window is closing). A routine run
        parked with its approval stored, or storing it on its way to park, is left as it is:
        closing the scheduler suspends it, and it goes on after the next start
        (agent/approvals.py)."""
        with self._lock:
            self._closing = True
            requests = list(self._requests.values())
        for request in requests:
            if not request.kept_at_close:
                request.cancel()

    def load(self, model: str, replay: str) -> None:
        """Load a GGUF (``model``) or a replay file (``replay``); empty strings mean 'none'.

        Runs on the engine thread before anything still waiting; the prefix is then warmed.
        """

        def job(ctx: EngineContext) -> None:
            ctx.replace_backend(None)
            try:
                backend = self.app.backend(model=model or None, replay=replay or None)
            except BotpsyError as exc:
                text = str(exc)
                if not (model or replay or self.app.config.model.path):
                    # no model chosen: say what this computer has, in the window's words
                    with contextlib.suppress(BotpsyError, OSError):
                        text = self.app.models().first_run_message(window=True)
                self.modelFailed.emit(text)
                return
            ctx.replace_backend(backend)
            details = _details(backend)
            if not replay:  # named for people, not by the file's raw metadata
                with contextlib.suppress(BotpsyError, OSError):
                    readable = self.app.models().display_name(model or self.app.config.model.path)
                    if readable:
                        details["model"] = readable
            self.modelLoaded.emit(backend.name, details)
            self._warm(None, None)  # the system prompt and tool schemas, before any request

        self.scheduler.submit(job, Priority.CONTROL, label="load model")

    def _warm(self, conversation_id: str | None, think: bool | None) -> None:
        """Queue a warm-up (see App.warm): it runs when nothing else waits, and gives way (is
        cancelled within one small batch) as soon as the user asks something."""
        with self._lock:
            if self._closing:
                return

        def job(ctx: EngineContext) -> None:
            if ctx.backend is None:
                return
            # only a head start: the next request evaluates what it needs and reports errors
            try:
                with contextlib.suppress(BotpsyError, RuntimeError):
                    self.app.warm(
                        ctx.backend,
                        conversation_id,
                        think=think,
                        cancel=ctx.cancel,
                        progress=self._warm_progress,
                    )
            finally:
                self.warmProgress.emit(None, "")

        self.scheduler.submit(job, Priority.WARMUP, label="warm-up")

    def _warm_progress(self, progress: PromptProgress, what: str) -> None:
        """Said only for a warm-up long enough to be worth saying (the prefix of a new model,
        not a conversation's last message)."""
        if progress.total >= WARM_SAY_TOKENS:
            self.warmProgress.emit(progress, what)

    def _forget(self, rid: str) -> None:
        with self._lock:
            self._requests.pop(rid, None)
            self._conversations.pop(rid, None)

    def _finished(self, rid: str, conversation_id: str, started: bool, think: bool) -> None:
        self._forget(rid)
        self.requestFinished.emit(rid, conversation_id)
        if started and conversation_id:
            self._warm(conversation_id, think)  # the follow-up then evaluates only its message

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block until nothing runs or waits (tests, the self-test); True if idle in time.

        A parked background run (waiting for an approval, not for the engine) does not count.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.scheduler.running is None and not self.scheduler.pending():
                return True
            time.sleep(0.01)
        return False

    def shutdown(self) -> None:
        """Cancel everything, close the model on the engine thread and end that thread."""
        self.cancel_all()
        self.scheduler.close()


class _Relay:
    """Turns one request's items into the worker's signals; streamed text is batched."""

    def __init__(self, worker: EngineWorker, rid: str, conv: dict[str, str], think: bool):
        self.worker = worker
        self.rid = rid
        self.conv = conv
        self.think = think
        self.pending: dict[str, list[str]] = {"thinking": [], "token": []}
        self.last_flush = time.monotonic()
        self.pieces = 0  # streamed in this model turn (a token each, from llama.cpp)
        self.first_piece = 0.0

    def flush(self) -> None:
        w, rid = self.worker, self.rid
        if self.pending["thinking"]:
            w.thinking.emit(rid, "".join(self.pending["thinking"]))
            self.pending["thinking"].clear()
        if self.pending["token"]:
            w.token.emit(rid, "".join(self.pending["token"]))
            self.pending["token"].clear()
        self.last_flush = time.monotonic()
        if self.pieces:
            w.streamed.emit(rid, self.pieces, self.last_flush - self.first_piece)

    def on_item(self, item: Item) -> None:
        w, rid = self.worker, self.rid
        if isinstance(item, Thinking | Token):
            if not self.pieces:
                self.first_piece = time.monotonic()
            self.pieces += 1
            self.pending["thinking" if isinstance(item, Thinking) else "token"].append(item.text)
            if time.monotonic() - self.last_flush >= TOKEN_BATCH_S:
                self.flush()
            return
        self.flush()
        if isinstance(item, TurnFinished | ToolStarted):
            self.pieces = 0  # the next turn's figures start again
        if isinstance(item, Queued):
            ahead = item.ahead
            if QThread.currentThread() is w.thread():
                # said while ``submit`` still runs on the GUI thread: deliver it once the
                # caller knows the request's id (posted, so it still comes before its start)
                QTimer.singleShot(0, w, lambda: w.queued.emit(rid, ahead))
            else:
                w.queued.emit(rid, ahead)
        elif isinstance(item, PromptProgress):
            w.promptProgress.emit(rid, item)
        elif isinstance(item, ApprovalNeeded):
            w.approvalNeeded.emit(rid, item.request)
        elif isinstance(item, Parked):
            w.parked.emit(rid, item.call_id)
        elif isinstance(item, ToolStarted):
            w.toolStarted.emit(rid, item.call_id, item.name, item.arguments)
        elif isinstance(item, ToolResult):
            w.toolResult.emit(rid, item)
        elif isinstance(item, TurnFinished):
            w.turnFinished.emit(rid, item)
        elif isinstance(item, Answer):
            w.answer.emit(rid, item)
        elif isinstance(item, Error):
            # a stop says what was kept (the reply so far, what ran) after "Stopped."
            w.failed.emit(rid, item.kind, f"{item.message} {item.kept}".strip())
        elif isinstance(item, ContextTrimmed):
            w.contextTrimmed.emit(rid, item.message)
        elif isinstance(item, Finished):
            if item.state == "suspended":  # the window closes; the run waits for the next start
                w._forget(rid)
                return
            if not item.started:
                w.failed.emit(rid, "cancelled", "Stopped before it started.")
            w._finished(rid, self.conv["id"], item.started, self.think)


def _details(backend: Backend) -> dict[str, Any]:
    info = getattr(backend, "info", None)
    details: dict[str, Any] = {"name": backend.name}
    if info is not None:
        details.update(
            model=info.name,
            metadata_name=info.name,
            quantization=info.file_type,
            architecture=info.architecture,
            file_size=info.file_size,
        )
    n_ctx = getattr(backend, "n_ctx", None)
    if isinstance(n_ctx, int):
        details["n_ctx"] = n_ctx
    device = getattr(backend, "device", None)  # where a local model runs (gpu_device)
    if isinstance(device, dict):
        details["device"] = device
    return details


class EngineThread(QObject):
    """The window's handle on the engine. ``submit`` queues a request (the window's messages
    first, then quick commands); ``stop`` cancels that request directly, from the GUI thread.
    """

    def __init__(self, app: App) -> None:
        super().__init__()
        self.worker = EngineWorker(app)

    def submit(
        self,
        conversation_id: str,
        text: str,
        think: bool,
        priority: Priority = Priority.INTERACTIVE,
        *,
        background: bool = False,
        title: str | None = None,
        origin: str | None = None,
        routine: RoutineInfo | None = None,
        resume: StoredApproval | None = None,
    ) -> str:
        if not background:  # a new request of the person's own ends the reply being spoken
            self.worker.app.stop_speaking()
        return self.worker.submit(
            conversation_id,
            text,
            think,
            priority,
            background=background,
            title=title,
            origin=origin,
            routine=routine,
            resume=resume,
        )

    def load(self, model: str, replay: str) -> None:
        self.worker.load(model, replay)

    def stop(self, request_id: str) -> None:
        self.worker.cancel(request_id)

    def close(self, timeout_ms: int = 5000) -> None:
        self.worker.cancel_all()
        self.worker.scheduler.close(timeout_ms / 1000)
