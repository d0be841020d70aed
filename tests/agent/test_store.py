"""The conversation store: WAL mode, messages committed in order, tool calls recorded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.errors import StoreError


def test_messages_round_trip_and_survive_reopening(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite3"
    store = ConversationStore(db)
    assert store.journal_mode() == "wal"
    conv = store.create("first")
    store.append(conv, {"role": "user", "content": "héllo"})
    store.append(
        conv,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "x", "arguments": {"a": 1}}}
            ],
        },
    )
    store.record_tool_call(
        conv, call_id="c1", name="x", arguments={"a": 1}, decision="allowed", ok=True, result="done"
    )
    store.close()
    again = ConversationStore(db)
    msgs = again.messages(conv)
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert msgs[0]["content"] == "héllo"
    assert msgs[1]["tool_calls"][0]["function"]["arguments"] == {"a": 1}
    assert again.tool_calls(conv)[0]["decision"] == "allowed"
    infos = again.conversations()
    assert infos[0].id == conv and infos[0].message_count == 2
    again.close()


def test_a_message_is_visible_to_another_connection_at_once(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite3"
    store = ConversationStore(db)
    conv = store.create()
    store.append(conv, {"role": "user", "content": "committed"})
    other = sqlite3.connect(db)
    rows = other.execute("SELECT role FROM messages").fetchall()
    other.close()
    store.close()
    assert rows == [("user",)]


def test_a_newer_schema_is_refused_clearly(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite3"
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version=99")
    con.close()
    with pytest.raises(StoreError, match="newer version"):
        ConversationStore(db)


def test_a_damaged_file_is_reported(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite3"
    db.write_bytes(b"this is not a database" * 100)
    store = ConversationStore(db)  # opened to be reported (doctor), never written
    try:
        assert store.damaged
        with pytest.raises(StoreError, match="is damaged") as error:
            store.create()
        assert "There is no backup" in str(error.value)
        with pytest.raises(StoreError, match="is damaged"):
            store.conversations()
    finally:
        store.close()
    assert db.read_bytes() == b"this is not a database" * 100


def test_rename_search_and_delete(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    a = store.create("Trip planning")
    b = store.create()
    store.append(b, {"role": "user", "content": "Where are my TAX papers?"})
    store.record_tool_call(
        b, call_id="c", name="x", arguments={}, decision="allowed", ok=True, result="r"
    )
    assert store.search("tax") == [b]
    assert store.search("trip") == [a]
    store.rename(a, "  Holiday   plans ")
    assert store.title(a) == "Holiday plans"
    store.delete(b)
    assert not store.exists(b)
    assert store.messages(b) == [] and store.tool_calls(b) == []
    store.close()
