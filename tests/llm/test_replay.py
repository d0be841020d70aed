"""The replay backend: streams exactly the recorded text and reports broken files clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.engines.replay import ReplayBackend
from botpsy_desktop.llm.types import Completion, TextPiece

MSGS = [{"role": "user", "content": "hi"}]


@given(st.lists(st.sampled_from([*"ab <>/=\n\t_é😀", "<tool_call>", "</think>"])).map("".join))
def test_pieces_add_up_to_the_recorded_text(text: str) -> None:
    items = list(ReplayBackend([text]).complete(MSGS, [], enable_thinking=False))
    pieces = [i.text for i in items if isinstance(i, TextPiece)]
    assert "".join(pieces) == text
    assert all(pieces)
    done = items[-1]
    assert isinstance(done, Completion) and done.text == text and done.finish_reason == "stop"


def test_thinking_open_entries(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    f.write_text(json.dumps([{"text": "plan</think>answer", "thinking_open": True}]), "utf-8")
    done = list(ReplayBackend.from_file(f).complete(MSGS, [], enable_thinking=True))[-1]
    assert isinstance(done, Completion) and done.started_in_thinking


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}", "holds a JSON dict, not a list"),
        ("[1]", "neither a string nor an object"),
        ("[", "not valid JSON"),
    ],
)
def test_broken_replay_files(tmp_path: Path, content: str, message: str) -> None:
    f = tmp_path / "r.json"
    f.write_text(content, "utf-8")
    with pytest.raises(ModelError, match=message):
        ReplayBackend.from_file(f)
    with pytest.raises(ModelError, match="does not exist"):
        ReplayBackend.from_file(tmp_path / "missing.json")
