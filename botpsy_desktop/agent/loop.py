"""The agent loop: model turn, parse, gate, run tools, feed results back; a generator of events."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.audit import AuditLog
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    ApprovalRequest,
    Error,
    Event,
    GateDecision,
    Thinking,
    Token,
    ToolResult,
    ToolStarted,
    TurnFinished,
)
from botpsy_desktop.agent.gate import Decision, Gate, Verdict
from botpsy_desktop.agent.hardening import clean_output, frame, known_secrets
from botpsy_desktop.agent.provenance import Provenance
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.tools import ToolArgumentsError, ToolRegistry
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.backend import Backend
from botpsy_desktop.llm.parser import StreamSplitter, parse_turn
from botpsy_desktop.llm.types import Completion, ToolCall, ToolCallError


@dataclass(frozen=True)
class LoopSettings:
    system_prompt: str
    max_steps: int = 8
    tool_timeout_s: float = 30.0
    max_observation_chars: int = 6000
    secrets: frozenset[str] = frozenset()
    """Values (passwords, tokens) scrubbed from every tool output before the model sees it."""
    background_approval_timeout_s: float | None = None
    """How long a background run's approval request waits (None: until decided or stopped)."""


class _Outcome:
    """What one tool call produced: the observation text for the model and how it ended."""

    def __init__(self, ok: bool, output: str, decision: GateDecision, duration: float = 0.0):
        self.ok = ok
        self.output = output
        self.decision = decision
        self.duration = duration
        self.arguments: dict[str, Any] | None = None  # set when the user edited them
        self.value: Any = None  # what the tool returned, when it ran
        self.ran = False  # the tool was called (its output is untrusted data)
        self.decided_by = ""


