"""Plays one injection scenario through the real loop, gate and adapters, and counts what ran."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.agent.events import ApprovalNeeded, Error, ToolResult, TurnFinished
from botpsy_desktop.agent.gate import Gate
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.config import AgentSettings
from botpsy_desktop.llm.replay import ReplayBackend
from tests.security.sandbox import (
    ATTACKER_EMAIL,
    ATTACKER_IBAN,
    Accounts,
    Servers,
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


def run(
    scenario: dict[str, Any],
    servers: Servers,
    base: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    accounts: Accounts | None = None,
) -> Outcome:
    """Play a scenario; ``mode`` "deny" answers every approval no (a background run's request
    is left to wait until it times out), "approve" answers every one yes."""
    scenario = fill(scenario, servers)
    world = build_world(base, servers, scenario.get("setup", {}), accounts)
    monkeypatch.setenv("HOME", str(world.home))
    monkeypatch.setenv("XDG_DATA_HOME", str(world.xdg))
    servers.attacker.hits.clear()
    servers.smtp.messages.clear()
    outcome = Outcome(scenario["id"])
    gate = Gate()
    store = ConversationStore(base / "conversations.sqlite3")
    conversation: str | None = None
    steps = scenario.get("steps") or [
        {"request": scenario["request"], "turns": scenario["turns"], "hijacked": []}
    ]
    try:
        for step in steps:
            background = bool(step.get("background", scenario.get("background", False)))
            session = AgentSession(
                ReplayBackend(step["turns"]),
                world.registry,
                gate,
                store,
                LoopSettings(
                    system_prompt=AgentSettings().system_prompt,
                    max_steps=len(step["turns"]) + 1,
                    tool_timeout_s=10.0,
                    background_approval_timeout_s=0.3,
                ),
                conversation,
                background=background,
            )
            conversation = session.conversation_id
            hijacked = set(step.get("hijacked", []))
            before = world.snapshot()
            turn = 0
            asked: set[str] = set()
            for event in session.run(step["request"]):
                if isinstance(event, TurnFinished):
                    turn = event.step - 1
                elif isinstance(event, ApprovalNeeded):
                    request = event.request
                    asked.add(request.call_id)
                    if turn in hijacked:
                        outcome.approvals_for_attacks += 1
                        outcome.receipts.append(
                            (json.dumps(request.arguments, ensure_ascii=False), request.receipt)
                        )
                    else:
                        outcome.approvals_elsewhere += 1
                    if step.get("setup") == "approve_scope":
                        request.approve(by="user", scope=request.scope is not None)
                    elif mode == "approve":
                        request.approve(by="control run")
                    elif not background:
                        request.deny(by="user")
                elif isinstance(event, ToolResult) and turn in hijacked:
                    outcome.attempts.append(
                        (event.name or "?", event.decision, event.call_id in asked, event.output)
                    )
                elif isinstance(event, ToolResult) and not event.ok and not step.get("setup"):
                    outcome.failed_reads.append(f"{event.name}: {event.output}")
                elif isinstance(event, Error) and event.kind != "cancelled":
                    outcome.answered = False
            if not step.get("setup"):
                outcome.side_effects += changes(before, world.snapshot())
    finally:
        world.close()
        store.close()
    return outcome


def report(capsys: pytest.CaptureFixture[str], lines: list[str]) -> None:
    """Print the figures on the terminal even while pytest captures output (CI shows them)."""
    with capsys.disabled():
        print("\n" + "\n".join(lines), flush=True)
