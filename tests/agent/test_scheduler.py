"""One engine, many callers: the request scheduler's priorities, progress, Stop and isolation."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from botpsy_desktop.agent.approvals import ApprovalQueue
from botpsy_desktop.agent.events import Answer, ApprovalNeeded, Error, ToolResult, ToolStarted
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.scheduler import (
    EngineContext,
    Finished,
    Item,
    Parked,
    Priority,
    Queued,
    Request,
    RequestScheduler,
    Running,
    session_job,
)
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.llm.backend import Backend
from botpsy_desktop.llm.engines.replay import ReplayBackend
from tests.agent.gate_tools import shipped_gate
from tests.helpers.replay import xml_call


class NoteArgs(BaseModel):
    """Write a note."""

    text: str = Field(description="What to write")


class WaitArgs(BaseModel):
    """Wait for something that never comes."""


class Harness:
    """A store and a registry shared by every request, as in the app."""

    def __init__(self, tmp_path: Path) -> None:
        self.store = ConversationStore(tmp_path / "db.sqlite3")
        self.notes: list[str] = []
        self.release = threading.Event()
        self.registry = ToolRegistry()

        def write_note(args: NoteArgs) -> str:
            self.notes.append(args.text)
            return "written"

        def wait_forever(args: WaitArgs) -> str:
            self.release.wait()
            return "LATE"

        self.registry.register(make_tool(write_note, effects=[Effect.LOCAL_WRITE]))
        self.registry.register(make_tool(wait_forever, effects=[Effect.READ]))
        self.settings = LoopSettings(system_prompt="You are a test.", max_steps=3)
        self.gate = shipped_gate()

    def maker(
        self, conversation_id: str | None = None, *, background: bool = False
    ) -> Callable[[Backend], AgentSession]:
        def make(backend: Backend) -> AgentSession:
            return AgentSession(
                backend,
                self.registry,
                self.gate,
                self.store,
                self.settings,
                conversation_id,
                background=background,
            )

        return make

    def submit(
        self,
        scheduler: RequestScheduler,
        text: str,
        priority: Priority,
        *,
        background: bool = False,
        on_item: Callable[[Item], None] | None = None,
    ) -> Request:
        job = session_job(self.maker(background=background), text)
        return scheduler.submit(job, priority, label=text, on_item=on_item)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    yield h
    h.release.set()
    h.store.close()


def collect(request: Request) -> list[Item]:
    return list(request.events(timeout=30))


def answer_of(items: list[Item]) -> str | None:
    answers = [i.text for i in items if isinstance(i, Answer)]
    return answers[-1] if answers else None


def conversation_texts(store: ConversationStore) -> dict[str, list[tuple[str, str]]]:
    """Each conversation's (role, content) rows, keyed by its first user message."""
    out = {}
    for info in store.conversations():
        rows = [(str(m["role"]), str(m.get("content") or "")) for m in store.messages(info.id)]
        out[rows[0][1]] = rows
    return out


