"""Routines: requests the assistant runs at a time, as background runs in their own conversation."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from botpsy_desktop.adapters.alarms import AlarmFired, AlarmKind, AlarmService
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    ApprovalRequest,
    Error,
    Event,
    ToolResult,
    outcome_line,
)
from botpsy_desktop.agent.loop import AgentSession, waited
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
DAEMON_APPROVAL_TIMEOUT_S = 300.0
"""How long ``botpsy daemon`` keeps a routine's approval request open when
agent.background_approval_timeout_s is not set in the config file (or is null): nobody can
answer it there, so the window's default (an hour) would only delay the report."""


def gave_up_text(tools: Sequence[str], timeout_s: float | None) -> str:
    """What a routine's notification says of the actions nobody approved in time."""
    names = ", ".join(dict.fromkeys(tools))
    return f"Gave up on {names}: nobody approved it within {waited(timeout_s)}, so it did not run."


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
    outcomes: list[str] = field(default_factory=list)  # each tool call's outcome, in words
    note: str = ""  # the answer describes an action no tool carried out


class DaemonRoutines:
    """Runs fired routines for ``botpsy daemon``: one model, loaded once, on a request scheduler
    at SCHEDULED priority; each run prints lines through ``emit`` (JSON objects with ``as_json``).

    Approval requests wait in the gate's inbox, where nobody can answer them in the daemon, until
    agent.background_approval_timeout_s (``DAEMON_APPROVAL_TIMEOUT_S`` if unset) and are then
    denied; the output says so. A run waiting so is parked: the next routine runs meanwhile.
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
        approval_timeout_s: float = DAEMON_APPROVAL_TIMEOUT_S,
        load: Callable[[], Backend] | None = None,
    ) -> None:
        self.store = store
        self.alarms = alarms
        self.make_session = make_session
        self.emit = emit
        self.as_json = as_json
        self.think = think
        self.approval_timeout_s = approval_timeout_s
        # a loader is called on the engine thread when the first routine fires: a daemon that
        # only rings alarms never holds the model in memory
        self._load = load if backend is None else None
        self.scheduler = RequestScheduler(backend, name="botpsy-routines")
        self._lock = threading.Lock()
        self._active = 0
        self._idle = threading.Condition(self._lock)

    def on_fired(self, fired: AlarmFired) -> None:
        """An alarm listener: queue a routine's run (other kinds are ignored)."""
        if fired.kind is not AlarmKind.ROUTINE:
            return
        conversation = routine_conversation(self.store, self.alarms, fired)
        run = _Run(fired, conversation)
        job = session_job(
            lambda backend: self.make_session(backend, conversation),
            fired.label,
            think=self.think,
            origin=fired.origin,
        )
        with self._lock:
            self._active += 1
            load, self._load = self._load, None
        if load is not None:
            self.scheduler.submit(self._loading(load), Priority.CONTROL, label="load model")
        self.scheduler.submit(
            keep_title(job, self.store, lambda: conversation, routine_title(fired.label)),
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
        """Stop what runs (its approval requests are denied) and close the model."""
        self.scheduler.close()

    def _on_item(self, run: _Run, item: Item) -> None:
        fired = run.fired
        if isinstance(item, ApprovalNeeded):
            request = item.request
            run.asked[request.call_id] = request
            self._say(
                {
                    "event": "routine_approval",
                    "id": fired.id,
                    "tool": request.tool,
                    "arguments": request.arguments,
                    "waits_s": self.approval_timeout_s,
                },
                f"routine {fired.id}: {request.tool} needs approval; nobody can approve it in the "
                f"daemon, so it is denied after {self.approval_timeout_s:g} s "
                "(agent.background_approval_timeout_s)",
            )
        if isinstance(item, ToolResult):
            run.outcomes.append(outcome_line(item))
        if isinstance(item, ToolResult) and item.decision == "denied":
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
            line = first_line(run.answer)
            self._say(
                {
                    "event": "routine_finished",
                    "id": fired.id,
                    "request": fired.label,
                    "conversation": run.conversation,
                    "state": item.state,
                    "answer": run.answer,
                    "note": run.note,
                    "outcomes": run.outcomes,
                    "denied": run.denied,
                },
                f"routine {fired.id} {fired.label!r} {item.state}: {line or '(no answer)'} "
                f"(conversation {run.conversation})"
                + "".join(f"\n  {o}" for o in run.outcomes)
                + (f"\n  {run.note}" if run.note else ""),
            )
            with self._idle:
                self._active -= 1
                self._idle.notify_all()

    def _say(self, record: dict[str, Any], text: str) -> None:
        self.emit(json.dumps(record, ensure_ascii=False) if self.as_json else text)
