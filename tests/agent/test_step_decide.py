"""The decide step (agent/steps/decide.py): the shipped gate's verdict on a call and the
approval when it asks: the person's, edited, declined, nobody's in time, or given while a
background run was parked."""

from __future__ import annotations

import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any, TypeVar

from botpsy_desktop.agent.events import ApprovalNeeded, Event, call_digest
from botpsy_desktop.agent.gate import Context, Decision
from botpsy_desktop.agent.steps.carry_out import Outcome
from botpsy_desktop.agent.steps.decide import Approved, Decider
from botpsy_desktop.agent.steps.parked import NOBODY_IN_TIME, Decided
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.tools import Tool
from tests.agent.gate_tools import payment_tool

T = TypeVar("T")
PAY = {"amount": 12.5, "currency": "EUR", "payee": "ACME Ltd"}


def decider(tmp_path: Path, *, background: bool = False, timeout: float | None = None) -> Decider:
    store = ConversationStore(tmp_path / "db.sqlite3")
    return Decider(
        build_gate(Config()),
        store,
        store.create(),
        background=background,
        approval_timeout_s=timeout,
    )


def approve(
    decide: Decider, tool: Tool, arguments: dict[str, Any], answer: str | None
) -> tuple[list[Event], Approved | Outcome]:
    """The approval of a call the gate asks about, ``answer``ed at its ApprovalNeeded event."""
    context = Context()
    verdict = decide.verdict(tool, arguments, context)
    assert verdict.decision is Decision.ASK
    gen = decide.approve(
        "call_1", tool, arguments, tool.validate(arguments), verdict, context, threading.Event()
    )
    return drain(gen, answer)


def drain(gen: Generator[Event, None, T], answer: str | None) -> tuple[list[Event], T]:
    events: list[Event] = []
    while True:
        try:
            event = next(gen)
        except StopIteration as stop:
            return events, stop.value
        events.append(event)
        if isinstance(event, ApprovalNeeded) and answer == "approve":
            event.request.approve(by="Ann")
        elif isinstance(event, ApprovalNeeded) and answer == "edit":
            event.request.approve(by="Ann", arguments={**PAY, "amount": 5.0})
        elif isinstance(event, ApprovalNeeded) and answer == "deny":
            event.request.deny(by="Ann")


def test_a_payment_asks_and_runs_only_as_the_person_approved_it(tmp_path: Path) -> None:
    tool = payment_tool(tmp_path / "ledger")
    events, approved = approve(decider(tmp_path), tool, PAY, "approve")
    assert [type(e) for e in events] == [ApprovalNeeded]
    assert isinstance(approved, Approved) and approved.decided_by == "Ann"
    assert approved.arguments == PAY and approved.edited is None

    _, edited = approve(decider(tmp_path / "2"), tool, PAY, "edit")
    assert isinstance(edited, Approved) and edited.edited == {**PAY, "amount": 5.0}
    assert edited.args_model.amount == 5.0 and edited.arguments == edited.edited


def test_a_declined_call_tells_the_model_not_to_try_again(tmp_path: Path) -> None:
    tool = payment_tool(tmp_path / "ledger")
    _, declined = approve(decider(tmp_path), tool, PAY, "deny")
    assert isinstance(declined, Outcome) and not declined.ok and declined.decision == "denied"
    assert declined.output.startswith("The user declined send_payment; it was not run.")
    assert declined.decided_by == "Ann"


def test_a_background_request_nobody_answers_in_time_is_denied(tmp_path: Path) -> None:
    tool = payment_tool(tmp_path / "ledger")
    decide = decider(tmp_path, background=True, timeout=0.0)
    events, outcome = approve(decide, tool, PAY, None)
    assert [type(e) for e in events] == [ApprovalNeeded]
    assert isinstance(outcome, Outcome) and outcome.decided_by == NOBODY_IN_TIME
    assert "waited for the user's approval for 0 s and nobody answered" in outcome.output
    assert not decide.gate.inbox.pending()  # the inbox shows it only while it waits


def test_a_decision_made_while_parked_is_used_for_that_exact_call_only(tmp_path: Path) -> None:
    tool = payment_tool(tmp_path / "ledger")
    decide = decider(tmp_path, background=True)
    decide.decided["call_1"] = Decided(True, "Ann", call_digest("send_payment", PAY))
    events, approved = approve(decide, tool, PAY, None)
    assert events == [] and isinstance(approved, Approved) and approved.decided_by == "Ann"

    other = {**PAY, "amount": 999.0}
    decide.decided["call_1"] = Decided(True, "Ann", call_digest("send_payment", PAY))
    events, refused = approve(decide, tool, other, None)
    assert events == [] and isinstance(refused, Outcome) and refused.decided_by == "not this call"

    decide.decided["call_2"] = Decided(False, "Bob", "")
    denied = decide.denied_while_parked("call_2", tool)
    assert denied is not None and denied.output.startswith("The user declined send_payment")
    assert decide.denied_while_parked("call_2", tool) is None  # used once
