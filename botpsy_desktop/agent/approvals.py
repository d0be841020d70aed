"""The stored queue of approvals that parked background runs wait for, shared by every process.

A routine that needs an approval parks (agent/scheduler.py). Its approval request is kept here,
in the profile's conversation database: the call, its receipt, which routine asked and when,
and its deadline. The run's conversation is in the same database up to that call, so the run
survives its process: after a restart of the window or ``botpsy daemon`` a process that can
run routines adopts the parked runs whose process has ended (atomically: one process wins) and
goes on with them once they are decided (``AgentSession.resume``); one whose deadline passed
ends with a sentence in its conversation and a notification, never with an action
(:func:`end_expired`).

Every face decides through the same rows: the window's queue, a notification's buttons and
``botpsy approvals approve ID`` all move a row from ``waiting`` to ``decided`` with one
conditional update, so the first decision wins and the others are told it was decided. The
process running the run hears decisions made elsewhere by polling the table (a cheap query,
once a second), and takes a decision (``decided`` -> ``taken``) right before the call runs, so
an approved call runs once even if two processes hold the run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from botpsy_desktop.agent.events import ApprovalRequest
from botpsy_desktop.agent.gate import ApprovalInbox
from botpsy_desktop.agent.steps.parked import (
    NOBODY_IN_TIME,
    NOT_RUN_AFTER_GIVING_UP,
    Decided,
    gave_up_sentence,
    parked_turn,
)
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.dbsafety import is_damage
from botpsy_desktop.core.errors import BotpsyError, StoreError

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS parked_approvals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    arguments TEXT NOT NULL,
    digest TEXT NOT NULL,
    request TEXT NOT NULL,
    routine_id INTEGER,
    routine_request TEXT,
    routine_due REAL,
    origin TEXT,
    think INTEGER NOT NULL DEFAULT 0,
    asked_at REAL NOT NULL,
    deadline REAL,
    state TEXT NOT NULL,
    decision TEXT,
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at REAL,
    edited TEXT,
    taken_at REAL,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS parked_approvals_open ON parked_approvals(state)
    WHERE state != 'taken';
"""
# state: 'waiting' (for a decision), 'decided' (decision: approved, denied or expired; the run
# has not taken it yet) or 'taken' (the run went on with it). owner: the store token
# (agent/owners.py) of the process holding the run.

State = Literal["waiting", "decided", "taken"]


@dataclass(frozen=True)
class RoutineInfo:
    """Who asked: the routine (its alarm id and request) and when it was due."""

    id: int
    request: str
    due: datetime
    origin: str | None = None


@dataclass(frozen=True)
class StoredApproval:
    """One row of the queue: the call, its receipt, who asked and when, its deadline, and how it
    was decided (``decision``: "approved", "denied" or "expired"; None while it waits)."""

    id: int
    conversation_id: str
    call_id: str
    tool: str
    arguments: dict[str, Any]
    digest: str
    summary: str
    receipt: str
    lines: list[str]
    reasons: list[str]
    details: str
    effects: list[str]
    tier: str
    sources: list[str]
    effect: str
    """What the receipt showed the call acts on (agent/gate.py ``Resolution.digest``)."""
    routine_id: int | None
    routine_request: str | None
    routine_due: float | None
    origin: str | None
    think: bool
    asked_at: float
    deadline: float | None
    state: State
    decision: str | None
    decided_by: str
    decided_at: float | None
    edited: dict[str, Any] | None
    taken_at: float | None
    owner: str | None

    def request(self) -> ApprovalRequest:
        """The approval request as the window's queue shows it (a copy; deciding it decides
        the row through its recorder, see :meth:`ApprovalQueue.mirror`)."""
        return ApprovalRequest(
            self.call_id,
            self.tool,
            self.arguments,
            self.receipt,
            self.effects,
            lines=self.lines,
            reasons=self.reasons,
            background=True,
            summary=self.summary,
            details=self.details,
            tier=self.tier,
            sources=self.sources,
            effect=self.effect,
        )

    def decided(self) -> Decided:
        """The decision as the resumed run reads it (expired: denied by nobody in time)."""
        return Decided(
            self.decision == "approved",
            NOBODY_IN_TIME if self.decision == "expired" else self.decided_by,
            self.digest,
            self.edited,
            self.effect,
        )

    def asker(self) -> str:
        """Who asked, in words: "routine 3 “Cancel all my alarms”" or "a background run"."""
        if self.routine_id is None:
            return "a background run"
        return f"routine {self.routine_id} “{self.routine_request or ''}”"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "decision": self.decision,
            "decided_by": self.decided_by,
            "tool": self.tool,
            "arguments": self.arguments,
            "summary": self.summary,
            "receipt": self.receipt,
            "details": self.details,
            "tier": self.tier,
            "conversation": self.conversation_id,
            "routine": None
            if self.routine_id is None
            else {"id": self.routine_id, "request": self.routine_request, "due": self.routine_due},
            "asked_at": self.asked_at,
            "deadline": self.deadline,
        }


