"""Routines: requests the assistant runs at a time, as background runs in their own conversation."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from botpsy_desktop.adapters.alarms import AlarmFired, AlarmKind, AlarmService
from botpsy_desktop.adapters.alarms.records import MissedAlarm
from botpsy_desktop.agent.approvals import ApprovalQueue, RoutineInfo, StoredApproval, end_expired
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    ApprovalRequest,
    Error,
    Event,
    ToolResult,
    outcome_line,
)
from botpsy_desktop.agent.loop import NOBODY_IN_TIME, AgentSession
from botpsy_desktop.agent.scheduler import (
    EngineContext,
    Finished,
    Item,
    Job,
    Park,
    Priority,
    RequestScheduler,
    session_job,
)
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.backend import Backend

TITLE_PREFIX = "Routine: "


def routine_info(fired: AlarmFired) -> RoutineInfo:
    """Who asks when routine ``fired`` needs an approval (kept with it in the stored queue)."""
    return RoutineInfo(fired.id, fired.label, fired.due, fired.origin)


def resumed_fired(stored: StoredApproval, now: datetime) -> AlarmFired:
    """The routine run a stored approval belongs to, as a fired routine (for reports)."""
    due = datetime.fromtimestamp(stored.routine_due, UTC) if stored.routine_due is not None else now
    return AlarmFired(
        stored.routine_id or 0,
        AlarmKind.ROUTINE,
        stored.routine_request or "",
        due,
        now,
        conversation=stored.conversation_id,
        origin=stored.origin,
    )


def catch_up(alarms: AlarmService, missed: Sequence[MissedAlarm]) -> list[AlarmFired]:
    """The routines among ``missed`` (reported at a start) that catch up: each is to run once
    now, its miss dismissed; the others were skipped (they run at their next time)."""
    fired: list[AlarmFired] = []
    now = alarms.now()
    for miss in missed:
        if miss.kind is not AlarmKind.ROUTINE or not miss.catch_up:
            continue
        alarm = alarms.get(miss.id)
        if alarm is None:
            continue
        fired.append(
            AlarmFired(
                miss.id,
                AlarmKind.ROUTINE,
                miss.label,
                miss.due,
                now,
                conversation=alarm.conversation,
                origin=alarm.origin,
            )
        )
        with contextlib.suppress(BotpsyError):
            alarms.dismiss(miss.id)
    return fired


def routine_title(request: str) -> str:
    """The title of a routine's conversation: "Routine: <request>"."""
    return (TITLE_PREFIX + " ".join(request.split()))[:200]


def first_line(text: str, limit: int = 200) -> str:
    """The first non-empty line of an answer, clipped for a notification."""
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
    return ""


def routine_conversation(store: ConversationStore, alarms: AlarmService, fired: AlarmFired) -> str:
    """The conversation routine ``fired`` runs in: the one of its earlier runs, else a new one
    titled "Routine: <request>" (remembered with the routine for its next runs)."""
    if fired.kind is not AlarmKind.ROUTINE:
        raise ValueError(f"{fired.kind.value} {fired.id} is not a routine")
    if fired.conversation and store.exists(fired.conversation):
        return fired.conversation
    conversation = store.create(routine_title(fired.label))
    alarms.set_conversation(fired.id, conversation)
    return conversation


def keep_title(
    job: Job, store: ConversationStore, conversation: Callable[[], str], title: str
) -> Job:
    """``job``, with its conversation titled ``title`` throughout: a conversation's first request
    names it after the request's text before its first event, so the title is put back then
    (before any approval request is shown) and once more at the end."""

    def retitle() -> None:
        conversation_id = conversation()
        if conversation_id and store.title(conversation_id) not in (None, title):
            store.rename(conversation_id, title)

    def titled(ctx: EngineContext) -> Iterator[Event | Park]:
        first = True
        try:
            for event in job(ctx) or ():
                if first:
                    retitle()
                    first = False
                yield event
        finally:
            retitle()

    return titled


@dataclass
class _Run:
    fired: AlarmFired
    conversation: str
    answer: str = ""
    denied: list[str] = field(default_factory=list)
    asked: dict[str, ApprovalRequest] = field(default_factory=dict)  # by call id
    approvals: list[int] = field(default_factory=list)  # its rows in the stored queue
    outcomes: list[str] = field(default_factory=list)  # each tool call's outcome, in words
    note: str = ""  # the answer describes an action no tool carried out


