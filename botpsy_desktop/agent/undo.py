"""Undo through the gate: an action's inverse gets a receipt, and asks where the gate says so."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.audit import UNDO_LOCK, AuditLog, Undone, describe
from botpsy_desktop.agent.events import ApprovalRequest
from botpsy_desktop.agent.gate import Context, Decision, Gate, Verdict
from botpsy_desktop.agent.tools import Inverse, Tier, Tool, ToolArgumentsError, ToolRegistry
from botpsy_desktop.core.errors import BotpsyError, StoreError


@dataclass
class UndoPlan:
    """What undoing one logged action will do, judged by the gate before anything runs.

    ``verdict`` is the gate's decision on the inverse call in a clean context (the person asked
    for the undo): a reversible inverse runs at once; an outbound or destructive one (reverting
    an update that notifies attendees, deleting an event) asks: show ``request`` (its summary,
    details), let the person decide, then :meth:`carry_out`.
    """

    entry: dict[str, Any]
    inverse: Inverse
    tool: Tool
    verdict: Verdict
    request: ApprovalRequest | None
    """The approval request to show when the inverse asks; None when it may run at once."""
    undoes: str = ""
    """The action undone, in plain words ("Set a timer for 10 minutes"): what "Undone:" names
    (the inverse's own summary describes the inverse, e.g. cancelling an alarm for good)."""
    state: Mapping[str, Any] | None = None
    """What the inverse acts on, as it was when planned (checked again just before it runs)."""

    @property
    def needs_approval(self) -> bool:
        return self.request is not None

    @property
    def summary(self) -> str:
        """What the undo does, in plain words."""
        return self.verdict.summary or self.tool.summarize(self.inverse.arguments)


def plan_undo(
    audit: AuditLog, registry: ToolRegistry, gate: Gate, entry_id: int | None = None
) -> UndoPlan:
    """The plan to undo entry ``entry_id`` of the audit log (None: the newest reversible one).

    Raises BotpsyError when there is nothing to undo, the entry was undone already, or a newer
    change of the same group must be undone first (file changes are undone newest first).
    """
    audit.settle(registry)  # entries a full disk left unconfirmed, where the tool can tell
    entry = _entry(audit, entry_id)
    inverse = Inverse.from_dict(entry["inverse"])
    if inverse.group:
        newest = audit._newest_in_group(inverse.group)
        if newest is not None and int(newest["id"]) != int(entry["id"]):
            raise BotpsyError(
                f"#{entry['id']} {describe(entry)} can only be undone after the newer change "
                f"#{newest['id']} {describe(newest)}.",
                "Undo that one first (changes to files are undone newest first).",
            )
    tool = registry.get(inverse.tool)
    if tool is None or tool.name != inverse.tool:
        raise BotpsyError(
            f"Undoing {describe(entry)} needs the tool {inverse.tool}, which this profile "
            "does not have.",
            "Check the settings of the adapter it belongs to.",
        )
    try:
        tool.validate(inverse.arguments)
    except ToolArgumentsError as exc:
        raise BotpsyError(f"The recorded inverse of {describe(entry)} is invalid: {exc}") from exc
    state, changed = _changed_since(entry, inverse, tool)
    tier = inverse.tier if not changed else Tier.ASK  # the world moved on: the person decides
    verdict = gate.check(
        tool, dict(inverse.arguments), context=Context(), tier=tier, why=tuple(changed)
    )
    if verdict.decision is Decision.DENY:
        raise BotpsyError(f"Undoing {describe(entry)} is not allowed: {verdict.message}")
    request = None
    if verdict.decision is Decision.ASK:
        request = gate.request(f"undo_{entry['id']}", tool, dict(inverse.arguments), verdict)
        request.scope = None  # an undo is decided once, never for a conversation
    original = registry.get(str(entry.get("tool")))
    try:
        undoes = (
            original.summarize(dict(entry.get("arguments") or {}))
            if original is not None
            else describe(entry)
        )
    except Exception:  # a summary is words only: never a reason not to undo
        undoes = describe(entry)
    return UndoPlan(entry, inverse, tool, verdict, request, undoes.strip().rstrip("."), state)


_STATE_WORDS = {
    "sequence": "its revision number (SEQUENCE)",
    "last_modified": "its last-modified time",
    "digest": "what it says (any of its details, or one of its occurrences)",
    "attendees": "its attendees",
}


def _changed_since(
    entry: Mapping[str, Any], inverse: Inverse, tool: Tool
) -> tuple[Mapping[str, Any] | None, list[str]]:
    """The current state of what the inverse acts on, and why the undo must ask because it is
    no longer what the action left (an edit made elsewhere since, attendees added): each a
    sentence. Raises BotpsyError when it is not there any more."""
    if inverse.expect is None or tool.state is None:
        return None, []
    try:
        now = tool.state(inverse.arguments)
    except BotpsyError as exc:
        raise BotpsyError(f"Cannot check {describe(entry)} before undoing it: {exc}") from exc
    if now is None:
        raise BotpsyError(
            f"Nothing was undone: what {describe(entry)} made is not there any more (or no "
            "longer found by its id).",
            "See what is there now, and change it yourself if needed.",
        )
    changed = [
        _STATE_WORDS.get(key, key) for key, value in inverse.expect.items() if now.get(key) != value
    ]
    why: list[str] = []
    if changed:
        why.append(
            "it was changed since (by someone or something else): "
            + ", ".join(changed)
            + " differ from what the action left, so undoing it would undo their change too"
        )
    people = now.get("attendees")
    if people:
        shown = ", ".join(str(p) for p in list(people)[:5])
        why.append(f"it now has attendees ({shown}), who may be told of the change")
    return now, why


def carry_out(audit: AuditLog, plan: UndoPlan, by: str = "user (undo)") -> Undone:
    """Run the plan's inverse (approved first where it asks) and log it as the entry's undo."""
    args_data = dict(plan.inverse.arguments)
    approved_by = by
    if plan.request is not None:
        if not plan.request.approved:
            asked = "; ".join(plan.request.reasons)
            raise BotpsyError(
                f"Nothing was undone: “{plan.summary.rstrip('.')}” was not approved"
                + (f" (it asked because {asked})." if asked else "."),
                "Approve it to undo, or leave it as it is.",
            )
        if not plan.request.consume(plan.tool.name, args_data):
            raise BotpsyError("Nothing was undone: the approval does not match this undo.")
        approved_by = plan.request.decided_by or by
    # one undo at a time in a profile (other processes too): an inverse such as
    # undo_last_file_change acts on the newest change, which another undo may be taking back
    lock = audit.store.writer(UNDO_LOCK)
    lock.acquire()
    try:
        return _carry_out(audit, plan, args_data, approved_by)
    finally:
        lock.release()


def _carry_out(
    audit: AuditLog, plan: UndoPlan, args_data: dict[str, Any], approved_by: str
) -> Undone:
    entry = plan.entry
    if plan.state is not None and plan.tool.state is not None:  # changed since it was planned?
        now = plan.tool.state(args_data)
        if now is None or dict(now) != dict(plan.state):
            raise BotpsyError(
                f"Nothing was undone: {describe(entry)} changed while the undo waited.",
                "Undo it again to see what it would do now.",
            )
    # the entry is claimed before its inverse runs: of several undos of one entry at once,
    # exactly one carries it out; the others say it was taken
    if not audit.store.claim_undo(int(entry["id"])):
        raise BotpsyError(
            f"Nothing was undone: #{entry['id']} {describe(entry)} was undone already (or is "
            "being undone by another undo right now).",
            "See `botpsy log`.",
        )
    try:
        value = plan.tool.call(plan.tool.validate(args_data))
    except BaseException as exc:
        audit.store.release_undo(int(entry["id"]))  # it did not happen: free to try again
        if isinstance(exc, ToolArgumentsError):
            raise BotpsyError(
                f"The recorded inverse of {describe(entry)} is invalid: {exc}"
            ) from exc
        if isinstance(exc, BotpsyError):
            raise BotpsyError(f"Could not undo {describe(entry)}: {exc}") from exc
        if isinstance(exc, Exception):  # an adapter bug: say so, change nothing in the log
            raise BotpsyError(
                f"Could not undo {describe(entry)}: {type(exc).__name__}: {exc}"
            ) from exc
        raise
    output = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    assessment = plan.verdict.assessment
    try:
        new_id = audit.record(
            conversation_id=entry["conversation_id"],
            call_id=f"undo_{entry['id']}",
            tool=plan.tool.name,
            arguments=args_data,
            effects=sorted(
                e.value for e in (assessment.effects if assessment else plan.tool.effects)
            ),
            approved_by=approved_by,
            receipt=f"Undo #{entry['id']}: {plan.summary}",
            ok=True,
            output=output,
            value=value,
            undoes=int(entry["id"]),
        )
    except StoreError as exc:  # the claim stays: the log shows the undo started, unrecorded
        raise StoreError(
            f"Undid #{entry['id']} {describe(entry)} ({output}), but the audit log could not "
            f"record it: {exc.message}",
            exc.hint,
        ) from exc
    return Undone(entry, plan.inverse, output, new_id)


def _entry(audit: AuditLog, entry_id: int | None) -> dict[str, Any]:
    if entry_id is None:
        entry = audit.last_reversible()
        if entry is None:
            raise BotpsyError(
                "There is no action left to undo.", "See what was done with `botpsy log`."
            )
        return entry
    for found in audit.entries():
        if int(found["id"]) == entry_id:
            return _check(found)
    raise BotpsyError(f"There is no action #{entry_id}.", "See what was done with `botpsy log`.")


def _check(entry: Mapping[str, Any]) -> dict[str, Any]:
    if entry.get("undone_by") is not None:
        raise BotpsyError(f"#{entry['id']} {describe(entry)} was undone already.")
    if entry.get("undoes") is not None:
        raise BotpsyError(f"#{entry['id']} was itself an undo.", "Do the change again instead.")
    if not entry.get("ok") or not isinstance(entry.get("inverse"), Mapping):
        why = entry.get("not_reversible") or "it has no inverse"
        raise BotpsyError(f"#{entry['id']} {describe(entry)} cannot be undone: {why}.")
    return dict(entry)
