"""The audit log of executed actions, each with its inverse where one exists, and undo."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.tools import Inverse, ToolArgumentsError, ToolRegistry
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.tools import InverseRule

FILE_CHANGES = frozenset({"create_folder", "write_text_note", "rename_or_move", "move_to_trash"})
"""File changes the files adapter logs and undoes newest first with undo_last_file_change."""

FILES_UNDO = "undo_last_file_change"

MAX_RESULT_CHARS = 2000


def _files(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    if isinstance(result, Mapping):
        if result.get("created") is False:
            return "nothing was created (it existed already)"
        if result.get("can_undo") is False:
            return str(result.get("note") or "the trash on this system cannot be undone")
    return Inverse(FILES_UNDO, {}, group="files")


def _alarm(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    if isinstance(result, Mapping) and result.get("id") is not None:
        return Inverse("cancel_alarm", {"alarm": str(result["id"])})
    return "the result does not say which alarm was set"


def _pause(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    return Inverse("resume_music", {})


def _resume(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    return Inverse("pause_music", {})


INVERSES: dict[str, InverseRule] = {
    **dict.fromkeys(FILE_CHANGES, _files),
    "set_alarm": _alarm,
    "set_timer": _alarm,
    "set_reminder": _alarm,
    "set_routine": _alarm,
    "pause_music": _pause,
    "resume_music": _resume,
}
"""Known inverses by tool name. An adapter can also return ``{"inverse": {"tool": ...,
"arguments": {...}}}`` in a result (e.g. the created event's delete call); that wins."""


def inverse_of(tool: str, arguments: Mapping[str, Any], result: Any) -> Inverse | str:
    """The inverse of an executed action, or why there is none."""
    if isinstance(result, Mapping) and isinstance(result.get("inverse"), Mapping):
        inv = result["inverse"]
        if isinstance(inv.get("tool"), str) and isinstance(inv.get("arguments", {}), Mapping):
            return Inverse(inv["tool"], dict(inv.get("arguments", {})), inv.get("group"))
    rule = INVERSES.get(tool)
    if rule is None:
        return f"{tool} has no known inverse"
    return rule(arguments, result)


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
        if inverse is None:
            inverse = (
                inverse_of(tool, arguments, value)
                if ok
                else "it failed, so there is nothing to undo"
            )
        if undoes is not None:
            inverse = "it was itself an undo"
        entry_id = self.store.record_action(
            conversation_id=conversation_id,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            effects=effects,
            approved_by=approved_by,
            receipt=receipt,
            ok=ok,
            result=output[:MAX_RESULT_CHARS],
            inverse=inverse.as_dict() if isinstance(inverse, Inverse) else None,
            not_reversible=inverse if isinstance(inverse, str) else None,
            undoes=undoes,
        )
        if ok and tool == FILES_UNDO and undoes is None:
            # the model undid a file change itself: that change is no longer there to undo
            newest = self._newest_in_group("files")
            if newest is not None:
                self.store.mark_undone(int(newest["id"]), entry_id)
        if undoes is not None:
            self.store.mark_undone(undoes, entry_id)
        return entry_id

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

    def last_reversible(self) -> dict[str, Any] | None:
        """The newest action that ran, has an inverse and was not undone yet."""
        for entry in self.store.actions():
            if (
                entry["ok"]
                and entry["inverse"] is not None
                and entry["undone_by"] is None
                and entry["undoes"] is None
            ):
                return entry
        return None

    def undo(self, registry: ToolRegistry, by: str = "user (botpsy undo)") -> Undone:
        """Reverse the newest reversible action by running its inverse; log that too."""
        entry = self.last_reversible()
        if entry is None:
            raise BotpsyError(
                "There is no action left to undo.", "See what was done with `botpsy log`."
            )
        inv = entry["inverse"]
        inverse = Inverse(inv["tool"], dict(inv.get("arguments") or {}), inv.get("group"))
        tool = registry.get(inverse.tool)
        if tool is None or tool.name != inverse.tool:
            raise BotpsyError(
                f"Undoing {describe(entry)} needs the tool {inverse.tool}, which this profile "
                "does not have.",
                "Check the settings of the adapter it belongs to.",
            )
        try:
            args = tool.validate(inverse.arguments)
            value = tool.call(args)
        except ToolArgumentsError as exc:
            raise BotpsyError(
                f"The recorded inverse of {describe(entry)} is invalid: {exc}"
            ) from exc
        except BotpsyError as exc:
            raise BotpsyError(f"Could not undo {describe(entry)}: {exc}") from exc
        except Exception as exc:  # an adapter bug: say so, change nothing in the log
            raise BotpsyError(
                f"Could not undo {describe(entry)}: {type(exc).__name__}: {exc}"
            ) from exc
        output = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        new_id = self.record(
            conversation_id=entry["conversation_id"],
            call_id=f"undo_{entry['id']}",
            tool=inverse.tool,
            arguments=inverse.arguments,
            effects=sorted(e.value for e in tool.effects),
            approved_by=by,
            receipt=f"Undo #{entry['id']}: {describe(entry)}",
            ok=True,
            output=output,
            value=value,
            undoes=int(entry["id"]),
        )
        return Undone(entry, inverse, output, new_id)


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
    if entry.get("undone_by") is not None:
        undo = f"undone by #{entry['undone_by']}"
    elif entry.get("undoes") is not None:
        undo = f"undid #{entry['undoes']}"
    elif entry.get("inverse"):
        undo = f"undo: {describe(entry['inverse'])}"
    else:
        undo = f"no undo ({entry.get('not_reversible') or 'not reversible'})"
    return (
        f"#{entry['id']} {stamp} {describe(entry)} [{status}] approved by "
        f"{entry['approved_by']}; {undo}"
    )
