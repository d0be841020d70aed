"""Typed events the agent loop yields: the one stream the CLI, the window and the tests read."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from botpsy_desktop.llm.types import GenerationStats


@dataclass(frozen=True)
class Thinking:
    """A streamed piece of the model's thinking."""

    text: str


@dataclass(frozen=True)
class Token:
    """A streamed piece of the visible answer."""

    text: str


@dataclass(frozen=True)
class ToolStarted:
    """The model asked for a tool; it is about to be checked and (maybe) run."""

    call_id: str
    name: str
    arguments: dict[str, Any]


class ApprovalRequest:
    """A question to the user: may this exact call run? Decide once; undecided means denied."""

    def __init__(
        self, call_id: str, tool: str, arguments: dict[str, Any], receipt: str, effects: list[str]
    ) -> None:
        self.call_id = call_id
        self.tool = tool
        self.arguments = arguments
        self.receipt = receipt
        self.effects = effects
        self._decided = threading.Event()
        self._approved = False
        self.decided_by = ""
        self.edited_arguments: dict[str, Any] | None = None

    def approve(self, by: str = "user", arguments: dict[str, Any] | None = None) -> None:
        """Approve the call, or (with ``arguments``) approve the call as the user edited it.

        Edited arguments are validated again and shown to the model as what was run.
        """
        if arguments is not None:
            self.edited_arguments = dict(arguments)
        self._decide(True, by)

    def deny(self, by: str = "user") -> None:
        self._decide(False, by)

    def _decide(self, approved: bool, by: str) -> None:
        if self._decided.is_set():
            raise RuntimeError("this approval request was already decided")
        self._approved = approved
        self.decided_by = by
        self._decided.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until decided (for UIs deciding on another thread); True if approved."""
        self._decided.wait(timeout)
        return self.approved

    @property
    def decided(self) -> bool:
        return self._decided.is_set()

    @property
    def approved(self) -> bool:
        return self._decided.is_set() and self._approved


@dataclass(frozen=True)
class ApprovalNeeded:
    """The loop is paused until ``request`` is approved or denied."""

    request: ApprovalRequest


GateDecision = Literal["allowed", "approved", "denied", "not-run"]


@dataclass(frozen=True)
class ToolResult:
    """What came of a tool call, as the model will see it."""

    call_id: str
    name: str | None
    arguments: dict[str, Any]
    ok: bool
    output: str
    decision: GateDecision
    duration_s: float = 0.0


@dataclass(frozen=True)
class TurnFinished:
    """One model turn ended; its token counts and timings."""

    step: int
    stats: GenerationStats
    finish_reason: str


@dataclass(frozen=True)
class Answer:
    """The final answer of the request."""

    text: str
    thinking: str = ""
    steps: int = 0


@dataclass(frozen=True)
class Error:
    """The request ended without an answer; ``kind`` is machine-readable, ``message`` for people."""

    kind: Literal["step_limit", "cancelled", "model", "internal"]
    message: str


Event = Thinking | Token | ToolStarted | ApprovalNeeded | ToolResult | TurnFinished | Answer | Error


@dataclass
class Transcript:
    """Everything that happened in one request, collected from its events (for --json)."""

    request: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    answer: str | None = None
    thinking: str = ""
    error: dict[str, str] | None = None

    def add(self, event: Event) -> None:
        if isinstance(event, ToolResult):
            self.tool_calls.append(
                {
                    "id": event.call_id,
                    "name": event.name,
                    "arguments": event.arguments,
                    "decision": event.decision,
                    "ok": event.ok,
                    "result": event.output,
                    "duration_s": round(event.duration_s, 4),
                }
            )
        elif isinstance(event, TurnFinished):
            self.turns.append(
                {"step": event.step, "finish_reason": event.finish_reason, **event.stats.as_dict()}
            )
        elif isinstance(event, Answer):
            self.answer = event.text
            self.thinking = event.thinking
        elif isinstance(event, Error):
            self.error = {"kind": event.kind, "message": event.message}

    def as_dict(self) -> dict[str, Any]:
        totals: dict[str, float | int] = {}
        for key in (
            "prompt_tokens",
            "evaluated_tokens",
            "reused_tokens",
            "completion_tokens",
            "constrained_tokens",
        ):
            totals[key] = sum(int(t[key]) for t in self.turns)
        for key in ("prefill_s", "decode_s"):
            totals[key] = round(sum(float(t[key]) for t in self.turns), 4)
        first = self.turns[0]["time_to_first_token_s"] if self.turns else 0.0
        decode_steps = sum(max(int(t["completion_tokens"]) - 1, 0) for t in self.turns)
        totals["time_to_first_token_s"] = first
        totals["prefill_tokens_per_s"] = (
            round(totals["evaluated_tokens"] / totals["prefill_s"], 2)
            if totals["prefill_s"]
            else 0.0
        )
        totals["decode_tokens_per_s"] = (
            round(decode_steps / totals["decode_s"], 2) if totals["decode_s"] else 0.0
        )
        return {
            "request": self.request,
            "tool_calls": self.tool_calls,
            "answer": self.answer,
            "thinking": self.thinking,
            "error": self.error,
            "turns": self.turns,
            "totals": totals,
        }