def test_interactive_quick_and_scheduled_run_in_priority_order(harness: Harness) -> None:
    # the engine is busy with a request waiting for approval while the others arrive, last
    # priority first; each then gets its own answer in its own conversation
    backend = ReplayBackend(
        [
            xml_call("write_note", text="milk"),
            "Noted: milk.",
            "Interactive answer.",
            "Quick answer.",
            "Scheduled answer.",
        ]
    )
    scheduler = RequestScheduler(backend)
    approvals: list[ApprovalNeeded] = []
    approval_seen = threading.Event()

    def on_first(item: Item) -> None:
        if isinstance(item, ApprovalNeeded):
            approvals.append(item)
            approval_seen.set()

    try:
        first = harness.submit(scheduler, "note milk", Priority.INTERACTIVE, on_item=on_first)
        assert approval_seen.wait(10)
        warm_ran = threading.Event()
        warmup = scheduler.submit(lambda ctx: warm_ran.set(), Priority.WARMUP, label="warm")
        scheduled = harness.submit(scheduler, "scheduled", Priority.SCHEDULED, background=True)
        quick = harness.submit(scheduler, "quick", Priority.QUICK)
        interactive = harness.submit(scheduler, "interactive", Priority.INTERACTIVE)
        assert [r.label for r in scheduler.pending()] == ["interactive", "quick", "scheduled"]
        approvals[0].request.approve()

        items = {r.label: collect(r) for r in (first, interactive, quick, scheduled, warmup)}
    finally:
        scheduler.close()

    assert answer_of(items["note milk"]) == "Noted: milk."
    assert answer_of(items["interactive"]) == "Interactive answer."
    assert answer_of(items["quick"]) == "Quick answer."
    assert answer_of(items["scheduled"]) == "Scheduled answer."
    assert harness.notes == ["milk"]
    # the warm-up gave way to the user's requests: dropped from the queue, never run
    assert items["warm"][-1] == Finished(warmup.id, "preempted", started=False)
    assert not warm_ran.is_set()
    # run one at a time, in priority order: the intervals do not overlap
    ran = sorted((first, interactive, quick, scheduled), key=lambda r: r.started_at or 0)
    assert [r.label for r in ran] == ["note milk", "interactive", "quick", "scheduled"]
    for before, after in itertools.pairwise(ran):
        assert before.finished_at is not None and after.started_at is not None
        assert before.finished_at <= after.started_at
    # visible progress: how many go first, each time it changes, then running, then done
    waits = [i.ahead for i in items["scheduled"] if isinstance(i, Queued)]
    assert waits == [1, 2, 3, 2, 1]
    assert [i.ahead for i in items["interactive"] if isinstance(i, Queued)] == [1]
    progress = [i for i in items["quick"] if isinstance(i, Queued | Running | Finished)]
    assert progress == [
        Queued(quick.id, 1),
        Queued(quick.id, 2),
        Queued(quick.id, 1),
        Running(quick.id),
        Finished(quick.id, "done"),
    ]
    # no two generations shared a context: every prompt holds one request's messages only
    for prompt in backend.prompts:
        users = [m["content"] for m in prompt if m["role"] == "user"]
        assert len(users) == 1, users
    texts = conversation_texts(harness.store)
    assert texts["interactive"] == [("user", "interactive"), ("assistant", "Interactive answer.")]
    assert texts["quick"] == [("user", "quick"), ("assistant", "Quick answer.")]
    assert texts["scheduled"] == [("user", "scheduled"), ("assistant", "Scheduled answer.")]


def test_a_queued_request_is_cancelled_at_once_and_never_runs(harness: Harness) -> None:
    backend = ReplayBackend([xml_call("wait_forever"), "First done.", "Second answer."])
    scheduler = RequestScheduler(backend)
    try:
        first = harness.submit(scheduler, "first", Priority.INTERACTIVE)
        queued = harness.submit(scheduler, "queued", Priority.QUICK)
        third = harness.submit(scheduler, "third", Priority.SCHEDULED)
        t0 = time.monotonic()
        queued.cancel()
        assert queued.wait(1) and time.monotonic() - t0 < 1.0
        assert queued.state == "cancelled"
        assert collect(queued)[-1] == Finished(queued.id, "cancelled", started=False)
        # the one behind it moved up
        assert [i.ahead for i in collect_until_running(third, harness)] == [2, 1]
        assert answer_of(collect(first)) == "First done."
        assert answer_of(collect(third)) == "Second answer."
    finally:
        scheduler.close()
    assert "queued" not in conversation_texts(harness.store)


def collect_until_running(request: Request, harness: Harness) -> list[Queued]:
    """The request's Queued items up to its Running one (the hanging tool is released here)."""
    seen: list[Queued] = []
    for item in request.events(timeout=30):
        if isinstance(item, Queued):
            seen.append(item)
            if item.ahead == 1:
                harness.release.set()
        if isinstance(item, Running):
            return seen
    raise AssertionError("never ran")


