"""A change's way back at a set time: "mute for an hour", "do not disturb until 3".

The change runs now like any other and is logged with its inverse; its tool stores a RESTORE
entry in the alarm store (adapters/alarms) that names the change's call. When it comes due (or
at the next start, when nothing ran at the time) the app undoes that logged change through the
same plan as the person's Undo (agent/undo.py): the inverse, checked by the gate, and only
while what the change left is still there. A value the person changed since is left as they
set it, and the line says so; nothing waits for an approval nobody is there to give.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

from botpsy_desktop.adapters.alarms import AlarmFired, AlarmKind, AlarmService
from botpsy_desktop.adapters.alarms.records import MissedAlarm
from botpsy_desktop.agent.audit import AuditLog
from botpsy_desktop.agent.gate import Gate
from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.agent.undo import carry_out, plan_undo
from botpsy_desktop.core.errors import BotpsyError

log = logging.getLogger(__name__)

BY = "the way back you asked for (scheduled)"
SEARCHED = 2000
"""The newest audit entries searched for the change a way back names."""


class Restores:
    """Carries out the RESTORE entries of ``alarms`` when they come due; ``said`` hears a line
    for each (what was set back, or why it was left)."""

    def __init__(
        self,
        alarms: AlarmService,
        audit: AuditLog,
        registry: ToolRegistry,
        gate: Gate,
        said: Callable[[str], None] | None = None,
    ) -> None:
        self.alarms = alarms
        self.audit = audit
        self.registry = registry
        self.gate = gate
        self.said: list[Callable[[str], None]] = [said] if said is not None else []
        alarms.add_listener(self._fired)

    def _fired(self, event: AlarmFired) -> None:
        if event.kind is AlarmKind.RESTORE:
            alarm = self.alarms.get(event.id)
            self._carry_out(event.id, event.label, alarm.origin if alarm is not None else None)

    def catch_up(self, missed: Sequence[MissedAlarm]) -> None:
        """The ways back that came due while nothing ran: carried out now."""
        for miss in missed:
            if miss.kind is AlarmKind.RESTORE:
                alarm = self.alarms.get(miss.id)
                self._carry_out(miss.id, miss.label, alarm.origin if alarm is not None else None)

    def _carry_out(self, alarm_id: int, label: str, call_id: str | None) -> None:
        try:
            line = self.restore(call_id or "", label)
        except Exception as exc:  # never let a way back stop the alarm thread
            log.exception("a scheduled way back failed")
            line = f"{label}: not done ({exc})"
        finally:
            with contextlib.suppress(BotpsyError):
                self.alarms.dismiss(alarm_id)
        log.info("%s", line)
        for hear in list(self.said):
            with contextlib.suppress(Exception):
                hear(line)

    def restore(self, call_id: str, label: str) -> str:
        """Undo the logged change of call ``call_id`` unless it changed since; a line on it."""
        entry = next((e for e in self.audit.entries(SEARCHED) if e.get("call_id") == call_id), None)
        if entry is None:
            return f"{label}: not done, the change it sets back is not in the log any more."
        if entry.get("undone_by") is not None:
            return f"{label}: not needed, the change was undone already."
        try:
            plan = plan_undo(self.audit, self.registry, self.gate, int(entry["id"]))
        except BotpsyError as exc:
            return f"{label}: not done ({exc.message})"
        if plan.needs_approval:
            assert plan.request is not None
            why = "; ".join(plan.request.reasons) or "it would ask first"
            return f"{label}: left as it is now ({why})."
        carry_out(self.audit, plan, BY)
        return f"Done: {label}."
