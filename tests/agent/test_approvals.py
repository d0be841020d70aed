"""The stored approval queue: the first decision wins, one process takes over an ended one's run,
a decision is taken once, and nothing is decided after its deadline."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from botpsy_desktop.agent.approvals import ApprovalQueue, RoutineInfo, StoredApproval
from botpsy_desktop.agent.events import ApprovalRequest
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.errors import BotpsyError


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "conversations.sqlite3"


@pytest.fixture
def opened() -> Iterator[list[ConversationStore | ApprovalQueue]]:
    things: list[ConversationStore | ApprovalQueue] = []
    yield things
    for thing in reversed(things):
        thing.close()


def process(
    db: Path, opened: list[ConversationStore | ApprovalQueue], clock: Clock
) -> ApprovalQueue:
    """What one process opens: its store (its owner token) and its queue."""
    store = ConversationStore(db)
    queue = ApprovalQueue(store, clock=clock)
    opened += [store, queue]
    return queue


def request() -> ApprovalRequest:
    return ApprovalRequest(
        "call_1",
        "cancel_alarm",
        {"alarm": "all"},
        "Cancel ALL alarms for good.\nWhy it asks: it cannot be undone.",
        ["destructive"],
        background=True,
        summary="Cancel ALL alarms for good.",
    )


def parked_by_ended_process(db: Path, clock: Clock, timeout_s: float = 60) -> StoredApproval:
    store = ConversationStore(db)
    queue = ApprovalQueue(store, clock=clock)
    conversation = store.create("Routine: Cancel all my alarms")
    stored = queue.park(
        request(),
        conversation_id=conversation,
        routine=RoutineInfo(3, "Cancel all my alarms", datetime(2026, 12, 7, 7, tzinfo=UTC)),
        timeout_s=timeout_s,
        think=False,
    )
    queue.close()
    store.close()  # the process ends: its owner lock is free
    return stored


def test_a_parked_approval_keeps_its_call_receipt_asker_and_deadline(
    db: Path, opened: list[ConversationStore | ApprovalQueue]
) -> None:
    clock = Clock()
    stored = parked_by_ended_process(db, clock, timeout_s=60)
    queue = process(db, opened, clock)
    [row] = queue.waiting()
    assert row == stored
    assert (row.tool, row.arguments, row.call_id) == ("cancel_alarm", {"alarm": "all"}, "call_1")
    assert row.receipt.startswith("Cancel ALL alarms") and row.summary
    assert row.asker() == "routine 3 “Cancel all my alarms”"
    assert row.asked_at == clock.now and row.deadline == clock.now + 60
    assert row.request().digest == request().digest  # the same exact call


def test_the_first_decision_wins_and_a_late_one_is_told(
    db: Path, opened: list[ConversationStore | ApprovalQueue]
) -> None:
    clock = Clock()
    stored = parked_by_ended_process(db, clock)
    terminal, window = process(db, opened, clock), process(db, opened, clock)
    decided = terminal.decide(stored.id, True, "user (terminal)")
    assert (decided.state, decided.decision, decided.decided_by) == (
        "decided",
        "approved",
        "user (terminal)",
    )
    with pytest.raises(BotpsyError, match="was approved by user \\(terminal\\) already"):
        window.decide(stored.id, False, "user")
    with pytest.raises(BotpsyError, match="There is no approval 99"):
        window.decide(99, True)


def test_nothing_is_decided_after_the_deadline(
    db: Path, opened: list[ConversationStore | ApprovalQueue]
) -> None:
    clock = Clock()
    stored = parked_by_ended_process(db, clock, timeout_s=60)
    queue = process(db, opened, clock)
    clock.now += 61
    with pytest.raises(BotpsyError, match="waited past its deadline"):
        queue.decide(stored.id, True)
    after = queue.get(stored.id)
    assert after is not None and after.state == "waiting"  # ended by whoever holds the run


def test_one_process_takes_over_an_ended_ones_run_and_takes_its_decision_once(
    db: Path, opened: list[ConversationStore | ApprovalQueue]
) -> None:
    clock = Clock()
    stored = parked_by_ended_process(db, clock)
    first, second = process(db, opened, clock), process(db, opened, clock)
    handed: list[tuple[str, int]] = []
    first.on_adopted = lambda s: handed.append(("first", s.id))
    second.on_adopted = lambda s: handed.append(("second", s.id))
    first.adopt = second.adopt = True  # as watch(adopt=True) does; polled by hand here
    arrived: list[int] = []
    first.arrived.append(lambda s: arrived.append(s.id))
    second.arrived.append(lambda s: arrived.append(s.id))
    first.poll()
    second.poll()
    assert arrived == [stored.id]  # taken over once (by the first to look)
    owner = first.get(stored.id)
    assert owner is not None and owner.owner == first.me
    process(db, opened, clock).decide(stored.id, False, "user (terminal)")
    for _ in range(2):
        second.poll()
        first.poll()
    assert handed == [("first", stored.id)]  # handed on once, to its holder
    assert second.take(stored.id) is None  # not its run
    taken = first.take(stored.id)
    assert taken is not None and taken.state == "taken" and not taken.decided().approved
    assert first.take(stored.id) is None  # once


def test_an_expired_approval_is_handed_on_as_expired(
    db: Path, opened: list[ConversationStore | ApprovalQueue]
) -> None:
    clock = Clock()
    stored = parked_by_ended_process(db, clock, timeout_s=5)
    queue = process(db, opened, clock)
    handed: list[StoredApproval] = []
    queue.on_adopted = handed.append
    queue.adopt = True
    left: list[int] = []
    queue.left.append(lambda s: left.append(s.id))
    queue.poll()
    assert handed == []  # waiting, taken over
    clock.now += 6
    queue.poll()
    [expired] = handed
    assert (expired.decision, expired.decided_by) == ("expired", "nobody in time")
    assert not expired.decided().approved and left == [stored.id]
