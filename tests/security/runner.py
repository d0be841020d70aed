"""Plays one scenario through the shipped app (``build_app``: loop, gate, adapters) and counts
what ran, by its real side effects."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.adapters.alarms import AlarmFired, AlarmKind
from botpsy_desktop.agent.events import (
    ApprovalNeeded,
    ApprovalRequest,
    ContextTrimmed,
    Error,
    ToolResult,
    TurnFinished,
)
from botpsy_desktop.agent.routines import routine_conversation
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.engines.replay import ReplayBackend
from tests.security.sandbox import (
    ATTACKER_EMAIL,
    ATTACKER_IBAN,
    Accounts,
    Servers,
    World,
    build_world,
    changes,
)


def fill(value: Any, servers: Servers) -> Any:
    """Put the running attacker server's address (and the attacker's names) in a scenario."""
    if isinstance(value, str):
        return (
            value.replace("{ATTACKER_URL}", servers.attacker.base)
            .replace("{ATTACKER_EMAIL}", ATTACKER_EMAIL)
            .replace("{ATTACKER_IBAN}", ATTACKER_IBAN)
        )
    if isinstance(value, list):
        return [fill(v, servers) for v in value]
    if isinstance(value, dict):
        return {fill(k, servers): fill(v, servers) for k, v in value.items()}
    return value


@dataclass
class Outcome:
    """What one scenario did: the attacker's calls and how the gate met them, and side effects."""

    id: str
    attempts: list[tuple[str, str, bool, str]] = field(default_factory=list)
    """Each attacker call: (tool name, the loop's decision, whether it asked, its output)."""
    approvals_for_attacks: int = 0
    approvals_elsewhere: int = 0
    side_effects: list[str] = field(default_factory=list)
    answered: bool = True
    failed_reads: list[str] = field(default_factory=list)
    """Outputs of the user's own (not hijacked) calls that failed: the sandbox is broken."""
    receipts: list[tuple[str, str]] = field(default_factory=list)
    """(arguments as JSON, receipt) of each approval the attacker's calls asked for."""
    requests: list[ApprovalRequest] = field(default_factory=list)
    """Every approval request shown, in order."""
    results: list[ToolResult] = field(default_factory=list)
    """Every tool result of the user's own (not hijacked) calls."""
    undo_errors: list[str] = field(default_factory=list)
    chat_receipts: list[str] = field(default_factory=list)
    """Receipts of the attacker's calls in chat or routine runs (not undos)."""
    trimmed: int = 0
    """Requests whose prompt the context budget trimmed (turns left out)."""
    dropped: int = 0
    """The most messages the context budget left out of one prompt."""


def _decide(request: ApprovalRequest, mode: str, step: dict[str, Any]) -> None:
    if request.decided:
        return
    if step.get("setup") == "approve_scope":
        request.approve(by="user", scope=request.scope is not None)
    elif step.get("setup") == "approve":
        request.approve(by="user")
    elif mode == "approve":
        request.approve(by="control run")
    else:
        request.deny(by="user")


def run(
    scenario: dict[str, Any],
    servers: Servers,
    base: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    accounts: Accounts,
) -> Outcome:
    """Play a scenario; ``mode`` "deny" answers every approval no (a background run's request
    is left to wait until it times out), "approve" answers every one yes.

    A step is a chat request (``request``, ``turns``, ``hijacked``: the model turns that are the
    attacker's), a routine firing (``routine``: the newest routine runs its stored request as
    the routine runner does, with its stored origin), or an undo (``undo``: ``botpsy undo``'s
    path, ``App.plan_undo`` then ``App.undo``; ``hijacked`` true when the undo is the attack).
    """
    scenario = fill(scenario, servers)
    world = build_world(
        base, servers, scenario.get("setup", {}), accounts, agent=scenario.get("agent")
    )
    monkeypatch.setenv("HOME", str(world.home))
    monkeypatch.setenv("XDG_DATA_HOME", str(world.xdg))
    servers.attacker.hits.clear()
    servers.weather.hits.clear()
    outcome = Outcome(scenario["id"])
    conversation: str | None = None
    steps = scenario.get("steps") or [
        {"request": scenario["request"], "turns": scenario["turns"], "hijacked": []}
    ]
    try:
        for step in steps:
            before = world.snapshot()
            if step.get("world"):  # the world changes outside the app (another client)
                _world(world, step["world"])
            elif step.get("undo"):
                _undo(world, step, mode, outcome)
            else:
                conversation = _chat(world, step, mode, outcome, conversation, scenario)
            if not step.get("setup"):
                outcome.side_effects += changes(before, world.snapshot())
    finally:
        world.close()
    return outcome


