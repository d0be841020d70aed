"""The audit log of executed actions, each with its inverse where one exists (undo: undo.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botpsy_desktop.agent.store import UNCONFIRMED, UNDOING, ConversationStore
from botpsy_desktop.agent.tools import Inverse, ToolRegistry
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.text import terminal_safe
from botpsy_desktop.core.tools import result_inverse

FILES_UNDO = "undo_last_file_change"

UNDO_LOCK = "undo"
"""The writer lock (agent/owners.py) an undo holds from claiming its entry to recording it;
conversation ids are hex, never this."""

MAX_RESULT_CHARS = 2000


@dataclass(frozen=True)
class Undone:
    """What ``botpsy undo`` did."""

    action: dict[str, Any]
    inverse: Inverse
    result: str
    entry_id: int


class AuditLog:
    """Executed non-read actions in the profile's database (table ``actions``)."""

    def __init__(self, store: ConversationStore) -> None:
        self.store = store

    def record(
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
        output: str,
        value: Any = None,
        undoes: int | None = None,
        inverse: Inverse | str | None = None,
    ) -> int:
        """Append one action that ran (``ok`` False if it failed), with its inverse (the tool's
        declared one, given by the caller; else the known inverses by name)."""
        entry_id = self.begin(
            conversation_id=conversation_id,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            effects=effects,
            approved_by=approved_by,
            receipt=receipt,
            undoes=undoes,
        )
        self.complete(
            entry_id, tool=tool, ok=ok, output=output, value=value, undoes=undoes, inverse=inverse
        )
        return entry_id

    def begin(
        self,
        *,
        conversation_id: str,
        call_id: str,
        tool: str,
        arguments: dict[str, Any],
        effects: list[str],
        approved_by: str,
        receipt: str,
        undoes: int | None = None,
    ) -> int:
        """Log an action before it runs; returns its entry, to :meth:`complete` when it ended.

        The order is what keeps action and log together: if this write fails (a full disk),
        the action must not run; if completing fails after it ran, the entry stays, marked
        unconfirmed (:data:`UNCONFIRMED`), so no action is ever missing from the log and
        ``botpsy undo`` never passes over it to reverse an older one.
        """
        return self.store.record_action(
            conversation_id=conversation_id,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            effects=effects,
            approved_by=approved_by,
            receipt=receipt,
            ok=False,
            result=UNCONFIRMED,
            inverse=None,
            not_reversible="how it ended was never recorded",
            undoes=undoes,
        )

    def complete(
        self,
        entry_id: int,
        *,
        tool: str,
        ok: bool,
        output: str,
        value: Any = None,
        undoes: int | None = None,
        inverse: Inverse | str | None = None,
    ) -> None:
        """Record how the action of entry ``entry_id`` (from :meth:`begin`) ended."""
        if inverse is None:  # the caller knows the tool's declaration; without it, none
            inverse = (
                result_inverse(value) or f"{tool} declares no inverse"
                if ok
                else "it failed, so there is nothing to undo"
            )
        if undoes is not None:
            inverse = "it was itself an undo"
        self.store.complete_action(
            entry_id,
            ok=ok,
            result=output[:MAX_RESULT_CHARS],
            inverse=inverse.as_dict() if isinstance(inverse, Inverse) else None,
            not_reversible=inverse if isinstance(inverse, str) else None,
        )
        if ok and tool == FILES_UNDO and undoes is None:
            # the model undid a file change itself: that change is no longer there to undo
            undone = self._file_change(value)
            if undone is not None:
                self.store.mark_undone(int(undone["id"]), entry_id)
        if undoes is not None:
            self.store.mark_undone(undoes, entry_id)

    def entries(self, limit: int | None = None) -> list[dict[str, Any]]:
        return self.store.actions(limit)

    def _newest_in_group(self, group: str) -> dict[str, Any] | None:
        for entry in self.store.actions():
            inv = entry["inverse"]
            if (
                entry["ok"]
                and entry["undone_by"] is None
                and entry["undoes"] is None
                and isinstance(inv, dict)
                and inv.get("group") == group
            ):
                return entry
        return None

    def _file_change(self, value: Any) -> dict[str, Any] | None:
        """The logged action a file undo reversed: the one whose inverse names the change the
        undo reports (``undone_change``); an entry logged without change ids: the newest."""
        change = value.get("undone_change") if isinstance(value, Mapping) else None
        for entry in self.store.actions():
            inv = entry["inverse"]
            if entry["undone_by"] is None and isinstance(inv, dict) and inv.get("group") == "files":
                named = (inv.get("arguments") or {}).get("change")
                if named is None or named == change:
                    return entry
        return None

    def settle(self, registry: ToolRegistry) -> list[int]:
        """Complete the entries whose ending was never recorded (a full disk after the action
        ran) where the tool's own record tells (its declared ``outcome``): one that happened
        gets its result and inverse, so it can be undone; one that never happened is marked
        so, and a plain undo passes over it. An entry whose request still runs (its
        conversation's writer lock is held) is left as it is. Returns the entries settled."""
        settled: list[int] = []
        for entry in self.store.actions():
            if entry["result"] != UNCONFIRMED or entry["undoes"] is not None:
                continue
            tool = registry.get(str(entry["tool"]))
            if tool is None or tool.outcome is None:
                continue
            writer = self.store.writer(str(entry["conversation_id"]))
            no_wait = threading.Event()
            no_wait.set()
            if not writer.acquire(no_wait):  # its request runs: it may record the end itself
                continue
            try:
                arguments = dict(entry["arguments"] or {})
                try:
                    found = tool.outcome(str(entry["call_id"]), arguments)
                except Exception:  # a record that cannot be read tells nothing
                    found = None
                if found is False:
                    self.store.complete_action(
                        int(entry["id"]),
                        ok=False,
                        result="Never carried out: the tool's own record holds no such change "
                        "and nothing of it is there (found when undoing).",
                        inverse=None,
                        not_reversible="it never happened",
                    )
                elif isinstance(found, Mapping):
                    inverse = tool.inverse_of(arguments, found)
                    output = json.dumps(found, ensure_ascii=False, default=str)
                    self.store.complete_action(
                        int(entry["id"]),
                        ok=True,
                        result=f"{output} (confirmed from the tool's own record when undoing)"[
                            :MAX_RESULT_CHARS
                        ],
                        inverse=inverse.as_dict() if isinstance(inverse, Inverse) else None,
                        not_reversible=inverse if isinstance(inverse, str) else None,
                    )
                else:
                    continue
            finally:
                writer.release()
            settled.append(int(entry["id"]))
        return settled

    def last_reversible(self) -> dict[str, Any] | None:
        """The newest action that ran, has an inverse and was not undone yet.

        Raises BotpsyError when a newer action's outcome was never recorded (or an undo of it
        was started and never recorded): undoing an older one instead would reverse the wrong
        action, so the person decides, by its number.
        """
        # read while no undo runs (they hold this lock from claim to record): an entry marked
        # as being undone is then one whose undo never finished recording, not one in progress
        lock = self.store.writer(UNDO_LOCK)
        lock.acquire()
        try:
            entries = self.store.actions()
        finally:
            lock.release()
        for entry in entries:
            if entry["result"] == UNCONFIRMED or entry["undone_by"] == UNDOING:
                what = (
                    "was started, but how it ended was never recorded"
                    if entry["result"] == UNCONFIRMED
                    else "was being undone, but how that ended was never recorded"
                )
                raise BotpsyError(
                    f"The newest action #{entry['id']} {describe(entry)} {what} (the app could "
                    "not save it), so `botpsy undo` will not guess which action to reverse.",
                    "Check whether that change is there, then undo a specific action with "
                    "`botpsy undo ID` (see `botpsy log`).",
                )
            if (
                entry["ok"]
                and entry["inverse"] is not None
                and entry["undone_by"] is None
                and entry["undoes"] is None
            ):
                return entry
        return None


