"""Parse: the model's finished turn read as an answer (with its claims checked against what
ran) or as tool calls, each with the rows the conversation keeps for them."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.claims import note_for
from botpsy_desktop.llm.language.parser import parse_turn
from botpsy_desktop.llm.types import Completion, ParsedTurn, ToolCall, ToolCallError

Call = tuple[str, ToolCall | ToolCallError]
"""A call with its id (``call_…``): what the tool's result row answers."""


def read_turn(completion: Completion, tools: Sequence[Mapping[str, Any]]) -> ParsedTurn:
    """Takes the backend's completion and the tools offered; gives its thinking, its text and
    its tool calls (llm/language/parser.py; never raises: a call it cannot read is a
    ToolCallError the model hears about)."""
    return parse_turn(completion.text, tools, started_in_thinking=completion.started_in_thinking)


def answer_row(parsed: ParsedTurn, ran: Sequence[str]) -> tuple[dict[str, Any], str]:
    """Takes a turn without calls and the changes the request carried out; gives the answer's
    row and the note for the person when it claims an action that did not run
    (agent/claims.py)."""
    note = note_for(parsed.content, list(ran))  # each claim against what ran
    row: dict[str, Any] = {
        "role": "assistant",
        "content": parsed.content,
        "reasoning_content": parsed.thinking,
    }
    if note:
        row["note"] = note
    return row, note


def result_row(call_id: str, name: str | None) -> dict[str, Any]:
    """The empty row a call's result will fill, opened before the call runs."""
    return {"role": "tool", "tool_call_id": call_id, "name": name or "", "content": ""}


@dataclass(frozen=True)
class TurnCalls:
    """A turn's calls, ready to run in order: each with its id, the assistant row that makes
    them, and the result row of each (opened as the one before it is finished)."""

    calls: list[Call]
    row: dict[str, Any]
    result_rows: list[dict[str, Any]]
    skipped: int
    """Calls past ``max_calls`` in a runaway turn: not run; the model hears so."""


def new_call_id() -> str:
    """A fresh id for a call: ``call_`` and 12 hex digits."""
    return f"call_{uuid.uuid4().hex[:12]}"


def turn_calls(
    parsed: ParsedTurn, max_calls: int, new_id: Callable[[], str] = new_call_id
) -> TurnCalls:
    """Takes a turn with calls and the most calls one turn may run; gives them with their ids
    and rows. A call the parser could not read is kept in the assistant's text as written (the
    model sees what it wrote) and answered with its error."""
    skipped = len(parsed.calls) - max_calls
    if skipped > 0:  # a runaway turn: its first calls run, the model hears the rest did not
        parsed = dataclasses.replace(parsed, calls=parsed.calls[:max_calls])
    calls = [(new_id(), call) for call in parsed.calls]
    content = parsed.content
    tool_calls = []
    for call_id, call in calls:
        if isinstance(call, ToolCall):
            tool_calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            )
        else:
            content = f"{content}\n\n{call.raw}".strip()
    row: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "reasoning_content": parsed.thinking,
    }
    if tool_calls:
        row["tool_calls"] = tool_calls
    rows = [result_row(call_id, call.name) for call_id, call in calls]
    return TurnCalls(calls, row, rows, max(skipped, 0))
