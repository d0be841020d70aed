"""Plain data types shared by the model backends, the output parser and the agent loop."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class ToolCall:
    """One well-formed tool call parsed from model output.

    ``arguments`` are already converted to the types of the tool's JSON schema when a schema
    was known to the parser; otherwise values are the raw strings the model wrote.
    ``raw`` is the exact text of the call as the model emitted it.
    """

    name: str
    arguments: dict[str, Any]
    raw: str
    format: Literal["xml", "json"] = "xml"


@dataclass(frozen=True)
class ToolCallError:
    """A tool call the parser could not read (malformed, truncated or with unconvertible values).

    ``message`` is a short sentence written for the model: it is fed back as an observation so
    the model can correct itself. ``name`` is the function name when it could be read.
    """

    message: str
    raw: str
    name: str | None = None


@dataclass(frozen=True)
class ParsedTurn:
    """One assistant turn split into its parts."""

    thinking: str
    content: str
    calls: list[ToolCall | ToolCallError] = field(default_factory=list)

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for c in self.calls if isinstance(c, ToolCall)]

    @property
    def errors(self) -> list[ToolCallError]:
        return [c for c in self.calls if isinstance(c, ToolCallError)]
