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


@dataclass
class GenerationStats:
    """Token counts and timings of one model turn."""

    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens not evaluated again (already in the model's state)
    evaluated_tokens: int = 0  # prompt tokens evaluated for this turn
    completion_tokens: int = 0
    constrained_tokens: int = 0  # generated under the tool-call grammar
    grammar_resamples: int = 0  # constrained tokens whose free choice the grammar rejected
    time_to_first_token_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    wanted_tools: tuple[str, ...] = ()
    """Tools the model began to call that the turn's ``may_call`` left out (the grammar made
    it write another name): the agent may offer them and ask again (agent/loop.py)."""

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.evaluated_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        # the first token comes out of prefill; the rest are decode steps
        steps = max(self.completion_tokens - 1, 0)
        return steps / self.decode_s if self.decode_s > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "evaluated_tokens": self.evaluated_tokens,
            "completion_tokens": self.completion_tokens,
            "constrained_tokens": self.constrained_tokens,
            "grammar_resamples": self.grammar_resamples,
            "time_to_first_token_s": round(self.time_to_first_token_s, 4),
            "prefill_s": round(self.prefill_s, 4),
            "decode_s": round(self.decode_s, 4),
            "prefill_tokens_per_s": round(self.prefill_tokens_per_s, 2),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 2),
        }


FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True)
class TextPiece:
    """A streamed piece of the completion text.

    ``started_in_thinking`` repeats what the Completion will say: the prompt ended inside an
    open ``<think>`` block, so text is thinking until ``</think>``.
    """

    text: str
    started_in_thinking: bool = False


@dataclass(frozen=True)
class PromptProgress:
    """How far the evaluation of a prompt has come, yielded between its batches.

    ``done`` of ``total`` tokens evaluated (tokens already in the model's state are not
    counted), ``elapsed_s`` seconds since this evaluation started. Small and picklable: an
    engine in another process forwards it as it is.
    """

    done: int
    total: int
    elapsed_s: float

    @property
    def fraction(self) -> float:
        return min(self.done / self.total, 1.0) if self.total > 0 else 1.0

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the speed so far (None until a batch has been evaluated)."""
        if self.done <= 0 or self.elapsed_s <= 0:
            return None
        return self.elapsed_s * max(self.total - self.done, 0) / self.done


@dataclass(frozen=True)
class Completion:
    """The end of one model turn: the full raw text and how it ended."""

    text: str
    finish_reason: FinishReason
    stats: GenerationStats
    started_in_thinking: bool = False
