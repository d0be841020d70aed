"""Pending replies, interrupted turns, and the integrity check and backup before migrations."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent import store as store_module
from botpsy_desktop.agent.events import Answer, Error, Thinking, Token
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.reply import PendingReply
from botpsy_desktop.agent.store import (
    INTERRUPTED_NOTE,
    INTERRUPTED_TOOL,
    SCHEMA_VERSION,
    ConversationStore,
    prompt_view,
)
from botpsy_desktop.app import build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.dbsafety import backup_before_migration, list_backups
from botpsy_desktop.core.errors import ModelError, StoreError
from botpsy_desktop.core.tools import ToolRegistry
from botpsy_desktop.llm.backend import Message
from botpsy_desktop.llm.engines.replay import ReplayBackend
from botpsy_desktop.llm.types import Completion, TextPiece

SETTINGS = LoopSettings(system_prompt="You are a test.", max_steps=3)


def session(store: ConversationStore, backend: Any, conv: str | None = None) -> AgentSession:
    return AgentSession(backend, ToolRegistry(), build_gate(Config()), store, SETTINGS, conv)


def states(db: Path) -> list[tuple[str, str]]:
    con = sqlite3.connect(db)
    rows = con.execute("SELECT role, state FROM messages ORDER BY id").fetchall()
    con.close()
    return [(str(r[0]), str(r[1])) for r in rows]


def test_the_user_message_is_committed_with_a_pending_reply_before_the_model_runs(
    tmp_path: Path,
) -> None:
    db = tmp_path / "c.sqlite3"
    store = ConversationStore(db)
    backend = ReplayBackend(["First sentence. Second one is longer and ends here."])
    run = session(store, backend).run("hello")
    first = next(run)  # the model has started streaming
    assert isinstance(first, Token)
    # seen from another connection: the user's message is committed, the reply is pending
    assert states(db) == [("user", "done"), ("assistant", "pending")]
    events = [first, *run]
    assert isinstance(events[-1], Answer)
    assert states(db) == [("user", "done"), ("assistant", "done")]
    store.close()


def test_streamed_text_is_saved_at_sentence_ends_and_at_most_every_quarter_second(
    tmp_path: Path,
) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    conv = store.create()
    now = [0.0]
    reply = PendingReply(store, conv, clock=lambda: now[0])
    reply.start({"role": "user", "content": "hi"})
    row = reply.row
    assert row is not None

    def stored() -> str:
        return str(store.messages(conv, pending=True)[-1]["content"])

    list(reply.stream([Token("Hello"), Token(" there")]))
    assert reply.saves == 0 and stored() == ""
    list(reply.stream([Token(" friend.")]))  # a sentence end: saved before it is passed on
    assert reply.saves == 1 and stored() == "Hello there friend."
    list(reply.stream([Token(" More"), Token(" words")]))
    assert reply.saves == 1
    now[0] = 0.3  # a quarter of a second later, even mid-sentence
    list(reply.stream([Token(" again")]))
    assert reply.saves == 2 and stored() == "Hello there friend. More words again"
    list(reply.stream([Thinking("Let me think.")]))  # thinking is kept too
    assert store.messages(conv, pending=True)[-1]["reasoning_content"] == "Let me think."
    assert store.messages(conv)[-1]["role"] == "user"  # pending rows are not history yet
    store.close()


def _die_with_a_pending_reply(db: Path, conv: str) -> None:
    """A real process that commits a request, streams part of a reply, and is SIGKILLed."""
    code = (
        "import os, signal, sys\n"
        "from botpsy_desktop.agent.store import ConversationStore\n"
        "s = ConversationStore(sys.argv[1])\n"
        "row = s.start_turn(sys.argv[2], {'role': 'user', 'content': 'from the dead'})\n"
        "s.update(row, {'role': 'assistant', 'content': 'Half a reply.'})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(db), conv], check=False, timeout=60)
    assert done.returncode == -9


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_only_a_dead_process_pending_reply_is_marked_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite3"
    live = ConversationStore(db)
    mine, theirs = live.create(), live.create()
    live_row = live.start_turn(mine, {"role": "user", "content": "still running"})
    _die_with_a_pending_reply(db, theirs)

    reopened = ConversationStore(db)  # another process would do the same on its next start
    assert reopened.recovered == 1
    assert reopened.state(live_row) == "pending"  # its owner is alive: left alone
    dead = reopened.messages(theirs)
    assert dead[-1] == {"role": "assistant", "content": "Half a reply.", "interrupted": True}
    assert ConversationStore(db).recovered == 0  # marked once
    live.update(live_row, {"role": "assistant", "content": "Done."})
    live.finish(live_row, {"role": "assistant", "content": "Done."})
    assert reopened.messages(mine)[-1] == {"role": "assistant", "content": "Done."}
    live.close()
    reopened.close()


def test_closing_the_store_marks_its_own_unfinished_reply_interrupted(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite3"
    store = ConversationStore(db)
    conv = store.create()
    row = store.start_turn(conv, {"role": "user", "content": "hi"})
    store.update(row, {"role": "assistant", "content": "Par"})
    store.close()
    assert ConversationStore(db).messages(conv)[-1]["interrupted"] is True


class FailingBackend:
    """Streams a sentence, then fails the way a broken model does."""

    name = "failing"
    n_ctx = None

    def count_tokens(self, *_: Any, **__: Any) -> int:
        return 0

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        may_call: Any = None,
    ) -> Iterator[TextPiece | Completion]:
        yield TextPiece("It started well.", False)
        raise ModelError("The model crashed.", "Restart it.")

    def close(self) -> None:
        pass


def test_stop_error_and_a_dropped_request_keep_the_partial_reply_as_interrupted(
    tmp_path: Path,
) -> None:
    store = ConversationStore(tmp_path / "c.sqlite3")
    # Stop mid-stream
    cancel = threading.Event()
    s = session(store, ReplayBackend(["One two three. Four five six."]))
    events = []
    for event in s.run("stop me", cancel=cancel):
        events.append(event)
        if isinstance(event, Token):
            cancel.set()
    assert isinstance(events[-1], Error) and events[-1].kind == "cancelled"
    assert s.store.messages(s.conversation_id)[-1]["interrupted"] is True
    # the model fails after one sentence
    s = session(store, FailingBackend())
    events = list(s.run("fail"))
    assert isinstance(events[-1], Error) and events[-1].kind == "model"
    assert store.messages(s.conversation_id)[-1] == {
        "role": "assistant",
        "content": "It started well.",
        "interrupted": True,
    }
    # the caller drops the request mid-stream (e.g. the window closes it)
    s = session(store, ReplayBackend(["A long answer. That goes on and on."]))
    run = s.run("dropped")
    next(run)
    run.close()
    assert store.messages(s.conversation_id)[-1]["interrupted"] is True
    # stopped before anything was said: no empty reply stored, the request is still there
    s = session(store, ReplayBackend(["Never shown."]))
    stop = threading.Event()
    stop.set()
    list(s.run("too late", cancel=stop))
    assert [m["role"] for m in store.messages(s.conversation_id)] == ["user"]
    store.close()


def test_the_next_request_sees_an_interrupted_reply_as_cut_off_not_complete(
    tmp_path: Path,
) -> None:
    root = tmp_path / "files"
    root.mkdir()
    store = ConversationStore(tmp_path / "c.sqlite3")
    conv = store.create()
    row = store.start_turn(conv, {"role": "user", "content": "list it"})
    call = {"id": "c1", "type": "function", "function": {"name": "list_folder", "arguments": {}}}
    tool_row = store.finish(
        row,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        then={"role": "tool", "tool_call_id": "c1", "name": "list_folder", "content": ""},
    )
    assert tool_row is not None
    store.finish(
        tool_row,
        {"role": "tool", "tool_call_id": "c1", "name": "list_folder", "content": ""},
        interrupted=True,
    )
    row = store.start_turn(conv, {"role": "user", "content": "tell me a story"})
    store.finish(
        row,
        {"role": "assistant", "content": "Once upon", "reasoning_content": "a story"},
        interrupted=True,
    )
    row = store.start_turn(conv, {"role": "user", "content": "and?"})
    store.finish(row, {"role": "assistant", "content": ""}, interrupted=True)

    backend = ReplayBackend(["Here it is."])
    s = AgentSession(
        backend, ToolRegistry(files_tools([root])), build_gate(Config()), store, SETTINGS, conv
    )
    assert isinstance(list(s.run("again please"))[-1], Answer)
    prompt = backend.prompts[0]
    assert [m["role"] for m in prompt] == [
        "system",
        "user",
        "assistant",
        "tool",
        "user",
        "assistant",
        "user",
        "user",
    ]
    assert prompt[3]["content"] == INTERRUPTED_TOOL
    assert prompt[5] == {"role": "assistant", "content": f"Once upon\n\n{INTERRUPTED_NOTE}"}
    assert prompt_view({"role": "assistant", "content": "ok"}) == {
        "role": "assistant",
        "content": "ok",
    }
    store.close()


def _v2_database(path: Path, rows: int = 1) -> None:
    """A conversation database as schema version 2 wrote it."""
    con = sqlite3.connect(path)
    con.executescript(store_module._SCHEMA)
    con.execute("INSERT INTO conversations VALUES ('c1', 'old', 0, 0)")
    for i in range(rows):
        payload = json.dumps({"role": "user", "content": f"old message {i} " + "x" * 200})
        con.execute(
            "INSERT INTO messages (conversation_id, role, payload, created_at) "
            "VALUES ('c1', 'user', ?, 0)",
            (payload,),
        )
    con.execute("PRAGMA user_version=2")
    con.commit()
    con.close()


def test_a_migration_is_preceded_by_an_integrity_check_and_a_backup(tmp_path: Path) -> None:
    db = tmp_path / "conversations.sqlite3"
    _v2_database(db)
    store = ConversationStore(db)
    assert store.backup is not None and store.backup in list_backups(db)
    assert store.backup.name.startswith("conversations.backup-v2-")
    assert [m["content"][:13] for m in store.messages("c1")] == ["old message 0"]
    store.close()
    backup = sqlite3.connect(store.backup)
    assert backup.execute("PRAGMA user_version").fetchone()[0] == 2
    assert backup.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 1
    backup.close()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    con.close()
    again = ConversationStore(db)
    assert again.backup is None  # nothing to migrate, nothing copied
    again.close()
    fresh = ConversationStore(tmp_path / "new.sqlite3")
    assert fresh.backup is None and list_backups(tmp_path / "new.sqlite3") == []
    fresh.close()
    # only the newest few backups are kept
    con = sqlite3.connect(db)
    for _ in range(4):
        backup_before_migration(con, db, 2, keep=3)
    con.close()
    assert len(list_backups(db)) == 3


def _corrupt(path: Path) -> None:
    con = sqlite3.connect(path)
    page = con.execute("PRAGMA page_size").fetchone()[0]
    con.close()
    with path.open("r+b") as f:
        f.seek(page * 2)  # the third page: table data, not the header
        f.write(b"\xa5" * 256)


def test_a_damaged_database_is_refused_before_migrating_with_the_restore_command(
    tmp_path: Path,
) -> None:
    db = tmp_path / "conversations.sqlite3"
    _v2_database(db, rows=200)
    _corrupt(db)
    store = ConversationStore(db)  # found on open: read only, never upgraded or written
    try:
        assert store.damaged
        with pytest.raises(StoreError) as err:
            store.create()
    finally:
        store.close()
    assert "is damaged" in err.value.message and "nothing was written" in err.value.message
    # no backup exists: the advice is to move the file away, not a restore that cannot work
    assert "There is no backup" in err.value.hint and "db restore" not in err.value.hint
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone()[0] == 2  # left as it was
    con.close()
    assert list_backups(db) == []


def test_the_alarms_database_is_backed_up_before_an_upgrade_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from botpsy_desktop.adapters.alarms import service, store

    db = tmp_path / "alarms.sqlite3"
    first = service.AlarmService(db)
    assert first.alarms() == []
    first.shutdown()
    old = store.SCHEMA_VERSION
    monkeypatch.setattr(store, "SCHEMA_VERSION", old + 1)  # a new release
    upgraded = service.AlarmService(db)
    assert upgraded.alarms() == []
    upgraded.shutdown()
    assert [p.name[:16] for p in list_backups(db)] == [f"alarms.backup-v{old}"]
