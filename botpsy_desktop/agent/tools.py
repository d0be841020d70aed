"""The agent's view of tools; declarations live in core so adapters can make tools too."""

from botpsy_desktop.core.tools import (
    Effect,
    Tool,
    ToolArgumentsError,
    ToolRegistry,
    canonical_name,
    make_tool,
)

__all__ = ["Effect", "Tool", "ToolArgumentsError", "ToolRegistry", "canonical_name", "make_tool"]
