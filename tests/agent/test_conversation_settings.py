"""Per-conversation settings in the store: kept, replaced, gone with their conversation."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.errors import StoreError


def test_a_setting_is_kept_replaced_and_deleted_with_its_conversation(tmp_path: Path) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    a, b = store.create(), store.create()
    assert store.setting(a, "think", False) is False  # never set: the default
    store.set_setting(a, "think", True)
    store.set_setting(b, "think", False)
    store.set_setting(a, "think", True)  # set again: replaced, not duplicated
    assert (store.setting(a, "think"), store.setting(b, "think", True)) == (True, False)
    store.close()

    again = ConversationStore(tmp_path / "c.sqlite3")
    assert again.setting(a, "think") is True
    again.delete(a)
    assert again.setting(a, "think", "gone") == "gone"
    assert again.setting(b, "think", True) is False
    with pytest.raises(StoreError, match="no conversation"):
        again.set_setting(a, "think", True)
    again.close()


def test_a_database_without_the_table_gains_it(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    conv = store.create()
    store.close()
    with sqlite3.connect(path) as db:  # as written before per-conversation settings existed
        db.execute("DROP TABLE conversation_settings")
    store = ConversationStore(path)
    assert store.setting(conv, "think", None) is None
    store.set_setting(conv, "think", True)
    assert store.setting(conv, "think") is True
    store.close()