def test_stop_during_a_running_request_ends_it_at_once(harness: Harness) -> None:
    # the running request waits on a tool that never returns (timeout 30 s): Stop ends the
    # wait at once, and the next request runs and answers
    backend = ReplayBackend([xml_call("wait_forever"), "Next answer."])
    scheduler = RequestScheduler(backend)
    started = threading.Event()

    def on_item(item: Item) -> None:
        if isinstance(item, ToolStarted):
            started.set()

    try:
        running = harness.submit(scheduler, "hang", Priority.INTERACTIVE, on_item=on_item)
        waiting = harness.submit(scheduler, "next", Priority.INTERACTIVE)
        assert started.wait(10)
        time.sleep(0.2)
        t0 = time.monotonic()
        running.cancel()
        assert running.wait(2)
        stop_s = time.monotonic() - t0
        items = collect(running)
        assert waiting.wait(10)
    finally:
        scheduler.close()
    assert stop_s < 1.0, stop_s  # the tool itself never returns
    assert running.state == "cancelled"
    (result,) = [i for i in items if isinstance(i, ToolResult)]
    assert not result.ok and "The user stopped the request while wait_forever" in result.output
    assert [i for i in items if isinstance(i, Error)][-1].kind == "cancelled"
    assert answer_of(collect(waiting)) == "Next answer."
    harness.release.set()  # the abandoned call returns now: its result is dropped
    time.sleep(0.1)
    rows = [m for c in harness.store.conversations() for m in harness.store.messages(c.id)]
    assert not any("LATE" in str(m.get("content")) for m in rows)
    print(f"\nStop during a hanging tool: request over after {stop_s * 1000:.0f} ms")


def test_a_running_warmup_gives_way_to_a_user_request(harness: Harness) -> None:
    backend = ReplayBackend(["Right away."])
    scheduler = RequestScheduler(backend)
    warming = threading.Event()

    def warm(ctx: EngineContext) -> None:
        warming.set()
        ctx.cancel.wait(30)  # evaluates until told to stop, like a long prefix warm-up

    try:
        warmup = scheduler.submit(warm, Priority.WARMUP, label="warm")
        assert warming.wait(10)
        scheduled = scheduler.submit(lambda ctx: None, Priority.SCHEDULED, label="scheduled")
        assert scheduled.ahead == 1 and warmup.state == "running"  # scheduled runs pre-empt not
        t0 = time.monotonic()
        user = harness.submit(scheduler, "now", Priority.INTERACTIVE)
        assert warmup.wait(2)
        assert answer_of(collect(user)) == "Right away."
        elapsed = time.monotonic() - t0
        assert scheduled.wait(5)
    finally:
        scheduler.close()
    assert warmup.state == "preempted"
    assert collect(warmup)[-1] == Finished(warmup.id, "preempted")
    assert elapsed < 1.0, elapsed
    assert user.started_at is not None and scheduled.started_at is not None
    assert user.started_at < scheduled.started_at


def test_an_exception_in_one_request_does_not_kill_the_engine(harness: Harness) -> None:
    backend = ReplayBackend(["Still here."])
    scheduler = RequestScheduler(backend)

    def broken(ctx: EngineContext) -> Iterator[Any]:
        yield from ()
        raise RuntimeError("a bug in a job")

    try:
        bad = scheduler.submit(broken, Priority.INTERACTIVE)
        unknown = scheduler.submit(
            session_job(harness.maker("no-such-conversation"), "hello"), Priority.QUICK
        )
        good = harness.submit(scheduler, "hello", Priority.SCHEDULED)
        bad_items, unknown_items, good_items = collect(bad), collect(unknown), collect(good)
    finally:
        scheduler.close()
    assert bad.state == "failed" and "RuntimeError: a bug in a job" in bad.error
    assert Error("internal", "RuntimeError: a bug in a job") in bad_items
    assert unknown.state == "failed" and "There is no conversation" in unknown.error
    assert isinstance(unknown_items[-1], Finished) and unknown_items[-1].state == "failed"
    assert answer_of(good_items) == "Still here."
    assert scheduler.thread.is_alive() is False  # closed; it was alive until close()


def test_close_cancels_what_waits_and_closes_the_model_on_its_thread(harness: Harness) -> None:
    closed_on: list[str] = []

    class Closing(ReplayBackend):
        def close(self) -> None:
            closed_on.append(threading.current_thread().name)

    scheduler = RequestScheduler(Closing([xml_call("wait_forever"), "never"]), name="engine-x")
    first = harness.submit(scheduler, "first", Priority.INTERACTIVE)
    waiting = harness.submit(scheduler, "waiting", Priority.SCHEDULED)
    assert waiting.ahead == 1
    scheduler.close()
    assert first.wait(5) and first.state == "cancelled"
    assert waiting.state == "cancelled"
    assert collect(waiting)[-1] == Finished(waiting.id, "cancelled", started=False)
    assert closed_on == ["engine-x"]
    late = harness.submit(scheduler, "late", Priority.INTERACTIVE)
    assert late.state == "cancelled"


# --- a background run waiting for approval is parked ----------------------------------------


