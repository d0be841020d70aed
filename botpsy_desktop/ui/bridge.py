"""The bridge between the Qt window and the Qt-free core: one worker thread owns the model."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from typing import Any

from PySide6.QtCore import QObject, QThread, Signal, Slot

from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    Error,
    Thinking,
    Token,
    ToolResult,
    ToolStarted,
    TurnFinished,
)
from botpsy_desktop.app import App
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.backend import Backend

TOKEN_BATCH_S = 0.03  # streamed text reaches the GUI at most ~33 times a second


class EngineWorker(QObject):
    """Lives on a worker QThread. Loads the backend there and runs requests there.

    Every core event becomes a signal; the GUI thread never waits on the model, the disk or a
    tool. Approvals block this thread (never the GUI) until the user decides or Stop is pressed.
    """

    modelLoaded = Signal(str, dict)  # backend name, details (quantization, context, ...)
    modelFailed = Signal(str)
    # every request signal starts with the request id, so several callers (the window, the
    # quick-command box) can share one engine and each take only its own events
    requestStarted = Signal(str, str)  # request id, conversation id
    thinking = Signal(str, str)  # request id, text
    token = Signal(str, str)  # request id, text
    toolStarted = Signal(str, str, str, dict)  # request id, call id, tool, arguments
    toolResult = Signal(str, object)  # request id, ToolResult
    approvalNeeded = Signal(str, object)  # request id, ApprovalRequest
    turnFinished = Signal(str, object)  # request id, TurnFinished
    answer = Signal(str, object)  # request id, Answer
    failed = Signal(str, str, str)  # request id, kind, message
    requestFinished = Signal(str, str)  # request id, conversation id

    def __init__(self, app: App) -> None:
        super().__init__()
        self.app = app
        self.backend: Backend | None = None
        self._cancels: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._warm_stop = threading.Event()  # set when a request arrives: it goes first
        self._ran_in: str | None = None  # the conversation the last request ran in
        self._closing = False

    def cancel_event(self, request_id: str) -> threading.Event:
        """The Stop switch of one request (created on first use, from any thread)."""
        with self._lock:
            if request_id not in self._cancels:
                self._warm_stop.set()
            return self._cancels.setdefault(request_id, threading.Event())

    def cancel(self, request_id: str) -> None:
        with self._lock:
            event = self._cancels.get(request_id)
        if event is not None:
            event.set()

    def cancel_all(self) -> None:
        """Stop every request and any warm-up for good (the window is closing)."""
        with self._lock:
            self._closing = True
            self._warm_stop.set()
            for event in self._cancels.values():
                event.set()

    @Slot(str, str)
    def load(self, model: str, replay: str) -> None:
        """Load a GGUF (``model``) or a replay file (``replay``); empty strings mean 'none'."""
        if self.backend is not None:
            self.backend.close()
            self.backend = None
        try:
            backend = self.app.backend(model=model or None, replay=replay or None)
        except BotpsyError as exc:
            self.modelFailed.emit(str(exc))
            return
        self.backend = backend
        self.modelLoaded.emit(backend.name, _details(backend))
        self._warm(None, None)  # the system prompt and tool schemas, before the first request

    def _warm(self, conversation_id: str | None, think: bool | None) -> None:
        """While idle, evaluate what the next request will start with (see App.warm).

        Skipped when a request is already waiting; a request that arrives stops it within one
        small batch, and continues from what was evaluated.
        """
        with self._lock:
            if self._cancels or self._closing or self.backend is None:
                return
            self._warm_stop.clear()
        # only a head start: the next request evaluates what it needs and reports any error
        with contextlib.suppress(BotpsyError, RuntimeError):
            self.app.warm(self.backend, conversation_id, think=think, cancel=self._warm_stop)

    @Slot(str, str, str, bool)
    def run(self, request_id: str, conversation_id: str, text: str, think: bool) -> None:
        cancel = self.cancel_event(request_id)
        self._ran_in = None
        try:
            self._run(request_id, conversation_id, text, think, cancel)
        finally:
            with self._lock:
                self._cancels.pop(request_id, None)
        if self._ran_in is not None:
            self._warm(self._ran_in, think)  # the follow-up then evaluates only its message

    def _run(
        self, rid: str, conversation_id: str, text: str, think: bool, cancel: threading.Event
    ) -> None:
        if cancel.is_set():
            self.failed.emit(rid, "cancelled", "Stopped.")
            self.requestFinished.emit(rid, conversation_id)
            return
        if self.backend is None:
            self.failed.emit(rid, "model", "No model is loaded yet. Use File ▸ Open model….")
            self.requestFinished.emit(rid, conversation_id)
            return
        try:
            session = self.app.session(self.backend, conversation_id or None)
            self._ran_in = session.conversation_id
        except BotpsyError as exc:
            self.failed.emit(rid, "internal", str(exc))
            self.requestFinished.emit(rid, conversation_id)
            return
        self.requestStarted.emit(rid, session.conversation_id)
        pending: dict[str, list[str]] = {"thinking": [], "token": []}
        last_flush = time.monotonic()

        def flush() -> None:
            nonlocal last_flush
            if pending["thinking"]:
                self.thinking.emit(rid, "".join(pending["thinking"]))
                pending["thinking"].clear()
            if pending["token"]:
                self.token.emit(rid, "".join(pending["token"]))
                pending["token"].clear()
            last_flush = time.monotonic()

        try:
            for event in session.run(text, cancel=cancel, think=think):
                if isinstance(event, Thinking | Token):
                    pending["thinking" if isinstance(event, Thinking) else "token"].append(
                        event.text
                    )
                    if time.monotonic() - last_flush >= TOKEN_BATCH_S:
                        flush()
                    continue
                flush()
                if isinstance(event, ApprovalNeeded):
                    self.approvalNeeded.emit(rid, event.request)
                    while not event.request.decided:
                        if cancel.is_set():
                            event.request.deny(by="stopped")
                            break
                        event.request.wait(0.05)
                elif isinstance(event, ToolStarted):
                    self.toolStarted.emit(rid, event.call_id, event.name, event.arguments)
                elif isinstance(event, ToolResult):
                    self.toolResult.emit(rid, event)
                elif isinstance(event, TurnFinished):
                    self.turnFinished.emit(rid, event)
                elif isinstance(event, Answer):
                    self.answer.emit(rid, event)
                elif isinstance(event, Error):
                    self.failed.emit(rid, event.kind, event.message)
        except BotpsyError as exc:
            flush()
            self.failed.emit(rid, "internal", str(exc))
        except Exception as exc:  # a bug must not kill the worker thread silently
            flush()
            self.failed.emit(rid, "internal", f"{type(exc).__name__}: {exc}")
        self.requestFinished.emit(rid, session.conversation_id)

    @Slot()
    def shutdown(self) -> None:
        if self.backend is not None:
            self.backend.close()
            self.backend = None


def _details(backend: Backend) -> dict[str, Any]:
    info = getattr(backend, "info", None)
    details: dict[str, Any] = {"name": backend.name}
    if info is not None:
        details.update(
            model=info.name,
            quantization=info.file_type,
            architecture=info.architecture,
            file_size=info.file_size,
        )
    n_ctx = getattr(backend, "n_ctx", None)
    if isinstance(n_ctx, int):
        details["n_ctx"] = n_ctx
    return details


class EngineThread(QObject):
    """Starts the worker on its own QThread. ``submit`` queues a request (requests run one at a
    time, in order); ``stop`` sets that request's cancel event directly, from the GUI thread.
    """

    _run = Signal(str, str, str, bool)
    _load = Signal(str, str)

    def __init__(self, app: App) -> None:
        super().__init__()
        self.qthread = QThread()
        self.qthread.setObjectName("botpsy-engine")
        self.worker = EngineWorker(app)
        self.worker.moveToThread(self.qthread)
        self._run.connect(self.worker.run)
        self._load.connect(self.worker.load)
        self.qthread.start()

    def submit(self, conversation_id: str, text: str, think: bool) -> str:
        request_id = uuid.uuid4().hex
        self.worker.cancel_event(request_id)
        self._run.emit(request_id, conversation_id, text, think)
        return request_id

    def load(self, model: str, replay: str) -> None:
        self._load.emit(model, replay)

    def stop(self, request_id: str) -> None:
        self.worker.cancel(request_id)

    def close(self, timeout_ms: int = 5000) -> None:
        self.worker.cancel_all()
        if self.qthread.isRunning():
            # run shutdown on the worker thread, then end its event loop
            from PySide6.QtCore import QMetaObject, Qt

            QMetaObject.invokeMethod(
                self.worker, "shutdown", Qt.ConnectionType.BlockingQueuedConnection
            )
            self.qthread.quit()
            self.qthread.wait(timeout_ms)
