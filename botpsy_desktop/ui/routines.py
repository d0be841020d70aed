"""Routines in the window: a fired routine runs as a background request, its answer notified."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from botpsy_desktop.adapters.alarms import AlarmFired, AlarmService
from botpsy_desktop.agent.events import Answer
from botpsy_desktop.agent.routines import first_line, routine_conversation, routine_title
from botpsy_desktop.agent.scheduler import Priority
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.ui.bridge import EngineThread
from botpsy_desktop.ui.notify import AlarmNotifier

log = logging.getLogger(__name__)


@dataclass
class RoutineRun:
    """One run of a routine: its request id, conversation and (once given) answer or error."""

    fired: AlarmFired
    request_id: str
    conversation: str
    answer: str = ""
    error: str = ""


class RoutineRunner(QObject):
    """Runs routines fired while the app runs, on the window's engine at SCHEDULED priority.

    Each routine has its own conversation ("Routine: <request>", reused on each run); the run is
    a background one, so anything it wants to change waits in the pending-approvals queue. When
    it finishes, a notification shows the first line of the answer (or what went wrong).
    """

    finished = Signal(object)  # RoutineRun, once its notification is out

    def __init__(
        self,
        engine: EngineThread,
        notifier: AlarmNotifier,
        store: ConversationStore,
        alarms: AlarmService,
        *,
        think: bool = False,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.engine = engine
        self.notifier = notifier
        self.store = store
        self.alarms = alarms
        self.think = think
        self.runs: dict[str, RoutineRun] = {}
        worker = engine.worker
        worker.answer.connect(self._on_answer)
        worker.failed.connect(self._on_failed)
        worker.requestFinished.connect(self._on_finished)
        notifier.routineFired.connect(self.run)

    def run(self, fired: AlarmFired) -> RoutineRun | None:
        """Queue the routine's request (GUI thread); None if its conversation cannot be made."""
        try:
            conversation = routine_conversation(self.store, self.alarms, fired)
        except BotpsyError as exc:
            log.error("routine %s could not start: %s", fired.id, exc)
            self.notifier.notify(routine_title(fired.label), f"Could not run: {exc}")
            return None
        rid = self.engine.submit(
            conversation,
            fired.label,
            self.think,
            Priority.SCHEDULED,
            background=True,
            title=routine_title(fired.label),
            origin=fired.origin,
        )
        run = RoutineRun(fired, rid, conversation)
        self.runs[rid] = run
        log.info("routine %s queued as request %s", fired.id, rid)
        return run

    def _on_answer(self, request_id: str, answer: Answer) -> None:
        run = self.runs.get(request_id)
        if run is not None:
            run.answer = answer.text

    def _on_failed(self, request_id: str, kind: str, message: str) -> None:
        run = self.runs.get(request_id)
        if run is not None:
            run.error = "Stopped." if kind == "cancelled" else message

    def _on_finished(self, request_id: str, conversation_id: str) -> None:
        run = self.runs.pop(request_id, None)
        if run is None:
            return
        text = first_line(run.answer) or first_line(run.error) or "Finished with no answer."
        self.notifier.notify(routine_title(run.fired.label), text)
        self.finished.emit(run)