class DaemonRoutines:
    """Runs fired routines for ``botpsy daemon``: one model, loaded once, on a request scheduler
    at SCHEDULED priority; each run prints lines through ``emit`` (JSON objects with ``as_json``).

    Approval requests are kept in the stored queue (agent/approvals.py): answered from a
    notification, the window or ``botpsy approvals``, they wait until
    agent.background_approval_timeout_s, the run parked meanwhile (the next routine runs). A
    run parked when the daemon stops stays waiting; the next daemon or window goes on with it.
    ``notify(title, text)`` shows a routine's outcome on the desktop, if there is one.
    """

    def __init__(
        self,
        backend: Backend | None,
        store: ConversationStore,
        alarms: AlarmService,
        make_session: Callable[[Backend, str], AgentSession],
        emit: Callable[[str], None],
        *,
        as_json: bool = False,
        think: bool = False,
        approval_timeout_s: float | None = None,
        load: Callable[[], Backend] | None = None,
        queue: ApprovalQueue | None = None,
        notify: Callable[[str, str], None] | None = None,
    ) -> None:
        self.store = store
        self.alarms = alarms
        self.make_session = make_session
        self.emit = emit
        self.as_json = as_json
        self.think = think
        self.approval_timeout_s = approval_timeout_s
        self.queue = queue
        self.notify = notify
        # a loader is called on the engine thread when the first routine fires: a daemon that
        # only rings alarms never holds the model in memory
        self._load = load if backend is None else None
        self.scheduler = RequestScheduler(backend, name="botpsy-routines")
        self._lock = threading.Lock()
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self._runs: dict[str, _Run] = {}  # conversation id -> the run in it
        self.on_close: list[Callable[[], None]] = []
        """Called after the scheduler closed (the stored queue, the notifications)."""
        if queue is not None:
            queue.arrived.append(self._on_parked)
            queue.on_adopted = self.resume

    def on_fired(self, fired: AlarmFired) -> None:
        """An alarm listener: queue a routine's run (other kinds are ignored)."""
        if fired.kind is not AlarmKind.ROUTINE:
            return
        conversation = routine_conversation(self.store, self.alarms, fired)
        job = session_job(
            lambda backend: self.make_session(backend, conversation),
            fired.label,
            think=self.think,
            origin=fired.origin,
            queue=self.queue,
            routine=routine_info(fired),
        )
        self._submit(_Run(fired, conversation), job)

    def resume(self, stored: StoredApproval) -> None:
        """Go on with a run an earlier process parked, now decided (or end it: expired)."""
        fired = resumed_fired(stored, self.alarms.now())
        run = _Run(fired, stored.conversation_id, approvals=[stored.id])
        if stored.decision == "expired":
            assert self.queue is not None
            if self.queue.take(stored.id) is None:
                return
            with self._lock:
                self._active += 1
            text = end_expired(self.store, stored, self.approval_timeout_s)
            run.answer = text
            run.denied.append(stored.tool)
            self._say(
                {
                    "event": "routine_denied",
                    "id": fired.id,
                    "tool": stored.tool,
                    "by": NOBODY_IN_TIME,
                },
                f"routine {fired.id}: {stored.tool} was denied ({NOBODY_IN_TIME})",
            )
            self._report(run, "done")
            return
        self._say(
            {
                "event": "routine_resumed",
                "id": fired.id,
                "approval": stored.id,
                "decision": stored.decision,
                "by": stored.decided_by,
            },
            f"routine {fired.id}: approval {stored.id} was {stored.decision} "
            f"({stored.decided_by}); the run goes on",
        )
        job = session_job(
            lambda backend: self.make_session(backend, stored.conversation_id),
            "",
            think=stored.think,
            queue=self.queue,
            routine=RoutineInfo(fired.id, fired.label, fired.due, stored.origin),
            resume=stored,
        )
        self._submit(run, job)

    def _submit(self, run: _Run, job: Job) -> None:
        fired = run.fired
        with self._lock:
            self._active += 1
            load, self._load = self._load, None
            self._runs[run.conversation] = run
        if load is not None:
            self.scheduler.submit(self._loading(load), Priority.CONTROL, label="load model")
        self.scheduler.submit(
            keep_title(job, self.store, lambda: run.conversation, routine_title(fired.label)),
            Priority.SCHEDULED,
            label=fired.label[:40],
            on_item=lambda item: self._on_item(run, item),
        )

    def _loading(self, load: Callable[[], Backend]) -> Job:
        def job(ctx: EngineContext) -> Iterator[Event]:
            try:
                ctx.replace_backend(load())
            except BotpsyError as exc:
                self._say(
                    {"event": "routine_error", "kind": "model", "message": str(exc)},
                    f"routines: the model did not load: {exc}",
                )
            return iter(())

        return job

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued run is over; True if they are."""
        with self._idle:
            return self._idle.wait_for(lambda: self._active == 0, timeout)

    def close(self) -> None:
        """Stop what runs and close the model; runs parked for an approval stay stored."""
        self.scheduler.close()
        for callback in self.on_close:
            with contextlib.suppress(Exception):  # closing anyway
                callback()

    def _on_parked(self, stored: StoredApproval) -> None:
        """The stored queue holds a new approval of this process (asked here, or adopted)."""
        with self._lock:
            run = self._runs.get(stored.conversation_id)
        if run is not None:
            run.approvals.append(stored.id)
        until = (
            datetime.fromtimestamp(stored.deadline, self.alarms.tz).strftime("%a %d %b %H:%M:%S")
            if stored.deadline is not None
            else "it is decided"
        )
        self._say(
            {
                "event": "routine_approval",
                "id": stored.routine_id,
                "approval": stored.id,
                "tool": stored.tool,
                "arguments": stored.arguments,
                "receipt": stored.receipt,
                "deadline": stored.deadline,
                "waits_s": self.approval_timeout_s,
            },
            f"routine {stored.routine_id}: approval {stored.id} waits until {until}: "
            f"{stored.receipt}\n  Answer with `botpsy approvals approve {stored.id}` or "
            f"`botpsy approvals deny {stored.id}` (or from the notification or the window).",
        )

    def _on_item(self, run: _Run, item: Item) -> None:
        fired = run.fired
        if isinstance(item, ToolResult):
            run.outcomes.append(outcome_line(item))
        if isinstance(item, ApprovalNeeded):
            run.asked[item.request.call_id] = item.request
        elif isinstance(item, ToolResult) and item.decision == "denied":
            name = item.name or "a tool call"
            run.denied.append(name)
            asked = run.asked.get(item.call_id)
            by = item.decided_by or (asked.decided_by if asked is not None else "")
            self._say(
                {"event": "routine_denied", "id": fired.id, "tool": name, "by": by},
                f"routine {fired.id}: {name} was denied" + (f" ({by})" if by else ""),
            )
        elif isinstance(item, Answer):
            run.answer = item.text
            run.note = item.note
        elif isinstance(item, Error) and item.kind != "cancelled":
            self._say(
                {
                    "event": "routine_error",
                    "id": fired.id,
                    "kind": item.kind,
                    "message": item.message,
                },
                f"routine {fired.id}: {item.message}",
            )
        elif isinstance(item, Finished):
            if item.state == "suspended":
                waiting = ", ".join(str(i) for i in run.approvals) or "?"
                self._say(
                    {
                        "event": "routine_suspended",
                        "id": fired.id,
                        "approvals": run.approvals,
                        "conversation": run.conversation,
                    },
                    f"routine {fired.id}: still waiting for approval {waiting}; it goes on "
                    "once decided, in the next `botpsy daemon` or window",
                )
                self._done(run)
                return
            self._report(run, item.state)

    def _report(self, run: _Run, state: str) -> None:
        fired = run.fired
        line = first_line(run.answer)
        self._say(
            {
                "event": "routine_finished",
                "id": fired.id,
                "request": fired.label,
                "conversation": run.conversation,
                "state": state,
                "answer": run.answer,
                "denied": run.denied,
                "note": run.note,
                "outcomes": run.outcomes,
            },
            f"routine {fired.id} {fired.label!r} {state}: {line or '(no answer)'} "
            f"(conversation {run.conversation})"
            + "".join(f"\n  {o}" for o in run.outcomes)
            + (f"\n  {run.note}" if run.note else ""),
        )
        if self.notify is not None:
            with contextlib.suppress(Exception):  # the desktop's notifications are a bonus
                self.notify(routine_title(fired.label), line or f"Finished ({state}).")
        self._done(run)

    def _done(self, run: _Run) -> None:
        with self._idle:
            if self._runs.get(run.conversation) is run:
                del self._runs[run.conversation]
            self._active -= 1
            self._idle.notify_all()

    def _say(self, record: dict[str, Any], text: str) -> None:
        self.emit(json.dumps(record, ensure_ascii=False) if self.as_json else text)
