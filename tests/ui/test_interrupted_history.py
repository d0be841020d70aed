"""The window shows a turn cut off by a crash as interrupted, never as silently missing."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.ui.chat_view import ChatView


def test_interrupted_replies_and_tool_calls_are_shown_as_interrupted(
    qtbot: QtBot, tmp_path: Path
) -> None:
    db = tmp_path / "c.sqlite3"
    store = ConversationStore(db)
    conv = store.create()
    row = store.start_turn(conv, {"role": "user", "content": "list my files"})
    call = {"id": "c1", "type": "function", "function": {"name": "list_folder", "arguments": {}}}
    row = store.finish(
        row,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        then={"role": "tool", "tool_call_id": "c1", "name": "list_folder", "content": ""},
    )
    assert row is not None
    row = store.start_turn(conv, {"role": "user", "content": "tell me a story"})
    store.update(row, {"role": "assistant", "content": "Once upon a time."})
    store.start_turn(conv, {"role": "user", "content": "hello?"})
    store.close()  # unfinished rows are marked interrupted, as the next start does after a crash
    store = ConversationStore(db)

    view = ChatView()
    qtbot.addWidget(view)
    view.show_history(store.messages(conv))
    texts = [(b.role, b.text) for b in view.bubbles()]
    assert texts == [
        ("user", "list my files"),
        ("user", "tell me a story"),
        ("assistant", "Once upon a time.\n\n*(interrupted)*"),
        ("user", "hello?"),
        ("assistant", "*(interrupted before the reply started)*"),
    ]
    assert view.cards["c1"].status == "interrupted"
    assert "result is unknown" in view.cards["c1"].result
    store.close()
