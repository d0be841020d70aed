"""Conversations persisted in SQLite (WAL): every message is committed as soon as it exists."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botpsy_desktop.agent.owners import OwnerLock, WriterLock
from botpsy_desktop.core.dbsafety import (
    backup_before_migration,
    integrity_errors,
    is_damage,
    keep_recent_backup,
    restore_hint,
    write_failure,
)
from botpsy_desktop.core.errors import StoreError
from botpsy_desktop.core.text import readable

SCHEMA_VERSION = 3
# 3: messages.state ('done', 'pending': being written by its owner process, 'interrupted': its
#    owner died or stopped before finishing it) and messages.owner (see agent/owners.py)

UNCONFIRMED = "Started; how it ended was never recorded (the app could not save it)."
"""The result of an audit entry written before its action ran, until it is completed."""
UNDOING = 0
"""``undone_by`` of an entry while an undo has claimed it (entry ids start at 1)."""

INTERRUPTED_NOTE = "[This reply was cut off before it was finished.]"
"""How an interrupted partial reply appears in the prompt: its text, then this note."""
INTERRUPTED_TOOL = (
    "The app stopped before this tool call finished, so whether it ran is unknown. "
    "Check its effect before running it again."
)
"""The tool result the model reads for a call that was interrupted while it ran."""

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
-- Per-conversation settings (e.g. "think"): JSON values, gone with their conversation.
-- A new table only, so it needs no schema version of its own: older versions ignore it.
CREATE TABLE IF NOT EXISTS conversation_settings (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (conversation_id, key)
);
"""


_SURROGATE = re.compile("[\ud800-\udfff]")


def _dumps(value: Any, **kwargs: Any) -> str:
    """JSON for a column: non-ASCII kept as it is, a lone surrogate (a file name's byte that is
    not UTF-8, core/text.py) as a ``\\udce9`` escape, so that it is stored and read back
    unchanged instead of failing the write."""
    text = json.dumps(value, ensure_ascii=False, **kwargs)
    if _SURROGATE.search(text):
        text = _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def prompt_view(message: dict[str, Any]) -> dict[str, Any] | None:
    """How a stored message goes into the prompt (None: left out).

    An interrupted reply is never passed off as complete: its partial text is kept with
    :data:`INTERRUPTED_NOTE` after it (its thinking dropped), and one that had not said anything
    yet is left out. An interrupted tool call gets :data:`INTERRUPTED_TOOL` as its result, so no
    call is left unanswered.
    """
    if not message.get("interrupted"):
        return message
    message = {k: v for k, v in message.items() if k != "interrupted"}
    if message.get("role") == "tool":
        return {**message, "content": str(message.get("content") or INTERRUPTED_TOOL)}
    if message.get("role") != "assistant":
        return message
    text = str(message.get("content") or "").strip()
    if not text and not message.get("tool_calls"):
        return None
    message.pop("reasoning_content", None)
    message["content"] = f"{text}\n\n{INTERRUPTED_NOTE}".strip()
    return message


