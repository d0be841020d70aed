"""Conversations persisted in SQLite (WAL): every message is committed as soon as it exists."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botpsy_desktop.core.errors import StoreError

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    title TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    payload TEXT NOT NULL,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
CREATE TABLE IF NOT EXISTS tool_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    call_id TEXT NOT NULL,
    name TEXT,
    arguments TEXT NOT NULL,
    decision TEXT NOT NULL,
    ok INTEGER NOT NULL,
    result TEXT NOT NULL,
    created_at REAL NOT NULL
);
-- The audit log: every executed non-read action, kept when its conversation is deleted.
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    conversation_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    effects TEXT NOT NULL,
    approved_by TEXT NOT NULL,
    receipt TEXT NOT NULL,
    ok INTEGER NOT NULL,
    result TEXT NOT NULL,
    inverse TEXT,
    not_reversible TEXT,
    undoes INTEGER,
    undone_by INTEGER
);
"""


@dataclass(frozen=True)
class ConversationInfo:
    id: str
    title: str
    created_at: float
    updated_at: float
    message_count: int


class ConversationStore:
    """One database file; safe to share between threads (one connection behind a lock).

    WAL with ``synchronous=NORMAL``: a committed message survives the app being killed; a power
    cut may lose the last few commits but never corrupts the file.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            if str(path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.execute("PRAGMA busy_timeout=5000")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"The conversation database {self.path} was written by a newer version.",
                    "Update botpsy-desktop, or move the file away to start fresh.",
                )
            self._db.executescript(_SCHEMA)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"Cannot open the conversation database {self.path}: {exc}.",
                "Check the disk and permissions; a damaged file can be moved away to start fresh.",
            ) from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        with self._lock:
            try:
                cur = self._db.execute(sql, params)
            except sqlite3.Error as exc:
                raise StoreError(
                    f"Could not save to {self.path}: {exc}.",
                    "Check free disk space and permissions.",
                ) from exc
            return int(cur.lastrowid or 0)

    def create(self, title: str = "New conversation") -> str:
        conv_id = uuid.uuid4().hex
        now = time.time()
        self._write(
            "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
            (conv_id, title[:200], now, now),
        )
        return conv_id

    def rename(self, conversation_id: str, title: str) -> None:
        title = " ".join(title.split())[:200] or "New conversation"
        self._write("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def delete(self, conversation_id: str) -> None:
        """Delete a conversation with its messages and tool-call records."""
        self._write("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def title(self, conversation_id: str) -> str | None:
        with self._lock:
            row = self._db.execute(
                "SELECT title FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def search(self, text: str) -> list[str]:
        """Ids of conversations whose title or messages contain ``text`` (case-insensitive)."""
        like = f"%{text.lower()}%"
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT c.id FROM conversations c LEFT JOIN messages m "
                "ON m.conversation_id = c.id WHERE lower(c.title) LIKE ? "
                "OR (m.role IN ('user', 'assistant') AND lower(m.payload) LIKE ?)",
                (like, like),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def exists(self, conversation_id: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
        return row is not None

    def append(self, conversation_id: str, message: dict[str, Any]) -> int:
        """Commit one chat message (OpenAI-style dict) at the end of the conversation."""
        now = time.time()
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                cur = self._db.execute(
                    "INSERT INTO messages (conversation_id, role, payload, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (
                        conversation_id,
                        message["role"],
                        json.dumps(message, ensure_ascii=False),
                        now,
                    ),
                )
                self._db.execute(
                    "UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)
                )
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise StoreError(
                    f"Could not save a message to {self.path}: {exc}.",
                    "Check free disk space and permissions.",
                ) from exc
            return int(cur.lastrowid or 0)

    def messages(self, conversation_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT payload FROM messages WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    def record_tool_call(
        self,
        conversation_id: str,
        *,
        call_id: str,
        name: str | None,
        arguments: dict[str, Any],
        decision: str,
        ok: bool,
        result: str,
    ) -> None:
        self._write(
            "INSERT INTO tool_calls (conversation_id, call_id, name, arguments, decision, ok, "
            "result, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                conversation_id,
                call_id,
                name,
                json.dumps(arguments, ensure_ascii=False, default=str),
                decision,
                int(ok),
                result,
                time.time(),
            ),
        )

    def tool_calls(self, conversation_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT call_id, name, arguments, decision, ok, result FROM tool_calls "
                "WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            ).fetchall()
        return [
            {
                "call_id": r[0],
                "name": r[1],
                "arguments": json.loads(r[2]),
                "decision": r[3],
                "ok": bool(r[4]),
                "result": r[5],
            }
            for r in rows
        ]

    def conversations(self) -> list[ConversationInfo]:
        with self._lock:
            rows = self._db.execute(
                "SELECT c.id, c.title, c.created_at, c.updated_at, COUNT(m.id) "
                "FROM conversations c LEFT JOIN messages m ON m.conversation_id = c.id "
                "GROUP BY c.id "
                "ORDER BY c.updated_at DESC"
            ).fetchall()
        return [ConversationInfo(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def journal_mode(self) -> str:
        with self._lock:
            return str(self._db.execute("PRAGMA journal_mode").fetchone()[0])

    # --- the audit log (agent/audit.py reads and writes it) ---------------------------------

    def record_action(
        self,
        *,
        conversation_id: str,
        call_id: str,
        tool: str,
        arguments: dict[str, Any],
        effects: list[str],
        approved_by: str,
        receipt: str,
        ok: bool,
        result: str,
        inverse: dict[str, Any] | None,
        not_reversible: str | None = None,
        undoes: int | None = None,
    ) -> int:
        """Append one executed action; returns its id. Entries are never rewritten, except
        that :meth:`mark_undone` notes which later entry reversed one."""
        return self._write(
            "INSERT INTO actions (at, conversation_id, call_id, tool, arguments, effects, "
            "approved_by, receipt, ok, result, inverse, not_reversible, undoes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                time.time(),
                conversation_id,
                call_id,
                tool,
                json.dumps(arguments, ensure_ascii=False, default=str),
                json.dumps(effects),
                approved_by,
                receipt,
                int(ok),
                result,
                None if inverse is None else json.dumps(inverse, ensure_ascii=False),
                not_reversible,
                undoes,
            ),
        )

    def mark_undone(self, action_id: int, by: int) -> None:
        self._write(
            "UPDATE actions SET undone_by = ? WHERE id = ? AND undone_by IS NULL", (by, action_id)
        )

    def actions(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Audit log entries, newest first."""
        sql = (
            "SELECT id, at, conversation_id, call_id, tool, arguments, effects, approved_by, "
            "receipt, ok, result, inverse, not_reversible, undoes, undone_by FROM actions "
            "ORDER BY id DESC"
        )
        params: tuple[Any, ...] = ()
        if limit is not None:
            sql += " LIMIT ?"
            params = (limit,)
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [
            {
                "id": r[0],
                "at": r[1],
                "conversation_id": r[2],
                "call_id": r[3],
                "tool": r[4],
                "arguments": json.loads(r[5]),
                "effects": json.loads(r[6]),
                "approved_by": r[7],
                "receipt": r[8],
                "ok": bool(r[9]),
                "result": r[10],
                "inverse": None if r[11] is None else json.loads(r[11]),
                "not_reversible": r[12],
                "undoes": r[13],
                "undone_by": r[14],
            }
            for r in rows
        ]