def describe(entry: Mapping[str, Any]) -> str:
    """An audit entry in a few words: the tool and its arguments."""
    args = entry.get("arguments") or {}
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    return f"{entry.get('tool')}({shown})"


def format_entry(entry: Mapping[str, Any], now: float | None = None) -> str:
    """One line for ``botpsy log``: when, what, who approved, how it ended, and its undo."""
    when = datetime.fromtimestamp(float(entry["at"])).astimezone()
    age = (now or time.time()) - float(entry["at"])
    stamp = when.strftime("%Y-%m-%d %H:%M:%S") if age > 12 * 3600 else when.strftime("%H:%M:%S")
    status = "ok" if entry["ok"] else "FAILED"
    if entry.get("result") == UNCONFIRMED:
        status = "NOT CONFIRMED: started, how it ended was never recorded"
    if entry.get("undone_by") == UNDOING:
        undo = "an undo was started; how it ended was never recorded"
    elif entry.get("undone_by") is not None:
        undo = f"undone by #{entry['undone_by']}"
    elif entry.get("undoes") is not None:
        undo = f"undid #{entry['undoes']}"
    elif entry.get("inverse"):
        undo = f"undo: {describe(entry['inverse'])}"
    else:
        undo = f"no undo ({entry.get('not_reversible') or 'not reversible'})"
    return terminal_safe(
        f"#{entry['id']} {stamp} {describe(entry)} [{status}] approved by "
        f"{entry['approved_by']}; {undo}"
    )