def prompt_history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored messages as the prompt shows them (see :func:`prompt_view`)."""
    return [v for v in map(prompt_view, messages) if v is not None]


def _first(rows: list[Any]) -> Any:
    return rows[0] if rows else None


def _bindable(params: tuple[Any, ...]) -> tuple[Any, ...]:
    """Parameters SQLite can store: a lone surrogate in text becomes a readable escape."""
    return tuple(readable(p) if isinstance(p, str) else p for p in params)


@dataclass(frozen=True)
class ConversationInfo:
    id: str
    title: str
    created_at: float
    updated_at: float
    message_count: int


class ConversationStore:
    """One database file; safe to share between threads (one connection behind a lock).

    WAL mode. Commits are ``synchronous=FULL`` (the WAL is flushed to disk: a committed user
    message, finished reply, tool result or audit entry survives a power cut), except the
    progress updates of a reply being streamed, which are ``NORMAL`` (they survive the app being
    killed; a power cut may lose the text streamed since the last FULL commit). Neither a kill
    nor a power cut corrupts the file.

    A reply is a *pending* row from the moment the user's message is committed: updated as the
    text streams (:meth:`update`), finished by :meth:`finish`. Pending rows belong to this
    store's owner lock; when a store is opened, pending rows whose owner process is gone are
    marked interrupted (a running process's rows are left alone).
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        memory = str(path) == ":memory:"
        self._memory = memory
        try:
            self._owner = OwnerLock(None if memory else self.path)
        except OSError as exc:
            raise StoreError(
                f"Cannot use the folder of the conversation database {self.path}: {exc}.",
                "Check the disk and permissions of that folder.",
            ) from exc
        try:
            if not memory:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            existed = not memory and self.path.exists() and self.path.stat().st_size > 0
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA busy_timeout=5000")
            # a damaged file is found before anything is written to it (quick_check reads
            # every page: milliseconds at the size a conversation database has)
            problems = integrity_errors(self._db, quick=True) if existed else []
            if problems:
                self._refuse_writes(problems)
                return
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"The conversation database {self.path} was written by a newer version.",
                    "Update botpsy-desktop, or move the file away to start fresh.",
                )
            if 0 < version < SCHEMA_VERSION and not memory:
                self.backup = backup_before_migration(self._db, self.path, version)
            self._db.executescript(_SCHEMA)
            self._migrate()
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self.recovered = self._recover()
            if existed and self.backup is None and self._has_history():
                self._backing_up = keep_recent_backup(self.path, SCHEMA_VERSION)
        except sqlite3.DatabaseError as exc:
            if is_damage(exc) and getattr(self, "_db", None) is not None:
                self._refuse_writes([str(exc)])
                return
            self._abandon()
            raise StoreError(
                f"Cannot open the conversation database {self.path}: {exc}.",
                "Check the disk and permissions. " + restore_hint(self.path),
            ) from exc
        except BaseException:
            self._abandon()
            raise

    backup: Path | None = None
    """The copy made before this open upgraded the file's schema (None: no upgrade)."""
    recovered: int = 0
    """Pending rows of dead processes this open marked interrupted."""
    _backing_up: threading.Thread | None = None
    damaged: tuple[str, ...] = ()
    """What the integrity check found wrong with the file (empty: healthy). A damaged file is
    only read, never written: every write raises StoreError saying how to restore it."""

    def _refuse_writes(self, problems: list[str]) -> None:
        """Keep the damaged file as it is: reads go on where they can, writes are refused."""
        self.damaged = tuple(problems) or ("the file is damaged",)
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("PRAGMA query_only=ON")

    def damage_error(self, what: str = "nothing") -> StoreError:
        """The error for a write refused because the file is damaged."""
        shown = "; ".join(self.damaged[:2]) + (" ..." if len(self.damaged) > 2 else "")
        return StoreError(
            f"The conversation database {self.path} is damaged (integrity check: {shown}); "
            f"{what} was written to it, and nothing will be until it is repaired.",
            restore_hint(self.path),
        )

    def _has_history(self) -> bool:
        row = self._db.execute(
            "SELECT EXISTS (SELECT 1 FROM messages) OR EXISTS (SELECT 1 FROM actions)"
        ).fetchone()
        return bool(row[0])

    def _abandon(self) -> None:
        if getattr(self, "_db", None) is not None:
            self._db.close()
        self._owner.release()

    def _migrate(self) -> None:
        """Add the columns of schema 3 (idempotent; one process at a time)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            columns = {r[1] for r in self._db.execute("PRAGMA table_info(messages)")}
            if "state" not in columns:
                self._db.execute(
                    "ALTER TABLE messages ADD COLUMN state TEXT NOT NULL DEFAULT 'done'"
                )
            if "owner" not in columns:
                self._db.execute("ALTER TABLE messages ADD COLUMN owner TEXT")
            self._db.execute(
                "CREATE INDEX IF NOT EXISTS messages_pending ON messages(state) "
                "WHERE state = 'pending'"
            )
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def _recover(self) -> int:
        """Mark interrupted the pending rows whose owner process has died; returns how many."""
        owners = [
            str(r[0])
            for r in self._db.execute(
                "SELECT DISTINCT owner FROM messages WHERE state = 'pending'"
            ).fetchall()
            if r[0] != self._owner.token
        ]
        marked = 0
        for owner in owners:
            with self._owner.if_dead(owner) as dead:
                if dead:
                    cur = self._db.execute(
                        "UPDATE messages SET state = 'interrupted' "
                        "WHERE state = 'pending' AND owner IS ?",
                        (owner,),
                    )
                    marked += cur.rowcount
        return marked

    def close(self) -> None:
        """Close the file; this store's unfinished replies are marked interrupted first."""
        with self._lock:
            with contextlib.suppress(sqlite3.Error):  # closing anyway: the next open marks them
                self._db.execute(
                    "UPDATE messages SET state = 'interrupted' WHERE state = 'pending' "
                    "AND owner = ?",
                    (self._owner.token,),
                )
            self._db.close()
            self._owner.release()
        if self._backing_up is not None:  # a copy this open started: let it finish
            self._backing_up.join(timeout=60)

    # --- replies written as they stream ---------------------------------------------------

    def _commit(self, steps: list[tuple[str, tuple[Any, ...]]], *, durable: bool = True) -> int:
        """Run ``steps`` in one transaction; returns the last statement's lastrowid.

        All or nothing: on any failure (a full disk, a value SQLite cannot take) the
        transaction is rolled back, so no lock is left held for the next write.
        """
        with self._lock:
            if self.damaged:
                raise self.damage_error()
            last = 0
            try:
                if not durable:
                    self._db.execute("PRAGMA synchronous=NORMAL")
                self._db.execute("BEGIN IMMEDIATE")
                for sql, params in steps:
                    cur = self._db.execute(sql, _bindable(params))
                    if sql.startswith("INSERT"):
                        last = int(cur.lastrowid or 0)
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise self._failure(exc, "a message") from exc
            except BaseException:
                self._rollback()
                raise
            finally:
                if not durable:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("PRAGMA synchronous=FULL")
            return last

    def _rollback(self) -> None:
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back itself
                self._db.execute("ROLLBACK")

    def _failure(self, exc: sqlite3.Error, what: str) -> StoreError:
        """The StoreError for a failed write; a damaged file is written no more."""
        if is_damage(exc):
            self._refuse_writes([str(exc)])
        return write_failure(self.path, exc, what)

    def _read(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Rows of a query; a damaged page is a StoreError that says how to restore."""
        with self._lock:
            try:
                return self._db.execute(sql, _bindable(params)).fetchall()
            except sqlite3.DatabaseError as exc:
                if is_damage(exc):
                    self._refuse_writes([str(exc)])
                    raise StoreError(
                        f"The conversation database {self.path} is damaged ({exc}).",
                        restore_hint(self.path),
                    ) from exc
                raise StoreError(
                    f"Could not read the conversation database {self.path}: {exc}.",
                    "Try again; if it keeps happening, run `botpsy doctor`.",
                ) from exc

    def _insert(
        self, conversation_id: str, message: dict[str, Any], state: str
    ) -> list[tuple[str, tuple[Any, ...]]]:
        now = time.time()
        return [
            (
                "INSERT INTO messages (conversation_id, role, payload, created_at, state, owner) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    message["role"],
                    _dumps(message),
                    now,
                    state,
                    self._owner.token if state == "pending" else None,
                ),
            ),
            ("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)),
        ]

    def start_turn(self, conversation_id: str, user: dict[str, Any]) -> int:
        """Commit the user's message (durably) and open a pending reply row after it, together.

        Returns the pending row's id, for :meth:`update` and :meth:`finish`.
        """
        return self._commit(
            self._insert(conversation_id, user, "done")[:1]
            + self._insert(conversation_id, {"role": "assistant", "content": ""}, "pending")
        )

    def update(self, row_id: int, message: dict[str, Any]) -> None:
        """Save the progress of a pending row (cheap: not flushed to disk at once)."""
        self._commit(
            [
                (
                    "UPDATE messages SET payload = ? WHERE id = ? AND state = 'pending'",
                    (_dumps(message), row_id),
                )
            ],
            durable=False,
        )

    def finish(
        self,
        row_id: int,
        message: dict[str, Any] | None,
        *,
        interrupted: bool = False,
        then: dict[str, Any] | None = None,
    ) -> int | None:
        """End a pending row with its final ``message`` (None: remove it, nothing was said).

        ``interrupted`` keeps it marked as cut off (stopped, failed). ``then`` opens the next
        pending row (the next tool call or model turn) in the same transaction, so there is no
        moment without one while the request runs; its id is returned.
        """
        row = self._db_row_conversation(row_id)
        if message is None:
            steps: list[tuple[str, tuple[Any, ...]]] = [
                ("DELETE FROM messages WHERE id = ? AND state = 'pending'", (row_id,))
            ]
        else:
            steps = [
                (
                    "UPDATE messages SET payload = ?, state = ?, owner = NULL "
                    "WHERE id = ? AND state = 'pending'",
                    (
                        _dumps(message),
                        "interrupted" if interrupted else "done",
                        row_id,
                    ),
                )
            ]
        if then is not None and row is not None:
            steps += self._insert(row, then, "pending")
        last = self._commit(steps)
        return last if then is not None and row is not None else None

    def _db_row_conversation(self, row_id: int) -> str | None:
        found = _first(self._read("SELECT conversation_id FROM messages WHERE id = ?", (row_id,)))
        return None if found is None else str(found[0])

    def state(self, row_id: int) -> str | None:
        """A message row's state: 'done', 'pending', 'interrupted' (None: no such row)."""
        found = _first(self._read("SELECT state FROM messages WHERE id = ?", (row_id,)))
        return None if found is None else str(found[0])

    def _write(self, sql: str, params: tuple[Any, ...], what: str = "the change") -> int:
        """Run one statement (its own transaction); returns its lastrowid."""
        return self._execute(sql, params, what)[0]

    def _execute(self, sql: str, params: tuple[Any, ...], what: str) -> tuple[int, int]:
        """Run one statement (its own transaction); returns its lastrowid and rowcount."""
        with self._lock:
            if self.damaged:
                raise self.damage_error()
            try:
                cur = self._db.execute(sql, _bindable(params))
            except sqlite3.Error as exc:
                self._rollback()
                raise self._failure(exc, what) from exc
            except BaseException:
                self._rollback()
                raise
            return int(cur.lastrowid or 0), int(cur.rowcount)

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
        if self._memory is False:
            with contextlib.suppress(OSError):
                (
                    self.path.with_name(self.path.name + ".writers") / f"{conversation_id}.lock"
                ).unlink()

    def writer(self, conversation_id: str) -> WriterLock:
        """The lock a request holds while it writes ``conversation_id`` (agent/owners.py)."""
        return WriterLock(None if self._memory else self.path, conversation_id)

    def title(self, conversation_id: str) -> str | None:
        row = _first(self._read("SELECT title FROM conversations WHERE id = ?", (conversation_id,)))
        return None if row is None else str(row[0])

    def search(self, text: str) -> list[str]:
        """Ids of conversations whose title or messages contain ``text`` (case-insensitive)."""
        like = f"%{text.lower()}%"
        rows = self._read(
            "SELECT DISTINCT c.id FROM conversations c LEFT JOIN messages m "
            "ON m.conversation_id = c.id WHERE lower(c.title) LIKE ? "
            "OR (m.role IN ('user', 'assistant') AND lower(m.payload) LIKE ?)",
            (like, like),
        )
        return [str(r[0]) for r in rows]

    def exists(self, conversation_id: str) -> bool:
        row = _first(self._read("SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)))
        return row is not None

    def append(self, conversation_id: str, message: dict[str, Any]) -> int:
        """Commit one chat message (OpenAI-style dict) at the end of the conversation."""
        now = time.time()
        return self._commit(
            [
                (
                    "INSERT INTO messages (conversation_id, role, payload, created_at) "
                    "VALUES (?, ?, ?, ?)",
                    (
                        conversation_id,
                        message["role"],
                        _dumps(message),
                        now,
                    ),
                ),
                ("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, conversation_id)),
            ]
        )

    def messages(self, conversation_id: str, *, pending: bool = False) -> list[dict[str, Any]]:
        """The conversation's messages in order. An interrupted one carries ``interrupted:
        True``; rows still being written are left out unless ``pending`` (then ``pending:
        True``)."""
        rows = self._read(
            "SELECT payload, state FROM messages WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        )
        out = []
        for payload, state in rows:
            if state == "pending" and not pending:
                continue
            message = json.loads(payload)
            if state in ("interrupted", "pending"):
                message[state] = True
            out.append(message)
        return out

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
                _dumps(arguments, default=str),
                decision,
                int(ok),
                result,
                time.time(),
            ),
        )

    def tool_calls(self, conversation_id: str) -> list[dict[str, Any]]:
        rows = self._read(
            "SELECT call_id, name, arguments, decision, ok, result FROM tool_calls "
            "WHERE conversation_id = ? ORDER BY id",
            (conversation_id,),
        )
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
        rows = self._read(
            "SELECT c.id, c.title, c.created_at, c.updated_at, COUNT(m.id) "
            "FROM conversations c LEFT JOIN messages m ON m.conversation_id = c.id "
            "GROUP BY c.id "
            "ORDER BY c.updated_at DESC"
        )
        return [ConversationInfo(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def journal_mode(self) -> str:
        return str(self._read("PRAGMA journal_mode")[0][0])

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
                _dumps(arguments, default=str),
                json.dumps(effects),
                approved_by,
                receipt,
                int(ok),
                result,
                None if inverse is None else _dumps(inverse),
                not_reversible,
                undoes,
            ),
        )

    def complete_action(
        self,
        action_id: int,
        *,
        ok: bool,
        result: str,
        inverse: dict[str, Any] | None,
        not_reversible: str | None,
    ) -> None:
        """Record how an action begun with :meth:`record_action` (``ok`` False, result
        :data:`UNCONFIRMED`) ended. Raises StoreError if that cannot be written (the entry
        then stays unconfirmed: the action is logged, its outcome is not)."""
        self._write(
            "UPDATE actions SET ok = ?, result = ?, inverse = ?, not_reversible = ? "
            "WHERE id = ? AND result = ?",
            (
                int(ok),
                result,
                None if inverse is None else _dumps(inverse),
                not_reversible,
                action_id,
                UNCONFIRMED,
            ),
            what=f"how action #{action_id} ended",
        )

    def claim_undo(self, action_id: int) -> bool:
        """Mark entry ``action_id`` as being undone, atomically: True for exactly one caller
        (across threads and processes) while it is not undone or being undone."""
        _, changed = self._execute(
            "UPDATE actions SET undone_by = ? WHERE id = ? AND undone_by IS NULL",
            (UNDOING, action_id),
            what=f"the start of undoing action #{action_id}",
        )
        return changed == 1

    def release_undo(self, action_id: int) -> None:
        """Give back a claim from :meth:`claim_undo` whose undo did not happen."""
        self._write(
            "UPDATE actions SET undone_by = NULL WHERE id = ? AND undone_by = ?",
            (action_id, UNDOING),
        )

    def mark_undone(self, action_id: int, by: int) -> None:
        self._write(
            "UPDATE actions SET undone_by = ? WHERE id = ? AND (undone_by IS NULL "
            "OR undone_by = ?)",
            (by, action_id, UNDOING),
        )

    def changes_of_calls(self, conversation_id: str, call_ids: Sequence[str]) -> int:
        """How many of these calls of ``conversation_id`` made a change: audit entries that
        succeeded, or whose end was never recorded (:data:`UNCONFIRMED`)."""
        wanted = list(dict.fromkeys(call_ids))
        if not wanted:
            return 0
        marks = ", ".join("?" for _ in wanted)
        rows = self._read(
            f"SELECT COUNT(*) FROM actions WHERE conversation_id = ? AND call_id IN ({marks}) "
            "AND (ok = 1 OR result = ?)",
            (conversation_id, *wanted, UNCONFIRMED),
        )
        return int(rows[0][0]) if rows else 0

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
        rows = self._read(sql, params)
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

    def setting(self, conversation_id: str, key: str, default: Any = None) -> Any:
        """A per-conversation setting (e.g. "think"), or ``default`` if it was never set."""
        row = _first(
            self._read(
                "SELECT value FROM conversation_settings WHERE conversation_id = ? AND key = ?",
                (conversation_id, key),
            )
        )
        return default if row is None else json.loads(row[0])

    def set_setting(self, conversation_id: str, key: str, value: Any) -> None:
        """Keep ``value`` (JSON) with the conversation; unknown conversations are an error."""
        if not self.exists(conversation_id):
            raise StoreError(
                f"There is no conversation {conversation_id}.",
                "Open or create the conversation first.",
            )
        self._write(
            "INSERT INTO conversation_settings (conversation_id, key, value) VALUES (?, ?, ?) "
            "ON CONFLICT(conversation_id, key) DO UPDATE SET value = excluded.value",
            (conversation_id, key, json.dumps(value)),
        )

    # --- parked background runs (agent/approvals.py keeps their queue) -----------------------

    @property
    def owner_token(self) -> str:
        """The token naming this open store (its process) as the owner of what it writes."""
        return self._owner.token

    def owner_gone(self, token: str) -> bool:
        """Whether the store (process) that ``token`` names is closed or dead."""
        if token == self._owner.token:
            return False
        with self._owner.if_dead(token) as dead:
            return dead

    def reopen_tool_row(self, conversation_id: str, call_id: str) -> int | None:
        """Make the empty result row of tool call ``call_id`` pending again, owned here, for a
        parked run that goes on after its process ended (the row was left pending or marked
        interrupted); returns its id, or None if the call has a result already."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, payload, state FROM messages WHERE conversation_id = ? "
                "AND role = 'tool' ORDER BY id DESC",
                (conversation_id,),
            ).fetchall()
        for row_id, payload, state in rows:
            message = json.loads(payload)
            if message.get("tool_call_id") != call_id:
                continue
            if state == "done" or message.get("content"):
                return None
            self._commit(
                [
                    (
                        "UPDATE messages SET state = 'pending', owner = ? WHERE id = ? "
                        "AND state = ?",
                        (self._owner.token, row_id, state),
                    )
                ]
            )
            return int(row_id) if self.state(int(row_id)) == "pending" else None
        return None
