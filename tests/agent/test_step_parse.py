"""The parse step (agent/steps/parse.py): a finished turn read as an answer or as calls."""

from __future__ import annotations

import itertools

from botpsy_desktop.agent.steps.parse import answer_row, read_turn, result_row, turn_calls
from botpsy_desktop.llm.types import Completion, GenerationStats, ToolCallError
from tests.helpers.replay import xml_call

ALARM = {
    "type": "function",
    "function": {
        "name": "set_alarm",
        "parameters": {"type": "object", "properties": {"time": {"type": "string"}}},
    },
}


def completion(text: str) -> Completion:
    return Completion(text, "stop", GenerationStats())


def test_an_answer_that_claims_what_did_not_run_gets_a_note() -> None:
    parsed = read_turn(completion("<think>easy</think>I have set the alarm for 7."), [ALARM])
    assert parsed.calls == [] and parsed.thinking.strip() == "easy"
    row, note = answer_row(parsed, [])
    assert row["role"] == "assistant" and row["content"] == "I have set the alarm for 7."
    assert note and row["note"] == note
    row, note = answer_row(parsed, ["set_alarm"])
    assert note == "" and "note" not in row


def test_calls_get_ids_rows_and_a_runaway_turn_runs_its_first_ones() -> None:
    text = "Setting them." + "".join(xml_call("set_alarm", time=f"{h}:00") for h in range(5, 9))
    parsed = read_turn(completion(text), [ALARM])
    ids = (f"call_{n}" for n in itertools.count(1))
    turn = turn_calls(parsed, 3, lambda: next(ids))
    assert turn.skipped == 1 and [i for i, _ in turn.calls] == ["call_1", "call_2", "call_3"]
    assert [c["id"] for c in turn.row["tool_calls"]] == ["call_1", "call_2", "call_3"]
    assert turn.row["tool_calls"][0]["function"] == {
        "name": "set_alarm",
        "arguments": {"time": "5:00"},
    }
    assert turn.result_rows == [result_row(f"call_{n}", "set_alarm") for n in (1, 2, 3)]
    assert result_row("call_1", None) == {
        "role": "tool",
        "tool_call_id": "call_1",
        "name": "",
        "content": "",
    }


def test_a_call_that_cannot_be_read_stays_in_the_text_as_written() -> None:
    broken = "<tool_call>\n<function=set_alarm>\n<parameter=time>\n7:00\n</tool_call>"
    parsed = read_turn(completion("Let me." + broken), [ALARM])
    assert parsed.calls and isinstance(parsed.calls[0], ToolCallError)
    turn = turn_calls(parsed, 16)
    assert turn.skipped == 0 and "tool_calls" not in turn.row
    assert turn.row["content"].startswith("Let me.") and "<tool_call>" in turn.row["content"]
    assert turn.calls[0][0].startswith("call_") and len(turn.calls[0][0]) == 17
