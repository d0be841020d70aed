"""The confirmation gate: code, not prompt, decides which calls may run without the user."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from botpsy_desktop.agent.tools import Effect, Tool


class Decision(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class Gate:
    """Decides per call. Read-only tools run; every other effect waits for the user's approval.

    Unknown tools never reach the gate (the loop refuses them first); a tool with no recognised
    effect is treated as the most dangerous kind.
    """

    def decide(self, tool: Tool | None, arguments: dict[str, Any]) -> Decision:
        if tool is None:
            return Decision.DENY
        if tool.effects and tool.effects <= {Effect.READ}:
            return Decision.ALLOW
        return Decision.ASK

    def receipt(self, tool: Tool, arguments: dict[str, Any]) -> str:
        """Plain words and the full arguments of what will happen if approved."""
        effects = ", ".join(sorted(e.value for e in tool.effects))
        return f"Run {tool.describe_call(arguments)} — effects: {effects}."
