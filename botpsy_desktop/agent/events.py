"""Typed events the agent loop yields: the one stream the CLI, the window and the tests read."""

from __future__ import annotations

import copy
import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from botpsy_desktop.llm.types import GenerationStats, PromptProgress


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


def call_digest(tool: str, arguments: Mapping[str, Any]) -> str:
    """SHA-256 of a tool name and its arguments (canonical JSON): what an approval is bound to."""
    canonical = json.dumps(
        {"tool": tool, "arguments": arguments},
        ensure_ascii=False,
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Scope:
    """What "allow for this conversation" covers: one tool, and only these target values.

    ``targets`` maps each of the tool's declared target fields (recipients, a path, an alarm,
    an event id) to the values allowed for it; a later call is covered only if every one of
    them stays within these values. A tool that declares no target fields is covered only for
    identical arguments: ``exact`` is then :func:`call_digest` of the approved call.
    ``what`` is the approved call in plain words, for :meth:`describe`.
    """

    conversation_id: str
    tool: str
    targets: tuple[tuple[str, tuple[str, ...]], ...] = ()
    exact: str | None = None
    what: str = ""

    def describe(self) -> str:
        """Exactly what the allowance covers, in words."""
        what = self.what or self.tool
        if self.exact is not None or not self.targets:
            return (
                f"Also allow exactly this again in this conversation: {what} "
                "(the same call with the same details, nothing else)."
            )
        parts = "; ".join(f"{k} {', '.join(v) or '(empty)'}" for k, v in self.targets)
        return (
            f"Also allow {self.tool} again in this conversation, only for {parts} "
            "(anything else asks)."
        )


class ApprovalRequest:
    """A question to the user: may this exact call run? Decide once; undecided means denied.

    The approval is bound to :func:`call_digest` of the tool and the arguments approved (the
    edited ones if the user edited them) and is used once: the loop runs the call only if
    :meth:`consume` matches what is about to run. ``receipt`` is the full text; ``lines`` the
    same in plain-words lines, ``reasons`` why it asks, ``scope`` what "allow for this
    conversation" would cover (None: not offered, e.g. for money or deletion).
    """

    def __init__(
        self,
        call_id: str,
        tool: str,
        arguments: dict[str, Any],
        receipt: str,
        effects: list[str],
        *,
        lines: Sequence[str] = (),
        reasons: Sequence[str] = (),
        scope: Scope | None = None,
        background: bool = False,
        summary: str = "",
        details: str = "",
        tier: str = "ask",
        sources: Sequence[str] = (),
        texts: Sequence[tuple[str, str]] = (),
        effect: str = "",
    ) -> None:
        self.call_id = call_id
        self.effect = effect
        """What the receipt showed the call acts on (agent/gate.py ``Resolution.digest``): the
        approval is bound to it as well as to the call's words; empty when nothing resolves."""
        self.texts = [(str(k), str(t)) for k, t in texts]
        """Long text arguments whole, as (argument, text): shown in full where the person
        decides (the plain lines clip them with a count)."""
        self.summary = summary or receipt.split("\n", 1)[0]
        """What the call does, in one plain sentence ("Set a timer for 5 minutes.")."""
        self.details = details
        """For a Details section: the tool's name, its effects and the arguments as JSON."""
        self.tier = tier
        """The call's tier: "reversible" (asks only in an untrusted context) or "ask"."""
        self.sources = list(sources)
        """The untrusted content in the request's context, named (empty: a clean context)."""
        self.tool = tool
        self.arguments = copy.deepcopy(arguments)
        self.receipt = receipt
        self.effects = effects
        self.lines = list(lines)
        self.reasons = list(reasons)
        self.scope = scope
        self.background = background
        self.digest = call_digest(tool, self.arguments)
        self._decided = threading.Event()
        self._lock = threading.Lock()
        self._approved = False
        self._approved_digest: str | None = None
        self._used = False
        self.decided_by = ""
        self.edited_arguments: dict[str, Any] | None = None
        self.scoped = False
        self._on_decided: list[Callable[[], None]] = []
        self.recorder: Callable[[bool, str, dict[str, Any] | None], bool] | None = None
        """Where the decision is kept beyond this process (the stored approval queue,
        agent/approvals.py): called before :meth:`approve` or :meth:`deny` decides, with
        (approved, by, edited arguments); False means it was decided elsewhere first, and this
        decision is refused (RuntimeError, as for a request already decided)."""

    def approve(
        self, by: str = "user", arguments: dict[str, Any] | None = None, *, scope: bool = False
    ) -> None:
        """Approve the call, or (with ``arguments``) approve the call as the user edited it.

        Edited arguments are checked again and shown to the model as what was run. ``scope``
        also allows calls within :attr:`scope` for the rest of the conversation (only where
        offered, and not together with edited arguments).
        """
        if scope and self.scope is None:
            raise ValueError(f"{self.tool} cannot be allowed for the whole conversation")
        if scope and arguments is not None:
            raise ValueError("approve edited arguments once, without allowing the conversation")
        edited = None if arguments is None else copy.deepcopy(dict(arguments))
        self._record(True, by, edited)
        with self._lock:
            if self._decided.is_set():
                raise RuntimeError("this approval request was already decided")
            self.edited_arguments = edited
            self._approved_digest = call_digest(
                self.tool, self.arguments if edited is None else edited
            )
            self.scoped = scope
            self._approved = True
            self.decided_by = by
            self._decided.set()
        self._decided_now()

    def deny(self, by: str = "user") -> None:
        self._record(False, by, None)
        self.settle(False, by)

    def _record(self, approved: bool, by: str, edited: dict[str, Any] | None) -> None:
        if self._decided.is_set():
            raise RuntimeError("this approval request was already decided")
        recorder = self.recorder
        if recorder is not None and not recorder(approved, by, edited):
            raise RuntimeError("this approval request was already decided elsewhere")

    def settle(self, approved: bool, by: str, arguments: dict[str, Any] | None = None) -> None:
        """Decide without asking :attr:`recorder` (the decision is already kept there: made in
        another process, or taken from the stored queue when a parked run goes on)."""
        if approved:
            recorder, self.recorder = self.recorder, None
            try:
                self.approve(by, arguments)
            finally:
                self.recorder = recorder
            return
        with self._lock:
            if self._decided.is_set():
                raise RuntimeError("this approval request was already decided")
            self._approved = False
            self.decided_by = by
            self._decided.set()
        self._decided_now()

    def on_decided(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once when the request is decided (on the deciding thread), or at
        once if it is decided already: how a parked background run hears it may go on."""
        with self._lock:
            if not self._decided.is_set():
                self._on_decided.append(callback)
                return
        callback()

    def _decided_now(self) -> None:
        with self._lock:
            callbacks, self._on_decided = self._on_decided, []
        for callback in callbacks:
            callback()

    def consume(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """True once, if approved for exactly this tool and these arguments; then spent."""
        with self._lock:
            if not self._approved or self._used or self._approved_digest is None:
                return False
            if call_digest(tool, arguments) != self._approved_digest:
                return False
            self._used = True
            return True

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

    @property
    def used(self) -> bool:
        return self._used


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
    decided_by: str = ""
    """Who approved it: "user", "user (edited)", "--approve all", a conversation allowance."""
    summary: str = ""
    """What was done, in plain words ("Set a timer for 5 minutes."); empty for a read."""
    action_id: int | None = None
    """The audit log entry of a change that ran (``App.plan_undo(action_id)`` undoes it)."""
    undo: str = ""
    """What Undo would do, in words; empty when the change cannot be undone."""


@dataclass(frozen=True)
class TurnFinished:
    """One model turn ended; its token counts and timings."""

    step: int
    stats: GenerationStats
    finish_reason: str


@dataclass(frozen=True)
class Answer:
    """The final answer of the request.

    ``note`` is set when the answer describes an action although no change was carried out in
    this request (agent/claims.py): every face shows it with the answer.
    """

    text: str
    thinking: str = ""
    steps: int = 0
    note: str = ""


@dataclass(frozen=True)
class Error:
    """The request ended without an answer; ``kind`` is machine-readable, ``message`` for people."""

    kind: Literal["step_limit", "cancelled", "model", "internal", "context", "storage"]
    message: str


@dataclass(frozen=True)
class ContextTrimmed:
    """Parts of the conversation were left out of the prompt to fit the model's context.

    The stored conversation keeps everything; only what this model turn is sent changed.
    ``dropped_turns`` oldest turns (``dropped_messages`` messages) were left out and the results
    of the tools in ``clipped`` were cut short. ``message`` says so for people.
    """

    dropped_turns: int
    dropped_messages: int
    clipped: tuple[str, ...]
    prompt_tokens: int
    n_ctx: int
    message: str


Event = (
    PromptProgress
    | Thinking
    | Token
    | ToolStarted
    | ApprovalNeeded
    | ToolResult
    | TurnFinished
    | Answer
    | Error
    | ContextTrimmed
)


def progress_text(progress: PromptProgress, what: str = "Reading the request") -> str:
    """ "Reading the request: 1,536 of 5,598 tokens · about 40 s left" (for every face)."""
    text = f"{what}: {progress.done:,} of {progress.total:,} tokens"
    eta = progress.eta_s
    if eta is not None and progress.done < progress.total:
        left = f"about {eta:.0f} s left" if eta < 90 else f"about {eta / 60:.0f} min left"
        text += f" · {left}"
    return text


def _call_words(name: str | None, arguments: Mapping[str, Any]) -> str:
    shown = ", ".join(
        f"{k}={json.dumps(v, ensure_ascii=False, default=str)[:60]}" for k, v in arguments.items()
    )
    return f"{name or 'an unreadable call'}({shown})"


def outcome_line(result: ToolResult) -> str:
    """What came of one tool call, in one line that never passes a refusal off as done."""
    what = result.summary.strip().rstrip(".") or _call_words(result.name, result.arguments)
    if result.ok:
        asked = " (approved by you)" if result.decision == "approved" else ""
        return f"✓ Done{asked}: {what}." if result.summary else f"✓ Ran{asked}: {what}"
    first = result.output.strip().splitlines()[0] if result.output.strip() else ""
    why = f" ({first[:160]})" if first else ""
    if result.decision == "denied":  # the model's instructions in the output are not for people
        return f"✗ Not approved, not carried out: {what}"
    if result.decision == "not-run":
        return f"✗ Not run: {what}{why}"
    return f"✗ Failed: {what}{why}"


@dataclass
class Transcript:
    """Everything that happened in one request, collected from its events (for --json)."""

    request: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    approvals: list[ApprovalRequest] = field(default_factory=list)
    turns: list[dict[str, Any]] = field(default_factory=list)
    answer: str | None = None
    thinking: str = ""
    note: str = ""
    """Said with the answer: it describes an action that was not carried out (Answer.note)."""
    error: dict[str, str] | None = None
    context: list[dict[str, Any]] = field(default_factory=list)
    """What was left out of the prompt to fit the context (ContextTrimmed events)."""

    def add(self, event: Event) -> None:
        if isinstance(event, ApprovalNeeded):
            self.approvals.append(event.request)
        elif isinstance(event, ToolResult):
            self.tool_calls.append(
                {
                    "id": event.call_id,
                    "name": event.name,
                    "arguments": event.arguments,
                    "decision": event.decision,
                    "decided_by": event.decided_by,
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
            self.note = event.note
        elif isinstance(event, Error):
            self.error = {"kind": event.kind, "message": event.message}
        elif isinstance(event, ContextTrimmed):
            self.context.append(
                {
                    "dropped_turns": event.dropped_turns,
                    "dropped_messages": event.dropped_messages,
                    "clipped": list(event.clipped),
                    "prompt_tokens": event.prompt_tokens,
                    "n_ctx": event.n_ctx,
                    "message": event.message,
                }
            )

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
            "approvals": [
                {
                    "call_id": r.call_id,
                    "tool": r.tool,
                    "arguments": r.arguments,
                    "effects": r.effects,
                    "receipt": r.receipt,
                    "approved": r.approved,
                    "decided_by": r.decided_by,
                }
                for r in self.approvals
            ],
            "answer": self.answer,
            "note": self.note,
            "thinking": self.thinking,
            "error": self.error,
            "context": self.context,
            "turns": self.turns,
            "totals": totals,
        }
