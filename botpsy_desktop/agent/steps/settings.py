"""The agent loop's settings: what each step of a request is tuned by (agent.* in the config)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoopSettings:
    """The settings of the agent loop (core/config.py ``agent``), for every step."""

    system_prompt: str
    max_steps: int = 8
    tool_timeout_s: float = 30.0
    tool_timeouts: Mapping[str, float] = field(default_factory=dict)
    """Seconds per adapter (``weather``) or per tool (``send_email``), over tool_timeout_s."""
    max_observation_chars: int = 6000
    secrets: frozenset[str] = frozenset()
    """Values (passwords, tokens) scrubbed from every tool output before the model sees it."""
    background_approval_timeout_s: float | None = None
    """How long a background run's approval request waits (None: until decided or stopped)."""
    reply_tokens: int = 2048
    """Context tokens kept free for the reply (the prompt is trimmed to leave them)."""
    trim_chunk_turns: int = 4
    """Older turns are left out of the prompt this many at a time (see agent/budget.py)."""
    select_tools: bool = True
    """Offer each request only the tools of its domains (agent/selection.py), else all."""
    conversation_tools: int = 0
    """A conversation keeps its tool set, grown by each request up to this many tools
    (agent/selection.py ``ToolSelector.for_conversation``); 0: each request its own set."""
    prompt_tools: str = "auto"
    """What the prompt lists: "all" (every tool of the app's own, the same for every request;
    the request's choice is what the model may call, see :func:`stable_prompt`), "selected"
    (the request's choice alone), "auto" (all when they take at most half the context)."""
    max_calls_per_turn: int = 16
    """Tool calls run from one model turn, at most; the model is told the rest did not run."""
