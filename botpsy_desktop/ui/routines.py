"""Routines in the window: a fired routine runs as a background request, its answer notified."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from PySide6.QtCore import QObject, Signal

from botpsy_desktop.adapters.alarms import AlarmFired, AlarmService
from botpsy_desktop.agent.approvals import ApprovalQueue, StoredApproval, end_expired
from botpsy_desktop.agent.events import Answer, ApprovalRequest, ToolResult, outcome_line
from botpsy_desktop.agent.loop import NOBODY_IN_TIME
from botpsy_desktop.agent.routines import (
    first_line,
    resumed_fired,
    routine_conversation,
    routine_info,
    routine_title,
)
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
    asked: dict[str, ApprovalRequest] = field(default_factory=dict)  # by call id
    timed_out: list[str] = field(default_factory=list)
    """Tools whose approval nobody gave in time (agent.background_approval_timeout_s)."""
    outcomes: list[str] = field(default_factory=list)
    """What came of each tool call, one line each (agent/events.py outcome_line)."""
    note: str = ""
    """The answer describes an action no tool carried out (Answer.note)."""


class RoutineRunner(QObject):
    """Runs routines fired while the app runs, on the window's engine at SCHEDULED priority.

    Each routine has its own conversation ("Routine: <request>", reused on each run); the run is
    a background one, so anything it wants to change waits in the pending-approvals queue, the
    run parked meanwhile (the user's own requests go on). When it finishes, a notification
    shows the first line of the answer (or what went wrong), after saying which actions it gave
    up on because nobody approved them in time.
    """

    finished = Signal(object)  # RoutineRun, once its notification is out
    adopted = Signal(object)  # StoredApproval decided while its run was parked elsewhere
    openRequested = Signal(object)  # StoredApproval: a notification's Open was clicked

    def __init__(
        self,
        engine: EngineThread,
        notifier: AlarmNotifier,
        store: ConversationStore,
        alarms: AlarmService,
        *,
        think: bool = False,
        parent: QObject | None = None,
        queue: ApprovalQueue | None = None,
    ) -> None:
        super().__init__(parent)
        self.queue = queue
        if queue is not None:  # a run parked by an ended process goes on here once decided
            queue.on_adopted = self.adopted.emit
            self.adopted.connect(self.resume)
        self.engine = engine
        self.notifier = notifier
        self.store = store
        self.alarms = alarms
        self.think = think
        self.runs: dict[str, RoutineRun] = {}
        worker = engine.worker
        worker.approvalNeeded.connect(self._on_approval)
        worker.toolResult.connect(self._on_tool_result)
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
            routine=routine_info(fired),
        )
        run = RoutineRun(fired, rid, conversation)
        self.runs[rid] = run
        log.info("routine %s queued as request %s", fired.id, rid)
        return run

    def resume(self, stored: StoredApproval) -> RoutineRun | None:
        """Go on with a routine run an ended process parked, now decided (GUI thread); one
        whose approval expired ends with a sentence and a notification, never an action."""
        fired = resumed_fired(stored, self.alarms.now())
        title = routine_title(fired.label)
        if stored.decision == "expired":
            if self.queue is None or self.queue.take(stored.id) is None:
                return None
            timeout = self.engine.worker.app.config.agent.background_approval_timeout_s
            self.notifier.notify(title, end_expired(self.store, stored, timeout))
            return None
        rid = self.engine.submit(
            stored.conversation_id,
            "",
            stored.think,
            Priority.SCHEDULED,
            background=True,
            title=title,
            origin=stored.origin,
            routine=routine_info(fired),
            resume=stored,
        )
        run = RoutineRun(fired, rid, stored.conversation_id)
        self.runs[rid] = run
        log.info("routine %s goes on as request %s (approval %s)", fired.id, rid, stored.id)
        return run

    def _on_approval(self, request_id: str, request: ApprovalRequest) -> None:
        run = self.runs.get(request_id)
        if run is not None:
            run.asked[request.call_id] = request

    def _on_tool_result(self, request_id: str, result: ToolResult) -> None:
        run = self.runs.get(request_id)
        asked = run.asked.get(result.call_id) if run is not None else None
        if run is not None and asked is not None and asked.decided_by == NOBODY_IN_TIME:
            run.timed_out.append(result.name or "a tool call")  # said first, as "gave up on"
        elif run is not None:
            run.outcomes.append(outcome_line(result))

    def _on_answer(self, request_id: str, answer: Answer) -> None:
        run = self.runs.get(request_id)
        if run is not None:
            run.answer = answer.text
            run.note = answer.note

    def _on_failed(self, request_id: str, kind: str, message: str) -> None:
        run = self.runs.get(request_id)
        if run is not None:
            run.error = "Stopped." if kind == "cancelled" else message

    def _on_finished(self, request_id: str, conversation_id: str) -> None:
        run = self.runs.pop(request_id, None)
        if run is None:
            return
        # one whose approval nobody gave in time ends with a sentence saying so (agent/loop.py)
        text = first_line(run.answer) or first_line(run.error) or "Finished with no answer."
        # what actually ran, was refused or failed, and a claim nothing backs, every time
        if run.note:
            text = f"{text}\n{run.note}"
        if run.outcomes:
            text = f"{text}\n" + "\n".join(run.outcomes)
        self.notifier.notify(routine_title(run.fired.label), text)
        self.finished.emit(run)
