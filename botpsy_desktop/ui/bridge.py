"""The bridge between the Qt window and the Qt-free core: one worker thread owns the model."""

from __future__ import annotations

import threading
import time
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
    requestStarted = Signal(str)  # conversation id
    thinking = Signal(str)
    token = Signal(str)
    toolStarted = Signal(str, str, dict)  # call id, tool, arguments
    toolResult = Signal(object)  # ToolResult
    approvalNeeded = Signal(object)  # ApprovalRequest
    turnFinished = Signal(object)  # TurnFinished
    answer = Signal(object)  # Answer
    failed = Signal(str, str)  # kind, message
    requestFinished = Signal(str)  # conversation id

    def __init__(self, app: App) -> None:
        super().__init__()
        self.app = app
        self.backend: Backend | None = None
        self.cancel = threading.Event()

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

    @Slot(str, str, bool)
    def run(self, conversation_id: str, text: str, think: bool) -> None:
        if self.backend is None:
            self.failed.emit("model", "No model is loaded yet. Choose one in Settings.")
            self.requestFinished.emit(conversation_id)
            return
        self.cancel.clear()
        try:
            session = self.app.session(self.backend, conversation_id or None)
        except BotpsyError as exc:
            self.failed.emit("internal", str(exc))
            self.requestFinished.emit(conversation_id)
            return
        self.requestStarted.emit(session.conversation_id)
        pending: dict[str, list[str]] = {"thinking": [], "token": []}
        last_flush = time.monotonic()

        def flush() -> None:
            nonlocal last_flush
            if pending["thinking"]:
                self.thinking.emit("".join(pending["thinking"]))
                pending["thinking"].clear()
            if pending["token"]:
                self.token.emit("".join(pending["token"]))
                pending["token"].clear()
            last_flush = time.monotonic()

        try:
            for event in session.run(text, cancel=self.cancel, think=think):
                if isinstance(event, Thinking | Token):
                    pending["thinking" if isinstance(event, Thinking) else "token"].append(
                        event.text
                    )
                    if time.monotonic() - last_flush >= TOKEN_BATCH_S:
                        flush()
                    continue
                flush()
                if isinstance(event, ApprovalNeeded):
                    self.approvalNeeded.emit(event.request)
                    while not event.request.decided:
                        if self.cancel.is_set():
                            event.request.deny(by="stopped")
                            break
                        event.request.wait(0.05)
                elif isinstance(event, ToolStarted):
                    self.toolStarted.emit(event.call_id, event.name, event.arguments)
                elif isinstance(event, ToolResult):
                    self.toolResult.emit(event)
                elif isinstance(event, TurnFinished):
                    self.turnFinished.emit(event)
                elif isinstance(event, Answer):
                    self.answer.emit(event)
                elif isinstance(event, Error):
                    self.failed.emit(event.kind, event.message)
        except BotpsyError as exc:
            flush()
            self.failed.emit("internal", str(exc))
        except Exception as exc:  # a bug must not kill the worker thread silently
            flush()
            self.failed.emit("internal", f"{type(exc).__name__}: {exc}")
        self.requestFinished.emit(session.conversation_id)

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


class EngineThread:
    """Starts the worker on its own QThread; ``stop`` sets the cancel event directly."""

    def __init__(self, app: App) -> None:
        self.thread = QThread()
        self.thread.setObjectName("botpsy-engine")
        self.worker = EngineWorker(app)
        self.worker.moveToThread(self.thread)
        self.thread.start()

    def stop_request(self) -> None:
        self.worker.cancel.set()

    def close(self, timeout_ms: int = 5000) -> None:
        self.worker.cancel.set()
        if self.thread.isRunning():
            # run shutdown on the worker thread, then end its event loop
            from PySide6.QtCore import QMetaObject, Qt

            QMetaObject.invokeMethod(
                self.worker, "shutdown", Qt.ConnectionType.BlockingQueuedConnection
            )
            self.thread.quit()
            self.thread.wait(timeout_ms)