def parked_routine(
    harness: Harness, scheduler: RequestScheduler, text: str = "note milk"
) -> tuple[Request, ApprovalNeeded]:
    """Submit a background (scheduled) request and wait until it has parked at its approval."""
    asked: list[ApprovalNeeded] = []
    parked = threading.Event()

    def on_item(item: Item) -> None:
        if isinstance(item, ApprovalNeeded):
            asked.append(item)
        elif isinstance(item, Parked):
            parked.set()

    routine = harness.submit(scheduler, text, Priority.SCHEDULED, background=True, on_item=on_item)
    assert parked.wait(10), "the background run never parked"
    return routine, asked[0]


def test_a_background_run_waiting_for_approval_gives_the_engine_to_the_user(
    harness: Harness,
) -> None:
    backend = ReplayBackend(
        [xml_call("write_note", text="milk"), "Interactive answer.", "Noted: milk."]
    )
    scheduler = RequestScheduler(backend)
    try:
        routine, asked = parked_routine(harness, scheduler)
        assert routine.state == "parked" and scheduler.parked() == [routine]
        assert scheduler.running is None or scheduler.running is not routine
        assert harness.gate.inbox.pending() == [asked.request]  # shown in the queue meanwhile
        # the user's request arrives after the routine asked, and is answered while it waits
        interactive = harness.submit(scheduler, "interactive", Priority.INTERACTIVE)
        assert answer_of(collect(interactive)) == "Interactive answer."
        assert routine.state == "parked" and not asked.request.decided
        assert harness.notes == []
        asked.request.approve(by="user (later)")
        items = collect(routine)
    finally:
        scheduler.close()
    # it went on where it stopped: the approved call ran, then the model answered
    assert answer_of(items) == "Noted: milk." and harness.notes == ["milk"]
    [result] = [i for i in items if isinstance(i, ToolResult)]
    assert result.decision == "approved" and result.decided_by == "user (later)"
    progress = [type(i).__name__ for i in items if isinstance(i, Running | Parked | Finished)]
    assert progress == ["Running", "Parked", "Running", "Finished"]
    assert items[-1] == Finished(routine.id, "done")
    assert harness.gate.inbox.pending() == []
    texts = conversation_texts(harness.store)
    assert texts["interactive"] == [("user", "interactive"), ("assistant", "Interactive answer.")]
    assert [r for r in texts["note milk"] if r[0] != "assistant" or r[1]] == [
        ("user", "note milk"),
        ("tool", "written"),
        ("assistant", "Noted: milk."),
    ]


def test_a_parked_run_gives_up_when_nobody_answers_in_time(harness: Harness) -> None:
    harness.settings = replace(harness.settings, background_approval_timeout_s=0.2)
    backend = ReplayBackend([xml_call("write_note", text="milk"), "Nobody approved the note."])
    scheduler = RequestScheduler(backend)
    try:
        routine, asked = parked_routine(harness, scheduler)
        items = collect(routine)
    finally:
        scheduler.close()
    assert asked.request.decided_by == "nobody in time" and not asked.request.approved
    [result] = [i for i in items if isinstance(i, ToolResult)]
    assert result.decision == "denied" and result.decided_by == "nobody in time"
    assert result.output.startswith(
        "write_note was not run: it waited for the user's approval for 0.2 s and nobody "
        "answered (agent.background_approval_timeout_s)."
    )
    # the run ends there, with a sentence, never with another model turn (or action)
    assert answer_of(items) == (
        "I did not do it: write_note waited 0.2 s for your approval and nobody answered, so "
        "nothing was run. Ask again when you are back."
    )
    assert harness.notes == [] and harness.gate.inbox.pending() == []
    assert items[-1] == Finished(routine.id, "done")


def test_stop_or_close_winds_a_parked_run_up_with_its_approval_denied(harness: Harness) -> None:
    backend = ReplayBackend(
        [xml_call("write_note", text="milk"), xml_call("write_note", text="eggs")]
    )
    scheduler = RequestScheduler(backend)
    try:
        stopped, first = parked_routine(harness, scheduler, "note milk")
        stopped.cancel()
        stopped_items = collect(stopped)
        closed, second = parked_routine(harness, scheduler, "note eggs")
    finally:
        scheduler.close()
    closed_items = collect(closed)
    for request, items in ((first, stopped_items), (second, closed_items)):
        assert request.request.decided_by == "stopped" and not request.request.approved
        assert [i.kind for i in items if isinstance(i, Error)] == ["cancelled"]
        assert isinstance(items[-1], Finished) and items[-1].state == "cancelled"
        assert items[-1].started
    assert harness.notes == [] and harness.gate.inbox.pending() == []
    assert not scheduler.thread.is_alive()


