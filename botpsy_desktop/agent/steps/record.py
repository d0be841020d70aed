"""Record: a change logged before and after it runs (agent/audit.py), and each call's row,
the observation the model reads on its next turn."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botpsy_desktop.agent.audit import AuditLog
from botpsy_desktop.agent.events import ToolResult
from botpsy_desktop.agent.gate import Verdict
from botpsy_desktop.agent.hardening import clean_output
from botpsy_desktop.agent.provenance import TAINT
from botpsy_desktop.agent.steps.carry_out import Outcome
from botpsy_desktop.agent.tools import Inverse, Tool, ToolRegistry
from botpsy_desktop.core.errors import StoreError


def begin_change(
    audit: AuditLog,
    conversation_id: str,
    call_id: str,
    tool: Tool,
    arguments: dict[str, Any],
    verdict: Verdict,
    by: str,
) -> int | Outcome:
    """Log a change before it runs (agent/audit.py ``begin``), approved ``by`` someone or a
    rule: gives its entry, or, when the log cannot be written, the Outcome of a call that was
    not run (a change the log cannot record never runs)."""
    effects = (
        sorted(e.value for e in verdict.assessment.effects)
        if verdict.assessment is not None
        else []
    )
    try:
        return audit.begin(
            conversation_id=conversation_id,
            call_id=call_id,
            tool=tool.name,
            arguments=arguments,
            effects=effects,
            approved_by=by,
            receipt=verdict.receipt,
        )
    except StoreError as exc:
        return Outcome(
            False,
            f"{tool.name} was not run: the audit log could not record it first "
            f"({exc.message}). Nothing was changed. Tell the user; do not try it again now.",
            "not-run",
        )


def finish_change(
    audit: AuditLog,
    registry: ToolRegistry,
    secrets: frozenset[str],
    entry: int,
    tool: Tool,
    arguments: dict[str, Any],
    verdict: Verdict,
    outcome: Outcome,
) -> str | None:
    """Record how a logged change ended; the outcome learns its entry, summary and undo.
    Gives the change in a line for the request's error (None when it failed).

    If that cannot be written, the entry stays in the log as not confirmed and the outcome
    says so (what the model reads, and the person in the request's error)."""
    inverse: Inverse | str = (
        tool.inverse_of(arguments, outcome.value)
        if outcome.ok
        else "it failed, so there is nothing to undo"
    )
    if outcome.ok:
        outcome.summary = (
            tool.describe_done(arguments, outcome.value)
            or verdict.summary
            or tool.summarize(arguments)
        )
    if outcome.ok and isinstance(inverse, Inverse):
        target = registry.get(inverse.tool)
        outcome.undo = target.summarize(inverse.arguments) if target is not None else inverse.tool
    outcome.action_id = entry
    done = None
    if outcome.ok:
        first = (outcome.summary.splitlines() or [tool.name])[0]
        done = f"{first} (#{entry} in `botpsy log`)"
    try:
        audit.complete(
            entry,
            tool=tool.name,
            inverse=inverse,
            ok=outcome.ok,
            output=clean_output(outcome.output, 2000, secrets),
            value=outcome.value,
        )
    except StoreError as exc:
        outcome.undo = ""
        outcome.output = (
            f"{outcome.output}\n(The app could not record how this ended: {exc.message} "
            f"It is in the audit log as #{entry}, not confirmed.)"
        )
    return done


def observation(outcome: Outcome, limit: int, secrets: frozenset[str]) -> str:
    """What the model reads of a call: a tool's output cleaned (secrets scrubbed, clipped to
    ``limit``), the app's own words for a call that did not run clipped only."""
    if outcome.ran:
        return clean_output(outcome.output, limit, secrets)
    return clip(outcome.output, limit)


def skipped_note(ran: int, skipped: int) -> str:
    """The line added to a runaway turn's last run call: how many of its calls did not run."""
    return (
        f"\n[Only the first {ran} tool calls of this turn were run "
        f"(at most {ran} per turn); the other {skipped} were not run. "
        "Make fewer calls at a time.]"
    )


def tool_row(
    call_id: str, name: str | None, arguments: Mapping[str, Any], output: str, outcome: Outcome
) -> tuple[dict[str, Any], str | None]:
    """Takes a call and how it ended; gives its row in the conversation and, when what it
    returned is untrusted content, the words that name it (agent/provenance.py TAINT)."""
    row: dict[str, Any] = {
        "role": "tool",
        "tool_call_id": call_id,
        "name": name or "",
        "content": output,
    }
    if not outcome.ran:
        return row, None
    row["data"] = True
    label = f"what {call_label(name, arguments)} returned"
    # a confirmation of the app's own is not content from outside
    row[TAINT] = [label] if outcome.untrusted or not outcome.ok else []
    return row, label if row[TAINT] else None


def result_event(
    call_id: str, name: str | None, arguments: dict[str, Any], output: str, outcome: Outcome
) -> ToolResult:
    """The event that shows how a call ended: what the model reads of it, who decided, the
    change in words with its audit entry and what undoing it would do."""
    return ToolResult(
        call_id,
        name,
        arguments,
        outcome.ok,
        output,
        outcome.decision,
        outcome.duration,
        outcome.decided_by,
        outcome.summary,
        outcome.action_id,
        outcome.undo,
    )


def call_label(name: str | None, arguments: Mapping[str, Any]) -> str:
    """A call in a few words: ``read_file(path=notes.txt)``."""
    shown = ", ".join(f"{k}={v!s:.60}" for k, v in arguments.items())
    return f"{name or '?'}({shown})"


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[clipped: {len(text) - limit} more characters not shown]"