class AgentSession:
    """One conversation with the assistant. ``run`` handles one user request.

    The session never raises for anything the model does: unknown tools, bad arguments, tool
    exceptions and timeouts become observations the model reads on its next turn.

    ``background`` marks a run nobody is watching (scheduled or background): its approval
    requests are never answered by a conversation-wide allowance; they wait in the gate's
    inbox until the user decides (or the run is stopped, or the wait times out: denied).
    """

    def __init__(
        self,
        backend: Backend,
        registry: ToolRegistry,
        gate: Gate,
        store: ConversationStore,
        settings: LoopSettings,
        conversation_id: str | None = None,
        *,
        background: bool = False,
    ) -> None:
        self.backend = backend
        self.registry = registry
        self.gate = gate
        self.store = store
        self.settings = settings
        self.background = background
        self.audit = AuditLog(store)
        self._secrets = known_secrets(settings.secrets)
        if conversation_id is None:
            conversation_id = store.create()
        elif not store.exists(conversation_id):
            raise BotpsyError(
                f"There is no conversation {conversation_id}.",
                "List conversations with `botpsy history`.",
            )
        self.conversation_id = conversation_id

    def _messages(self) -> list[dict[str, Any]]:
        """The prompt: tool output is framed as data from that tool, not instructions."""
        system = {"role": "system", "content": self.settings.system_prompt}
        out: list[dict[str, Any]] = [system]
        for m in self.store.messages(self.conversation_id):
            if m.get("role") == "tool" and m.get("data"):
                m = {k: v for k, v in m.items() if k != "data"}
                m["content"] = frame(str(m.get("name") or "the tool"), str(m.get("content", "")))
            out.append(m)
        return out

    def run(
        self, text: str, *, cancel: threading.Event | None = None, think: bool = False
    ) -> Iterator[Event]:
        """Handle one user request, yielding events until an Answer or an Error."""
        cancel = cancel or threading.Event()
        if not self.store.messages(self.conversation_id):
            self.store.rename(self.conversation_id, text[:60])
        self.store.append(self.conversation_id, {"role": "user", "content": text})
        tools = self.registry.schemas()
        for step in range(1, self.settings.max_steps + 1):
            splitter: StreamSplitter | None = None
            completion: Completion | None = None
            try:
                for item in self.backend.complete(
                    self._messages(), tools, enable_thinking=think, cancel=cancel
                ):
                    if isinstance(item, Completion):
                        completion = item
                        break
                    if splitter is None:
                        splitter = StreamSplitter(started_in_thinking=item.started_in_thinking)
                    yield from _stream_events(splitter.feed(item.text))
            except BotpsyError as exc:
                yield Error("model", str(exc))
                return
            if splitter is not None:
                yield from _stream_events(splitter.finish())
            if completion is None:
                yield Error("internal", "The model backend ended without a completion.")
                return
            yield TurnFinished(step, completion.stats, completion.finish_reason)
            parsed = parse_turn(
                completion.text, tools, started_in_thinking=completion.started_in_thinking
            )
            if completion.finish_reason == "cancelled":
                if parsed.content:
                    self.store.append(
                        self.conversation_id,
                        {"role": "assistant", "content": parsed.content, "interrupted": True},
                    )
                yield Error("cancelled", "Stopped.")
                return
            if not parsed.calls:
                self.store.append(
                    self.conversation_id,
                    {
                        "role": "assistant",
                        "content": parsed.content,
                        "reasoning_content": parsed.thinking,
                    },
                )
                yield Answer(parsed.content, parsed.thinking, step)
                return

            call_ids = [f"call_{uuid.uuid4().hex[:12]}" for _ in parsed.calls]
            content = parsed.content
            tool_calls = []
            for call_id, call in zip(call_ids, parsed.calls, strict=True):
                if isinstance(call, ToolCall):
                    tool_calls.append(
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": call.name, "arguments": call.arguments},
                        }
                    )
                else:
                    content = f"{content}\n\n{call.raw}".strip()
            assistant: dict[str, Any] = {
                "role": "assistant",
                "content": content,
                "reasoning_content": parsed.thinking,
            }
            if tool_calls:
                assistant["tool_calls"] = tool_calls
            self.store.append(self.conversation_id, assistant)

            for call_id, call in zip(call_ids, parsed.calls, strict=True):
                if cancel.is_set():
                    outcome = _Outcome(
                        False, "The user stopped the request before this ran.", "not-run"
                    )
                    name, args = (call.name, call.arguments if isinstance(call, ToolCall) else {})
                else:
                    if isinstance(call, ToolCall):
                        name, args = call.name, dict(call.arguments)
                        yield ToolStarted(call_id, name, args)
                    else:
                        name, args = call.name, {}
                    outcome = yield from self._execute(call_id, call, cancel)
                output = (
                    clean_output(outcome.output, self.settings.max_observation_chars, self._secrets)
                    if outcome.ran
                    else _clip(outcome.output, self.settings.max_observation_chars)
                )
                if outcome.arguments is not None:
                    args = outcome.arguments
                message: dict[str, Any] = {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": name or "",
                    "content": output,
                }
                if outcome.ran:
                    message["data"] = True
                self.store.append(self.conversation_id, message)
                self.store.record_tool_call(
                    self.conversation_id,
                    call_id=call_id,
                    name=name,
                    arguments=args,
                    decision=outcome.decision,
                    ok=outcome.ok,
                    result=output,
                )
                yield ToolResult(
                    call_id,
                    name,
                    args,
                    outcome.ok,
                    output,
                    outcome.decision,
                    outcome.duration,
                    outcome.decided_by,
                )
            if cancel.is_set():
                yield Error("cancelled", "Stopped.")
                return
        yield Error(
            "step_limit",
            f"Stopped after {self.settings.max_steps} model turns without a final answer. "
            "Ask again more specifically, or raise agent.max_steps in the settings.",
        )

    def _execute(
        self, call_id: str, call: ToolCall | ToolCallError, cancel: threading.Event
    ) -> Generator[Event, None, _Outcome]:
        if isinstance(call, ToolCallError):
            return _Outcome(False, call.message, "not-run")
        tool, why = self.gate.resolve(self.registry, call.name, call.raw, call.format)
        if tool is None:
            return _Outcome(False, why, "denied")
        try:
            args_model = tool.validate(call.arguments)
        except ToolArgumentsError as exc:
            return _Outcome(False, str(exc), "not-run")
        arguments = dict(call.arguments)
        provenance = Provenance.from_messages(self.store.messages(self.conversation_id))
        verdict = self.gate.check(tool, arguments, provenance)
        if verdict.decision is Decision.DENY:
            return _Outcome(False, verdict.message or f"{tool.name} is not allowed.", "denied")
        if verdict.decision is Decision.ALLOW:
            return _run_with_timeout(
                lambda: tool.call(args_model), self.settings.tool_timeout_s, tool.name, "allowed"
            )

        # ASK: a conversation-wide allowance, or the user's decision on this exact call
        edited: dict[str, Any] | None = None
        scope = None
        if not self.background and verdict.scopable and verdict.assessment is not None:
            scope = self.gate.grants.covering(self.conversation_id, tool.name, verdict.assessment)
        if scope is not None:
            decided_by = f"allowed for this conversation ({scope.describe()})"
        else:
            request = self.gate.request(
                call_id,
                tool,
                arguments,
                verdict,
                conversation_id=self.conversation_id,
                background=self.background,
            )
            yield ApprovalNeeded(request)
            if self.background and not request.decided:
                self._wait_in_inbox(request, cancel)
            if not request.approved:
                return _Outcome(
                    False,
                    f"The user declined {tool.name}; it was not run. "
                    "Do not try it again unless the user asks.",
                    "denied",
                )
            if request.edited_arguments is not None:
                edited = request.edited_arguments
                try:
                    args_model = tool.validate(edited)
                except ToolArgumentsError as exc:
                    return _Outcome(
                        False, f"The user's edited arguments were invalid: {exc}", "denied"
                    )
                verdict = self.gate.check(tool, edited)  # the user's own words: no provenance
                if verdict.decision is Decision.DENY:
                    return _Outcome(False, verdict.message, "denied")
            if not request.consume(tool.name, arguments if edited is None else edited):
                return _Outcome(
                    False,
                    f"{tool.name} was not run: the approval does not match this exact call "
                    "(or was used already).",
                    "denied",
                )
            if request.scoped and request.scope is not None:
                self.gate.grants.add(request.scope)
            decided_by = request.decided_by or "user"
        outcome = _run_with_timeout(
            lambda: tool.call(args_model), self.settings.tool_timeout_s, tool.name, "approved"
        )
        outcome.decided_by = decided_by
        ran_with = arguments if edited is None else edited
        self._audit(call_id, tool.name, ran_with, verdict, decided_by, outcome)
        if edited is not None:
            outcome.arguments = edited
            shown = json.dumps(edited, ensure_ascii=False)
            outcome.output = f"(The user changed the arguments to {shown}.)\n{outcome.output}"
        return outcome

    def _wait_in_inbox(self, request: ApprovalRequest, cancel: threading.Event) -> None:
        """A background run's request waits for the user: never answered automatically."""
        timeout = self.settings.background_approval_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        self.gate.inbox.post(request)
        try:
            while not request.decided:
                if cancel.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    with contextlib.suppress(RuntimeError):  # decided meanwhile
                        request.deny(by="stopped" if cancel.is_set() else "nobody in time")
                    break
                request.wait(0.05)
        finally:
            self.gate.inbox.discard(request)

    def _audit(
        self,
        call_id: str,
        tool: str,
        arguments: dict[str, Any],
        verdict: Verdict,
        decided_by: str,
        outcome: _Outcome,
    ) -> None:
        effects = (
            sorted(e.value for e in verdict.assessment.effects)
            if verdict.assessment is not None
            else []
        )
        self.audit.record(
            conversation_id=self.conversation_id,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            effects=effects,
            approved_by=decided_by,
            receipt=verdict.receipt,
            ok=outcome.ok,
            output=clean_output(outcome.output, 2000, self._secrets),
            value=outcome.value,
        )


