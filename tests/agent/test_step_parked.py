"""Parked runs (agent/steps/parked.py): where a stored background run stopped, and the words
for a run nobody answered in time."""

from __future__ import annotations

from typing import Any

from botpsy_desktop.agent.steps.parked import (
    earlier_call_ids,
    gave_up_sentence,
    parked_turn,
    waited,
)
from botpsy_desktop.llm.types import ToolCall


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATION: list[dict[str, Any]] = [
    {"role": "user", "content": "an earlier request"},
    {"role": "assistant", "content": "", "tool_calls": [call("c0", "list_alarms")]},
    {"role": "tool", "tool_call_id": "c0", "content": "none"},
    {"role": "assistant", "content": "None."},
    {"role": "user", "content": "mail Ann the report and delete the draft"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("c1", "find_files", pattern="report")],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "report.pdf"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("c2", "send_email", to="ann@example.org"), call("c3", "delete_file")],
    },
    {"role": "tool", "tool_call_id": "c2", "content": ""},
]


def test_a_parked_call_is_found_with_its_request_step_and_the_calls_after_it() -> None:
    found = parked_turn(CONVERSATION, "c2")
    assert found is not None
    text, step, calls, earlier = found
    assert text == "mail Ann the report and delete the draft" and step == 2
    assert calls == [
        ("c2", ToolCall("send_email", {"to": "ann@example.org"}, "")),
        ("c3", ToolCall("delete_file", {}, "")),
    ]
    assert earlier == ["find_files", "send_email", "delete_file"]
    assert earlier_call_ids(CONVERSATION, "c3") == ["c1", "c2"]
    assert earlier_call_ids(CONVERSATION, "c1") == []
    assert parked_turn(CONVERSATION, "gone") is None and earlier_call_ids(CONVERSATION, "x") == []


def test_a_run_nobody_answered_in_time_says_so_in_words() -> None:
    assert [waited(s) for s in (None, 7200, 5400, 45)] == [
        "as long as it could",
        "2 h",
        "90 min",
        "45 s",
    ]
    sentence = gave_up_sentence(["send_email", "send_email", "delete_file"], 3600)
    assert sentence.startswith("I did not do it: send_email, delete_file waited 1 h")