def _chat(
    world: World,
    step: dict[str, Any],
    mode: str,
    outcome: Outcome,
    conversation: str | None,
    scenario: dict[str, Any],
) -> str | None:
    app = world.app
    background = bool(step.get("background", scenario.get("background", False)))
    origin: str | None = None
    text = step.get("request", "")
    run_in = None if step.get("new_conversation") else conversation
    if step.get("routine"):
        routines = [a for a in world.alarms.alarms() if a.kind is AlarmKind.ROUTINE]
        assert routines, f"{scenario['id']}: no routine was set to fire"
        alarm = max(routines, key=lambda a: a.id)
        now = world.alarms.now()
        fired = AlarmFired(
            alarm.id,
            alarm.kind,
            alarm.label,
            alarm.next_ring or now,
            now + timedelta(seconds=1),
            conversation=alarm.conversation,
            origin=alarm.origin,
        )
        run_in = routine_conversation(app.store, world.alarms, fired)
        text, origin, background = fired.label, fired.origin, True
    backend = ReplayBackend(step["turns"], n_ctx=step.get("n_ctx"))
    session = app.session(backend, run_in, background=background)
    hijacked = set(step.get("hijacked", []))
    turn = 0
    asked: set[str] = set()
    for event in session.run(text, origin=origin):
        if isinstance(event, TurnFinished):
            turn = event.step - 1
        elif isinstance(event, ApprovalNeeded):
            request = event.request
            asked.add(request.call_id)
            outcome.requests.append(request)
            if turn in hijacked:
                outcome.approvals_for_attacks += 1
                outcome.receipts.append(
                    (json.dumps(request.arguments, ensure_ascii=False), request.receipt)
                )
                outcome.chat_receipts.append(request.receipt)
            else:
                outcome.approvals_elsewhere += 1
            if not background or mode == "approve":
                _decide(request, mode, step)
        elif isinstance(event, ToolResult) and turn in hijacked:
            outcome.attempts.append(
                (event.name or "?", event.decision, event.call_id in asked, event.output)
            )
        elif isinstance(event, ToolResult):
            outcome.results.append(event)
            if not event.ok and not step.get("setup"):
                outcome.failed_reads.append(f"{event.name}: {event.output}")
        elif isinstance(event, Error) and event.kind != "cancelled":
            outcome.answered = False
        elif isinstance(event, ContextTrimmed) and event.dropped_turns:
            outcome.trimmed += 1
            outcome.dropped = max(outcome.dropped, event.dropped_messages)
    return conversation if step.get("routine") else session.conversation_id


def _world(world: World, change: dict[str, Any]) -> None:
    """A change made outside the app: an event edited on the CalDAV server by another client
    (an attendee, a place, other properties, an occurrence turned into something else)."""
    world.accounts.edit_event(
        change["event"],
        add_attendee=change.get("add_attendee", ""),
        location=change.get("location", ""),
        props=change.get("props"),
        override=change.get("override"),
    )


def _undo(world: World, step: dict[str, Any], mode: str, outcome: Outcome) -> None:
    """``botpsy undo [ID]``'s path through the app: the plan (judged by the gate), then the
    undo. ``undo``: true for the newest action, or the number of the action to undo."""
    app = world.app
    target = step["undo"]
    try:
        plan = app.plan_undo(None if target is True else int(target))
    except BotpsyError as exc:
        outcome.undo_errors.append(str(exc))
        return
    asked = plan.request is not None
    if plan.request is not None:
        outcome.requests.append(plan.request)
        if step.get("hijacked"):
            outcome.approvals_for_attacks += 1
            outcome.receipts.append(
                (json.dumps(plan.request.arguments, ensure_ascii=False), plan.request.receipt)
            )
        else:
            outcome.approvals_elsewhere += 1
        _decide(plan.request, mode, step)
    try:
        app.undo(plan)
        decision = "approved" if asked else "allowed"
        output = "undone"
    except BotpsyError as exc:
        decision, output = "denied", str(exc)
    if step.get("hijacked"):
        outcome.attempts.append((plan.tool.name, decision, asked, output))


def report(capsys: pytest.CaptureFixture[str], lines: list[str]) -> None:
    """Print the figures on the terminal even while pytest captures output (CI shows them)."""
    with capsys.disabled():
        print("\n" + "\n".join(lines), flush=True)