Listener = Callable[[StoredApproval], None]


class ApprovalQueue:
    """The ``parked_approvals`` table of one profile's conversation database, for one process.

    ``store`` is this process's conversation store (its owner token names the process);
    ``inbox`` (the gate's) shows the requests this process does not run itself, so that the
    window's queue lists every waiting approval, whichever process asked. Call :meth:`watch`
    to hear decisions made elsewhere and (with ``adopt``) take over the runs of ended
    processes.
    """

    def __init__(
        self,
        store: ConversationStore,
        *,
        inbox: ApprovalInbox | None = None,
        clock: Callable[[], float] = time.time,
        poll_s: float = 1.0,
    ) -> None:
        self.store = store
        self.inbox = inbox
        self.clock = clock
        self.poll_s = poll_s
        self.me = store.owner_token
        self._lock = threading.RLock()
        # the same file as the store, so the same verdict: when the store's integrity check
        # (core/dbsafety.py) found it damaged, this connection only reads (query_only) and
        # creates nothing; every write says so (see _writable)
        self._db = sqlite3.connect(str(store.path), check_same_thread=False, isolation_level=None)
        try:
            self._db.execute("PRAGMA busy_timeout=5000")
            if store.damaged:
                self._db.execute("PRAGMA query_only=ON")
            else:
                self._db.execute("PRAGMA synchronous=FULL")
                self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                self._db.close()
                raise StoreError(
                    f"Cannot open the approvals in {store.path}: {exc}.",
                    "Check the disk and permissions.",
                ) from exc
            store.refuse_writes([str(exc)])
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("PRAGMA query_only=ON")
        self._live: dict[int, ApprovalRequest] = {}  # parked here, the run's own request
        self._mirrors: dict[int, ApprovalRequest] = {}  # held here without a run, or elsewhere
        self.arrived: list[Listener] = []
        """Called with each approval this process now waits for (parked or adopted)."""
        self.left: list[Listener] = []
        """Called when one of those is no longer waiting (decided anywhere, or expired)."""
        self.on_adopted: Callable[[StoredApproval], None] | None = None
        """With :meth:`watch` (``adopt=True``): called with each decided (or expired) run this
        process holds without a run in memory, to go on with it (or end it)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.adopt = False
        """Take over the parked runs of ended processes (set by :meth:`watch`)."""
        self._handed: set[int] = set()  # decided runs handed on to on_adopted
        self._announced: set[int] = set()  # rows the arrived listeners heard of, not yet left

    # -- rows -----------------------------------------------------------------------------------
    def _rows(self, where: str = "1", params: tuple[Any, ...] = ()) -> list[StoredApproval]:
        with self._lock:
            try:
                cur = self._db.execute(
                    f"SELECT * FROM parked_approvals WHERE {where} ORDER BY id", params
                )
                names = [d[0] for d in cur.description]
                rows = cur.fetchall()
            except sqlite3.DatabaseError as exc:
                if self.store.damaged and "no such table" in str(exc):
                    return []  # never created in the damaged file: nothing was parked
                if is_damage(exc):
                    self.store.refuse_writes([str(exc)])
                    raise self.store.damage_error("nothing") from exc
                raise StoreError(
                    f"Could not read the approvals in {self.store.path}: {exc}.",
                    "Try again; if it keeps happening, run `botpsy doctor`.",
                ) from exc
        return [_stored(dict(zip(names, r, strict=True))) for r in rows]

    def _writable(self, what: str) -> None:
        """Refuse a write into a file the store found damaged (nothing is written to it)."""
        if self.store.damaged:
            raise self.store.damage_error(what)

    def get(self, approval_id: int) -> StoredApproval | None:
        found = self._rows("id = ?", (approval_id,))
        return found[0] if found else None

    def waiting(self) -> list[StoredApproval]:
        """Every approval waiting for a decision, oldest first."""
        return self._rows("state = 'waiting'")

    def recent(self, limit: int = 20) -> list[StoredApproval]:
        """The latest approvals, waiting or not, oldest first."""
        return self._rows("id > (SELECT COALESCE(MAX(id), 0) FROM parked_approvals) - ?", (limit,))

    def _update(self, sql: str, params: tuple[Any, ...]) -> int:
        with self._lock:
            self._writable("no decision")
            try:
                return int(self._db.execute(sql, params).rowcount)
            except sqlite3.Error as exc:
                if is_damage(exc):
                    self.store.refuse_writes([str(exc)])
                    raise self.store.damage_error("no decision") from exc
                raise StoreError(
                    f"Could not save an approval to {self.store.path}: {exc}.",
                    "Check free disk space and permissions.",
                ) from exc

    # -- parking --------------------------------------------------------------------------------
    def park(
        self,
        request: ApprovalRequest,
        *,
        conversation_id: str,
        routine: RoutineInfo | None,
        timeout_s: float | None,
        think: bool,
    ) -> StoredApproval:
        """Keep ``request`` (a background run's, just asked) with who asked and its deadline;
        from now on deciding it anywhere decides the row first (its recorder)."""
        now = self.clock()
        body = {
            "summary": request.summary,
            "receipt": request.receipt,
            "lines": request.lines,
            "reasons": request.reasons,
            "details": request.details,
            "effects": request.effects,
            "tier": request.tier,
            "sources": request.sources,
            "effect": request.effect,
        }
        with self._lock:
            self._writable("no approval request")
            cur = self._db.execute(
                "INSERT INTO parked_approvals (conversation_id, call_id, tool, arguments, digest, "
                "request, routine_id, routine_request, routine_due, origin, think, asked_at, "
                "deadline, state, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "'waiting', ?)",
                (
                    conversation_id,
                    request.call_id,
                    request.tool,
                    json.dumps(request.arguments, ensure_ascii=False, default=str),
                    request.digest,
                    json.dumps(body, ensure_ascii=False),
                    None if routine is None else routine.id,
                    None if routine is None else routine.request,
                    None if routine is None else routine.due.timestamp(),
                    None if routine is None else routine.origin,
                    int(think),
                    now,
                    None if timeout_s is None else now + timeout_s,
                    self.me,
                ),
            )
            approval_id = int(cur.lastrowid or 0)
            self._live[approval_id] = request
        request.recorder = lambda ok, by, edited: self._record(approval_id, ok, by, edited)
        stored = self.get(approval_id)
        assert stored is not None
        self._arrive(stored)
        return stored

    def _arrive(self, stored: StoredApproval) -> None:
        with self._lock:
            self._announced.add(stored.id)
        self._tell(self.arrived, stored)

    def _leave(self, approval_id: int) -> None:
        """Tell the listeners once that an announced approval no longer waits."""
        with self._lock:
            if approval_id not in self._announced:
                return
            self._announced.discard(approval_id)
        stored = self.get(approval_id)
        if stored is not None:
            self._tell(self.left, stored)

    def _record(
        self, approval_id: int, approved: bool, by: str, edited: dict[str, Any] | None
    ) -> bool:
        """Decide a waiting row (first decision wins); False if it no longer waits."""
        now = self.clock()
        changed = self._update(
            "UPDATE parked_approvals SET state = 'decided', decision = ?, decided_by = ?, "
            "decided_at = ?, edited = ? WHERE id = ? AND state = 'waiting' "
            "AND (deadline IS NULL OR deadline > ?)",
            (
                "approved" if approved else "denied",
                by,
                now,
                None if edited is None else json.dumps(edited, ensure_ascii=False),
                approval_id,
                now,
            ),
        )
        if changed:
            self._leave(approval_id)
        return changed == 1

    def decide(self, approval_id: int, approve: bool, by: str = "user") -> StoredApproval:
        """Approve or deny a waiting approval (from a terminal, a notification, the window).

        Raises BotpsyError, saying why, when there is no such approval or it was decided or
        expired already. The run it belongs to goes on in the process holding it.
        """
        if self.get(approval_id) is None:
            raise BotpsyError(
                f"There is no approval {approval_id}.",
                "List the waiting ones with `botpsy approvals list`.",
            )
        with self._lock:
            request = self._live.get(approval_id) or self._mirrors.get(approval_id)
        if request is not None and not request.decided:
            try:
                if approve:
                    request.approve(by=by)
                else:
                    request.deny(by=by)
                won = True
            except RuntimeError:
                won = False
        else:
            won = self._record(approval_id, approve, by, None)
        after = self.get(approval_id)
        assert after is not None
        if won:
            return after
        if after.state == "waiting":  # past its deadline, not yet ended by its run
            raise BotpsyError(
                f"Approval {approval_id} waited past its deadline, so it can no longer be "
                "approved or denied; its run ends without doing it.",
                "Ask the assistant again.",
            )
        raise BotpsyError(
            f"Approval {approval_id} was {_decision_words(after)} already.",
            "Nothing changed. `botpsy approvals list` shows what still waits.",
        )

    def expire(self, approval_id: int) -> StoredApproval | None:
        """End a waiting approval whose time is up (first come wins); the row as it is then."""
        now = self.clock()
        changed = self._update(
            "UPDATE parked_approvals SET state = 'decided', decision = 'expired', "
            "decided_by = ?, decided_at = ? WHERE id = ? AND state = 'waiting'",
            (NOBODY_IN_TIME, now, approval_id),
        )
        if changed:
            self._leave(approval_id)
        return self.get(approval_id)

    def take(self, approval_id: int) -> StoredApproval | None:
        """The run goes on with the decision: ``decided`` -> ``taken``, once, by the process that
        holds the run. None if it was taken already or is not decided (nothing may run)."""
        changed = self._update(
            "UPDATE parked_approvals SET state = 'taken', taken_at = ? WHERE id = ? "
            "AND state = 'decided' AND owner = ?",
            (self.clock(), approval_id, self.me),
        )
        with self._lock:
            self._live.pop(approval_id, None)
        self._drop_mirror(approval_id)
        return self.get(approval_id) if changed else None

    def settle_live(self, approval_id: int, request: ApprovalRequest) -> StoredApproval | None:
        """A parked run wakes (decided, stopped, or its time is up): make ``request`` say what
        the row says, expiring the row if it still waits; then take it. The row, taken."""
        stored = self.get(approval_id)
        if stored is not None and stored.state == "waiting":
            stored = self.expire(approval_id)
        if stored is None:
            with contextlib.suppress(RuntimeError):
                request.settle(False, "not stored")
            return None
        if not request.decided:
            decided = stored.decided()
            with contextlib.suppress(RuntimeError):
                request.settle(decided.approved, decided.by, decided.edited_arguments)
        return self.take(approval_id)

    def stop_held(self, conversation_id: str) -> list[StoredApproval]:
        """The user writes in ``conversation_id``: a run of it that this process holds without
        running (adopted, waiting or decided) ends there, its call not run, so that the new
        request is the conversation's only writer. Returns the rows it ended."""
        ended: list[StoredApproval] = []
        rows = self._rows(
            "conversation_id = ? AND owner = ? AND state != 'taken'", (conversation_id, self.me)
        )
        for stored in rows:
            if stored.id in self._live:
                continue  # a parked run of this process: the scheduler stops it
            self._record(stored.id, False, "stopped", None)
            taken = self.take(stored.id)
            if taken is None:
                continue
            close_run(
                self.store,
                taken,
                f"{taken.tool} was not run: the user wrote in this conversation while it "
                "waited for approval.",
                STOPPED_SENTENCE,
            )
            ended.append(taken)
        return ended

    def suspend(self, approval_id: int) -> None:
        """The process is closing with this run parked: it stays waiting, for the next start."""
        with self._lock:
            request = self._live.pop(approval_id, None)
        if request is not None:
            request.recorder = None

    # -- watching -------------------------------------------------------------------------------
    def watch(self, *, adopt: bool) -> None:
        """Poll the table on a thread: decisions made elsewhere reach this process's parked
        runs, waiting approvals of other processes are mirrored into the inbox, and (``adopt``)
        the parked runs of ended processes are taken over (:attr:`on_adopted`)."""
        self.adopt = adopt
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._watch, name="botpsy-approvals", daemon=True
            )
            self._thread.start()

    def poll(self) -> None:
        """One look at the table (what the watching thread does each time)."""
        rows = self._rows("state != 'taken'")
        now = self.clock()
        for stored in rows:
            with contextlib.suppress(BotpsyError, RuntimeError):
                self._look(stored, now)
        open_ids = {r.id for r in rows if r.state == "waiting"}
        for approval_id in [i for i in list(self._mirrors) if i not in open_ids]:
            self._drop_mirror(approval_id)

    def _look(self, stored: StoredApproval, now: float) -> None:
        if stored.state != "waiting":
            self._leave(stored.id)
        live = self._live.get(stored.id)
        if live is not None:  # parked here: a decision made elsewhere wakes the run
            if stored.state == "waiting" and stored.deadline is not None and stored.deadline <= now:
                # by the wall clock (the run's own timer stands still while the computer sleeps)
                stored = self.expire(stored.id) or stored
            if stored.state == "decided" and not live.decided:
                decided = stored.decided()
                live.settle(decided.approved, decided.by, decided.edited_arguments)
            return
        mine = stored.owner == self.me
        if not mine and self.adopt and stored.owner and self._claim(stored):
            log.info("adopted the parked run of approval %s", stored.id)
            stored = self.get(stored.id) or stored
            mine = True
            if stored.state == "waiting":
                self._arrive(stored)
        if stored.state == "waiting":
            if mine and stored.deadline is not None and stored.deadline <= now:
                expired = self.expire(stored.id)
                if expired is not None and expired.state == "decided":
                    self._drop_mirror(stored.id)
                    self._hand_on(expired)
                return
            self._add_mirror(stored)
            return
        self._drop_mirror(stored.id)
        if stored.state == "decided" and mine:
            self._hand_on(stored)

    def _claim(self, stored: StoredApproval) -> bool:
        """Take over the run of an ended process (one process wins); True if this one did."""
        if stored.owner is None or not self.store.owner_gone(stored.owner):
            return False
        return bool(
            self._update(
                "UPDATE parked_approvals SET owner = ? WHERE id = ? AND owner IS ? "
                "AND state != 'taken'",
                (self.me, stored.id, stored.owner),
            )
        )

    def _hand_on(self, stored: StoredApproval) -> None:
        callback = self.on_adopted
        if callback is not None and self.adopt:
            with self._lock:
                if stored.id in self._handed:
                    return
                self._handed.add(stored.id)
            callback(stored)

    def _add_mirror(self, stored: StoredApproval) -> None:
        if self.inbox is None or stored.id in self._mirrors:
            return
        request = stored.request()
        request.recorder = lambda ok, by, edited: self._record(stored.id, ok, by, edited)
        with self._lock:
            self._mirrors[stored.id] = request
        self.inbox.post(request, origin=stored.conversation_id)

    def _drop_mirror(self, approval_id: int) -> None:
        with self._lock:
            request = self._mirrors.pop(approval_id, None)
        if request is None:
            return
        if not request.decided:
            with contextlib.suppress(RuntimeError):
                request.settle(False, "decided elsewhere")
        if self.inbox is not None:
            self.inbox.discard(request)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.poll()
            except Exception:  # a busy or closing database: next time
                log.exception("checking the stored approvals failed")

    def _tell(self, listeners: list[Listener], stored: StoredApproval) -> None:
        for listener in list(listeners):
            try:
                listener(stored)
            except Exception:
                log.exception("an approval listener failed")

    def close(self) -> None:
        """Stop watching; the rows stay (a parked run waits for the next start). Idempotent."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        for approval_id in list(self._live):
            self.suspend(approval_id)
        for approval_id in list(self._mirrors):
            with self._lock:
                request = self._mirrors.pop(approval_id, None)
            if request is not None and self.inbox is not None:
                request.recorder = None
                self.inbox.discard(request)
        with self._lock:
            self._db.close()


def _stored(row: dict[str, Any]) -> StoredApproval:
    body = json.loads(row["request"])
    return StoredApproval(
        id=int(row["id"]),
        conversation_id=str(row["conversation_id"]),
        call_id=str(row["call_id"]),
        tool=str(row["tool"]),
        arguments=json.loads(row["arguments"]),
        digest=str(row["digest"]),
        summary=str(body.get("summary", "")),
        receipt=str(body.get("receipt", "")),
        lines=list(body.get("lines", [])),
        reasons=list(body.get("reasons", [])),
        details=str(body.get("details", "")),
        effects=list(body.get("effects", [])),
        tier=str(body.get("tier", "ask")),
        sources=list(body.get("sources", [])),
        effect=str(body.get("effect", "")),
        routine_id=row["routine_id"],
        routine_request=row["routine_request"],
        routine_due=row["routine_due"],
        origin=row["origin"],
        think=bool(row["think"]),
        asked_at=float(row["asked_at"]),
        deadline=row["deadline"],
        state=row["state"],
        decision=row["decision"],
        decided_by=str(row["decided_by"] or ""),
        decided_at=row["decided_at"],
        edited=None if row["edited"] is None else json.loads(row["edited"]),
        taken_at=row["taken_at"],
        owner=row["owner"],
    )


def _decision_words(stored: StoredApproval) -> str:
    if stored.decision == "expired":
        return "given up (nobody answered before its deadline)"
    by = f" by {stored.decided_by}" if stored.decided_by else ""
    return f"{stored.decision or 'decided'}{by}"


def end_expired(store: ConversationStore, stored: StoredApproval, timeout_s: float | None) -> str:
    """End a stored run whose approval nobody gave in time, without the model and so without
    any action: its waiting call and the turn's later calls get "not run" results, and a
    sentence in the conversation says so. Returns that sentence."""
    sentence = gave_up_sentence([stored.tool], timeout_s)
    not_run = (
        f"{stored.tool} was not run: it waited for the user's approval and nobody answered "
        "(agent.background_approval_timeout_s)."
    )
    close_run(store, stored, not_run, sentence)
    return sentence


STOPPED_SENTENCE = "Stopped: you wrote in this conversation while this run waited for approval."


def close_run(
    store: ConversationStore, stored: StoredApproval, not_run: str, sentence: str
) -> None:
    """End a stored run at its waiting call without the model: that call gets ``not_run`` as
    its result, the turn's later calls "not run", and ``sentence`` ends the run."""
    found = parked_turn(store.messages(stored.conversation_id), stored.call_id)
    row = store.reopen_tool_row(stored.conversation_id, stored.call_id)
    if found is None or row is None:
        return
    _, _, calls, _ = found
    for index, (call_id, call) in enumerate(calls):
        content = not_run if index == 0 else NOT_RUN_AFTER_GIVING_UP
        message = {"role": "tool", "tool_call_id": call_id, "name": call.name, "content": content}
        if index + 1 < len(calls):
            following: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": calls[index + 1][0],
                "name": calls[index + 1][1].name,
                "content": "",
            }
        else:
            following = {"role": "assistant", "content": ""}
        next_row = store.finish(row, message, then=following)
        store.record_tool_call(
            stored.conversation_id,
            call_id=call_id,
            name=call.name,
            arguments=dict(getattr(call, "arguments", {}) or {}),
            decision="denied" if index == 0 else "not-run",
            ok=False,
            result=content,
        )
        assert next_row is not None
        row = next_row
    store.finish(row, {"role": "assistant", "content": sentence})
