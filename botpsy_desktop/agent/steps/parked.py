"""Parked: a background run waits for an approval nobody is there to give; it may be stored
and go on in a later process (agent/approvals.py), or end when nobody answers in time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.llm.types import ToolCall, ToolCallError

NOBODY_IN_TIME = "nobody in time"
"""Who denied a background run's approval request when its wait ran out."""

NOT_RUN_AFTER_GIVING_UP = (
    "Not run: the run ended because an earlier action waited too long for approval."
)


@dataclass(frozen=True)
class Decided:
    """A decision made while a stored background run was parked (agent/approvals.py): approved
    or not, by whom, for which exact call (:func:`call_digest`), with edited arguments if any."""

    approved: bool
    by: str
    digest: str
    edited_arguments: dict[str, Any] | None = None
    effect: str = ""
    """What the approved receipt showed the call acts on (agent/gate.py ``Resolution``)."""


def gave_up_sentence(tools: Sequence[str], timeout_s: float | None) -> str:
    """The sentence that ends a background run whose approval nobody gave in time."""
    names = ", ".join(dict.fromkeys(tools))
    return (
        f"I did not do it: {names} waited {waited(timeout_s)} for your approval and nobody "
        "answered, so nothing was run. Ask again when you are back."
    )


def parked_turn(
    messages: list[dict[str, Any]], call_id: str
) -> tuple[str, int, list[tuple[str, ToolCall | ToolCallError]], list[str]] | None:
    """Where a stored run stopped at ``call_id``: the request's text, the step of the model turn
    that made the call, that call and the ones after it in the turn, and the tools called in the
    request before it. None when the call is not in the conversation."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        calls = message.get("tool_calls") or []
        ids = [str(c.get("id")) for c in calls]
        if message.get("role") != "assistant" or call_id not in ids:
            continue
        start = next((i for i in range(index, -1, -1) if messages[i].get("role") == "user"), None)
        if start is None:
            return None
        turns = messages[start + 1 : index + 1]
        step = sum(1 for m in turns if m.get("role") == "assistant")
        earlier = [
            str(c.get("function", {}).get("name") or "")
            for m in turns
            for c in m.get("tool_calls") or []
        ]
        rest: list[tuple[str, ToolCall | ToolCallError]] = []
        for c in calls[ids.index(call_id) :]:
            function = c.get("function") or {}
            arguments = function.get("arguments")
            rest.append(
                (
                    str(c.get("id")),
                    ToolCall(
                        str(function.get("name") or ""),
                        dict(arguments) if isinstance(arguments, dict) else {},
                        "",
                    ),
                )
            )
        return str(messages[start].get("content") or ""), max(step, 1), rest, earlier
    return None


def earlier_call_ids(messages: list[dict[str, Any]], call_id: str) -> list[str]:
    """The ids of the calls the request that made ``call_id`` made before it (its earlier model
    turns' calls and the ones before it in its own turn)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        ids = [str(c.get("id")) for c in message.get("tool_calls") or []]
        if message.get("role") != "assistant" or call_id not in ids:
            continue
        start = next((i for i in range(index, -1, -1) if messages[i].get("role") == "user"), 0)
        earlier = [
            str(c.get("id"))
            for m in messages[start + 1 : index]
            if m.get("role") == "assistant"
            for c in m.get("tool_calls") or []
        ]
        return earlier + ids[: ids.index(call_id)]
    return []


def waited(seconds: float | None) -> str:
    """A wait in words: "1 h", "90 min", "45 s"."""
    if seconds is None:
        return "as long as it could"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:g} s"