def _run_with_timeout(fn: Any, timeout: float, name: str, verdict: GateDecision) -> _Outcome:
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = fn()
        except BotpsyError as exc:
            result["error"] = str(exc)
        except Exception as exc:  # an adapter bug must not take the session down
            result["error"] = f"{name} failed: {type(exc).__name__}: {exc}"

    started = time.perf_counter()
    worker = threading.Thread(target=target, name=f"tool-{name}", daemon=True)
    worker.start()
    worker.join(timeout)
    duration = time.perf_counter() - started
    if worker.is_alive():
        abandoned = _Outcome(
            False,
            f"{name} did not finish within {timeout:g} s and was abandoned.",
            verdict,
            duration,
        )
        abandoned.ran = True
        return abandoned
    if "error" in result:
        outcome = _Outcome(False, str(result["error"]), verdict, duration)
    else:
        outcome = _Outcome(True, _render(result.get("value")), verdict, duration)
        outcome.value = result.get("value")
    outcome.ran = True
    return outcome


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[clipped: {len(text) - limit} more characters not shown]"


def _stream_events(parts: Sequence[tuple[str, str]]) -> Iterator[Event]:
    for kind, text in parts:
        if kind == "thinking" and text:
            yield Thinking(text)
        elif kind == "text" and text:
            yield Token(text)