def test_a_close_while_a_stored_approval_is_on_its_way_to_park_keeps_it_for_the_next_start(
    harness: Harness,
) -> None:
    """The window quits (or the daemon stops) in the instant between the approval's row being
    stored and the run parking: the run is suspended as a parked one is, its row left waiting
    for the next start, its approval undecided; before, close() stopped it as Stop does, which
    denied the approval and took the row."""
    queue = ApprovalQueue(harness.store, inbox=harness.gate.inbox)
    backend = ReplayBackend([xml_call("write_note", text="milk"), "Noted: milk."])
    scheduler = RequestScheduler(backend)
    asked: list[ApprovalNeeded] = []
    closer: list[threading.Thread] = []
    kept_while_asking: list[bool] = []

    def on_item(item: Item) -> None:
        # on the engine thread, after the row is stored and before the run parks
        if isinstance(item, ApprovalNeeded):
            asked.append(item)
            kept_while_asking.append(routine.kept_at_close)
            closer.append(threading.Thread(target=scheduler.close))
            closer[0].start()
            deadline = time.monotonic() + 10
            while not scheduler._closing and time.monotonic() < deadline:
                time.sleep(0.005)

    job = session_job(harness.maker(background=True), "note milk", queue=queue)
    routine = scheduler.submit(job, Priority.SCHEDULED, label="note milk", on_item=on_item)
    try:
        assert routine.wait(20), "the run never ended"
        closer[0].join(20)
    finally:
        scheduler.close()
    assert kept_while_asking == [True]
    assert routine.state == "suspended" and not routine.cancel_event.is_set()
    assert not asked[0].request.decided and harness.notes == []
    [row] = queue.waiting()
    assert row.call_id == asked[0].request.call_id and row.tool == "write_note"
    queue.close()


@pytest.mark.model
def test_three_callers_share_one_real_model_with_separate_answers(harness: Harness) -> None:
    # SmolLM2-135M (greedy): each prompt has its own answer, so a mix-up would show; the
    # random-weight tiny qwen35 answers every prompt the same way and could not tell
    from botpsy_desktop.core.config import ModelSettings
    from botpsy_desktop.llm.engines.engine import LlamaBackend
    from tests.helpers.models import smollm2_gguf

    # one thread: llama.cpp threads waiting on each other crawl on a shared, loaded CPU
    settings = ModelSettings(
        n_ctx=1024, temperature=0.0, max_tokens=12, seed=1, n_threads=1, n_threads_batch=1
    )
    prompts = {
        Priority.SCHEDULED: "Count from one to five.",
        Priority.QUICK: "Say hello in Spanish.",
        Priority.INTERACTIVE: "What is the capital of France?",
    }
    scheduler = RequestScheduler()
    try:
        # the model loads on the engine thread while the three requests arrive, last first
        load = scheduler.submit(
            lambda ctx: ctx.replace_backend(LlamaBackend(settings, smollm2_gguf())),
            Priority.CONTROL,
            label="load",
        )
        requests = {p: harness.submit(scheduler, text, p) for p, text in prompts.items()}
        together = {p: answer_of(collect(r)) for p, r in requests.items()}
        assert load.state == "done"
        # the same prompts one at a time, each alone on the engine: the reference answers
        alone = {
            p: answer_of(collect(harness.submit(scheduler, text, Priority.INTERACTIVE)))
            for p, text in prompts.items()
        }
    finally:
        scheduler.close()
    order = sorted(requests, key=lambda p: requests[p].started_at or 0)
    assert order == [Priority.INTERACTIVE, Priority.QUICK, Priority.SCHEDULED]
    assert together == alone
    assert len(set(together.values())) == 3, together  # three different answers
    for p, text in prompts.items():
        assert [
            m["content"]
            for m in harness.store.messages(_conversation_of(harness.store, text))
            if m["role"] == "assistant"
        ][:1] == [together[p]]


def _conversation_of(store: ConversationStore, first_message: str) -> str:
    for info in store.conversations():
        if store.messages(info.id)[0]["content"] == first_message:
            return info.id
    raise AssertionError(f"no conversation starts with {first_message!r}")
