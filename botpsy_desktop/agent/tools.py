"""The agent's view of tools; declarations live in core so adapters can make tools too."""

from botpsy_desktop.core.tools import (
    CallContext,
    Effect,
    Inverse,
    Tier,
    Tool,
    ToolArgumentsError,
    ToolRegistry,
    canonical_name,
    current_call_context,
    make_tool,
    run_in_context,
)

__all__ = [
    "CallContext",
    "Effect",
    "Inverse",
    "Tier",
    "Tool",
    "ToolArgumentsError",
    "ToolRegistry",
    "canonical_name",
    "current_call_context",
    "make_tool",
    "run_in_context",
]
