"""The agent loop: model turn, parse, gate, run tools, feed results back; a generator of events."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botpsy_desktop.agent.audit import AuditLog
from botpsy_desktop.agent.budget import ContextBudget, ContextFull, Fitted
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    ApprovalRequest,
    ContextTrimmed,
    Error,
    Event,
    GateDecision,
    Thinking,
    Token,
    ToolResult,
    ToolStarted,
    TurnFinished,
)
from botpsy_desktop.agent.gate import Context, Decision, Gate, Verdict
from botpsy_desktop.agent.hardening import clean_output, defuse, frame, known_secrets
from botpsy_desktop.agent.logs import logged_events
from botpsy_desktop.agent.provenance import Provenance, untrusted_sources
from botpsy_desktop.agent.reply import PendingReply
from botpsy_desktop.agent.selection import RequestTools, ToolSelector
from botpsy_desktop.agent.store import ConversationStore, prompt_history
from botpsy_desktop.agent.tools import (
    CallContext,
    Inverse,
    Tier,
    Tool,
    ToolArgumentsError,
    ToolRegistry,
    run_in_context,
)
from botpsy_desktop.core.errors import BotpsyError, StoreError
from botpsy_desktop.core.text import readable
from botpsy_desktop.llm.backend import Backend
from botpsy_desktop.llm.parser import StreamSplitter, parse_turn
from botpsy_desktop.llm.types import Completion, ToolCall, ToolCallError


@dataclass(frozen=True)
class LoopSettings:
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
    max_calls_per_turn: int = 16
    """Tool calls run from one model turn, at most; the model is told the rest did not run."""


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
        self.summary = ""  # a change that ran, in plain words
        self.action_id: int | None = None  # its audit entry
        self.undo = ""  # what undoing it would do


class AgentSession:
    """One conversation with the assistant. ``run`` handles one user request.

    The session never raises for anything the model does: unknown tools, bad arguments, tool
    exceptions and timeouts become observations the model reads on its next turn.

    ``background`` marks a run nobody is watching (scheduled or background): its approval
    requests are never answered by a conversation-wide allowance; they wait in the gate's
    inbox until the user decides (or the run is stopped, or the wait times out: denied). A
    consumer may decide for it while the generator is suspended at the ApprovalNeeded event
    (the scheduler parks the run there, agent/scheduler.py); one that just reads on makes the
    loop wait for the decision itself.
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
        self.selector = ToolSelector(registry) if settings.select_tools else None
        self._sources: list[str] = []
        """The untrusted content in the current request's context, named (agent/gate.py)."""
        self._done: list[str] = []
        """The changes the current request made, for an error that ends it."""
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
        # an interrupted reply is marked as cut off or left out: agent/store.py prompt_view
        for m in prompt_history(self.store.messages(self.conversation_id)):
            if m.get("role") == "tool" and m.get("data"):
                m = {k: v for k, v in m.items() if k != "data"}
                m["content"] = frame(str(m.get("name") or "the tool"), str(m.get("content", "")))
            elif m.get("role") == "user" and m.get("origin"):
                m = {k: v for k, v in m.items() if k != "origin"}
            out.append(m)
        return out

    def _fit(
        self, tools: list[dict[str, Any]], think: bool, extra: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], Fitted]:
        """``_messages()`` (+ ``extra``) fitted into the backend's context (agent/budget.py)."""
        messages = self._messages() + (extra or [])
        n_ctx = self.backend.n_ctx
        if n_ctx is None:  # a backend with no context limit (a replay without one)
            return messages, Fitted(messages, 0)
        budget = ContextBudget(
            lambda m, t: self.backend.count_tokens(m, t, enable_thinking=think),
            n_ctx=n_ctx,
            reply_tokens=min(self.settings.reply_tokens, n_ctx // 2),
            chunk_turns=self.settings.trim_chunk_turns,
        )
        fitted = budget.fit(messages, tools)
        return fitted.messages, fitted

    def warm_messages(self, tools: list[dict[str, Any]], think: bool) -> list[dict[str, Any]]:
        """The history as the next (short) request will send it, after the context budget: what
        ``App.warm`` evaluates ahead, so that the tokens match."""
        try:
            messages, _ = self._fit(tools, think, [{"role": "user", "content": ""}])
        except (ContextFull, BotpsyError):
            return self._messages()[:1]
        return messages[:-1]

    def run(
        self,
        text: str,
        *,
        cancel: threading.Event | None = None,
        think: bool = False,
        origin: str | None = None,
    ) -> Iterator[Event]:
        """Handle one user request, yielding events until an Answer or an Error.

        ``origin`` marks a request the user did not type now (a routine stored from untrusted
        content): its text is defused like tool output and its context is tainted from the
        start, so every change it asks for waits for the user, with the origin shown.

        The user's message is committed before the model is called; the reply is saved as it
        streams (agent/reply.py). A reply left unfinished (an error, Stop, the generator
        dropped) is kept marked interrupted; one cut off by a crash is marked on the next open.
        """
        self._reply = PendingReply(self.store, self.conversation_id)
        self._done = []
        cancel = cancel or threading.Event()
        writer = self.store.writer(self.conversation_id)
        if not writer.acquire(cancel):  # another request to this conversation is running
            yield Error("cancelled", "Stopped.")
            return
        try:
            events = self._run(text, cancel=cancel, think=think, origin=origin)
            yield from logged_events(events, self.conversation_id, text)  # agent/logs.py
        except StoreError as exc:
            yield Error("storage", self._storage_message(exc))
        finally:
            try:
                with contextlib.suppress(StoreError):  # the next open marks the row
                    self._reply.abandon()
            finally:
                writer.release()

    def _storage_message(self, exc: StoreError) -> str:
        """A failed write in words: what failed, and what this request had done before."""
        done = (
            " Before that, this request did: " + "; ".join(self._done) + "."
            if self._done
            else " Nothing was changed by this request."
        )
        return f"The request stopped: {exc}{done}"

    def _next_row(
        self, stubs: list[dict[str, Any]], step: int, cancel: threading.Event
    ) -> dict[str, Any] | None:
        """The row to open when a tool row is finished: the next call's, or the next turn's."""
        if stubs:
            return stubs.pop(0)
        if cancel.is_set() or step >= self.settings.max_steps:
            return None
        return self._reply.next_turn()

    def _run(
        self,
        text: str,
        *,
        cancel: threading.Event | None = None,
        think: bool = False,
        origin: str | None = None,
    ) -> Iterator[Event]:
        cancel = cancel or threading.Event()
        if not self.store.messages(self.conversation_id):
            self.store.rename(self.conversation_id, text[:60])
        user: dict[str, Any] = {"role": "user", "content": text}
        if origin:
            user = {"role": "user", "content": defuse(text), "origin": origin}
        self._reply.start(user)
        self._sources = []
        # this request's tools (agent/selection.py): the same every step, so the prompt's start
        # stays cached, unless the model calls a registered tool outside them (then it grows)
        offer = RequestTools(
            self.registry, self.selector, text, self.store.messages(self.conversation_id)
        )
        trimmed: Fitted | None = None  # what was last reported as left out of the prompt
        for step in range(1, self.settings.max_steps + 1):
            tools = offer.schemas()
            splitter: StreamSplitter | None = None
            completion: Completion | None = None
            try:
                prompt, fitted = self._fit(tools, think)
                self._sources = list(self._context_sources(fitted.dropped_messages))
                if fitted.trimmed and (trimmed is None or _trim_key(trimmed) != _trim_key(fitted)):
                    trimmed = fitted
                    yield _trimmed_event(fitted, self.backend.n_ctx or 0)
                for item in self.backend.complete(
                    prompt, tools, enable_thinking=think, cancel=cancel
                ):
                    if isinstance(item, Completion):
                        completion = item
                        break
                    if splitter is None:
                        splitter = StreamSplitter(started_in_thinking=item.started_in_thinking)
                    yield from self._reply.stream(_stream_events(splitter.feed(item.text)))
            except ContextFull as exc:
                yield Error("context", _context_full_message(exc, after_tools=step > 1))
                return
            except BotpsyError as exc:
                yield Error("model", str(exc))
                return
            if splitter is not None:
                yield from self._reply.stream(_stream_events(splitter.finish()))
            if completion is None:
                yield Error("internal", "The model backend ended without a completion.")
                return
            yield TurnFinished(step, completion.stats, completion.finish_reason)
            parsed = parse_turn(
                completion.text, tools, started_in_thinking=completion.started_in_thinking
            )
            offer.called(c.name for c in parsed.calls if c.name)
            if completion.finish_reason == "cancelled":
                self._reply.finish(
                    {"role": "assistant", "content": parsed.content} if parsed.content else None,
                    interrupted=True,
                )
                yield Error("cancelled", "Stopped.")
                return
            if not parsed.calls:
                self._reply.finish(
                    {
                        "role": "assistant",
                        "content": parsed.content,
                        "reasoning_content": parsed.thinking,
                    },
                )
                yield Answer(parsed.content, parsed.thinking, step)
                return

            skipped = len(parsed.calls) - self.settings.max_calls_per_turn
            if skipped > 0:  # a runaway turn: its first calls run, the model hears the rest did not
                parsed = dataclasses.replace(
                    parsed, calls=parsed.calls[: self.settings.max_calls_per_turn]
                )
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
            stubs = [  # each call's result row, opened as the one before it is finished
                {"role": "tool", "tool_call_id": i, "name": c.name or "", "content": ""}
                for i, c in zip(call_ids, parsed.calls, strict=True)
            ]
            self._reply.finish(assistant, then=stubs.pop(0))

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
                if skipped > 0 and call_id == call_ids[-1]:
                    output += (
                        f"\n[Only the first {len(call_ids)} tool calls of this turn were run "
                        f"(at most {len(call_ids)} per turn); the other {skipped} were not run. "
                        "Make fewer calls at a time.]"
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
                    label = _call_label(name, args)
                    self._sources.append(f"what {label} returned")
                self._reply.finish(message, then=self._next_row(stubs, step, cancel))
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
                    outcome.summary,
                    outcome.action_id,
                    outcome.undo,
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
        context = Context(tuple(dict.fromkeys(self._sources)))
        verdict = self.gate.check(tool, arguments, provenance, context=context)
        call_context = CallContext(verdict.sources)
        if verdict.decision is Decision.DENY:
            return _Outcome(False, verdict.message or f"{tool.name} is not allowed.", "denied")
        if verdict.decision is Decision.ALLOW:
            entry: int | _Outcome | None = None
            at_once = "ran at once (a reversible change you asked for)"
            if verdict.tier is not Tier.READ:  # a reversible change runs at once: log it
                entry = self._begin(call_id, tool, arguments, verdict, at_once)
                if isinstance(entry, _Outcome):  # the log could not record it: not run
                    return entry
            outcome = _run_with_timeout(
                lambda: run_in_context(call_context, lambda: tool.call(args_model)),
                *self._timeout(tool),
                tool.name,
                "allowed",
                cancel,
                call_context.stop,
            )
            if isinstance(entry, int):
                outcome.decided_by = at_once
                self._audit(entry, tool, arguments, verdict, outcome)
            return outcome

        # ASK: a conversation-wide allowance, or the user's decision on this exact call
        edited: dict[str, Any] | None = None
        scope = None
        if not self.background:
            scope = self.gate.covering(self.conversation_id, tool, arguments, verdict)
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
            if self.background:  # the pending-approvals queue shows it while the run waits
                self.gate.inbox.post(request, origin=self.conversation_id)
            try:
                yield ApprovalNeeded(request)
                if self.background and not request.decided:
                    self._wait_in_inbox(request, cancel)
            finally:
                if self.background:
                    self.gate.inbox.discard(request)
            if not request.approved:
                return _Outcome(False, self._declined(tool.name, request), "denied")
            if request.edited_arguments is not None:
                edited = request.edited_arguments
                try:
                    args_model = tool.validate(edited)
                except ToolArgumentsError as exc:
                    return _Outcome(
                        False, f"The user's edited arguments were invalid: {exc}", "denied"
                    )
                verdict = self.gate.check(tool, edited, context=context)
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
        ran_with = arguments if edited is None else edited
        entry = self._begin(call_id, tool, ran_with, verdict, decided_by)
        if isinstance(entry, _Outcome):  # the log could not record it: not run
            return entry
        outcome = _run_with_timeout(
            lambda: run_in_context(call_context, lambda: tool.call(args_model)),
            *self._timeout(tool),
            tool.name,
            "approved",
            cancel,
            call_context.stop,
        )
        outcome.decided_by = decided_by
        self._audit(entry, tool, ran_with, verdict, outcome)
        if edited is not None:
            outcome.arguments = edited
            shown = json.dumps(edited, ensure_ascii=False)
            outcome.output = f"(The user changed the arguments to {shown}.)\n{outcome.output}"
        return outcome

    def _context_sources(self, dropped_messages: int) -> tuple[str, ...]:
        """The untrusted content in the prompt just sent: tool output of this request and of the
        earlier turns still in the prompt (turns the context budget left out no longer count,
        whole, with the replies that read them), and stored requests of untrusted origin."""
        history = prompt_history(self.store.messages(self.conversation_id))
        return untrusted_sources(history[dropped_messages:])

    def _timeout(self, tool: Tool) -> tuple[float, str]:
        """Seconds ``tool`` may run and the setting that says so: the tool's own entry in
        agent.tool_timeouts, else its adapter's, else agent.tool_timeout_s."""
        overrides = self.settings.tool_timeouts
        for key in (tool.name, tool_family(tool)):
            if key and key in overrides:
                return overrides[key], f"agent.tool_timeouts.{key}"
        return self.settings.tool_timeout_s, "agent.tool_timeout_s"

    def _wait_in_inbox(self, request: ApprovalRequest, cancel: threading.Event) -> None:
        """A background run's request waits for the user: never answered automatically.

        Only for a consumer that reads on without deciding; the scheduler parks the run at
        the ApprovalNeeded event instead, so that the engine serves others meanwhile.
        """
        timeout = self.settings.background_approval_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        while not request.decided:
            if cancel.is_set() or (deadline is not None and time.monotonic() >= deadline):
                with contextlib.suppress(RuntimeError):  # decided meanwhile
                    request.deny(by="stopped" if cancel.is_set() else NOBODY_IN_TIME)
                break
            request.wait(0.05)

    def _declined(self, tool: str, request: ApprovalRequest) -> str:
        """What the model reads when ``request`` was not approved."""
        if request.decided_by == NOBODY_IN_TIME:
            return (
                f"{tool} was not run: it waited for the user's approval for "
                f"{waited(self.settings.background_approval_timeout_s)} and nobody answered "
                "(agent.background_approval_timeout_s). Say so in your answer; do not try it "
                "again in this run."
            )
        if request.decided_by == "stopped":
            return f"{tool} was not run: the request was stopped while it waited for approval."
        return (
            f"The user declined {tool}; it was not run. Do not try it again unless the user asks."
        )

    def _begin(
        self, call_id: str, tool: Tool, arguments: dict[str, Any], verdict: Verdict, by: str
    ) -> int | _Outcome:
        """Log a change before it runs (agent/audit.py ``begin``): its entry, or, when the log
        cannot be written, the outcome of a call that was not run."""
        effects = (
            sorted(e.value for e in verdict.assessment.effects)
            if verdict.assessment is not None
            else []
        )
        try:
            entry = self.audit.begin(
                conversation_id=self.conversation_id,
                call_id=call_id,
                tool=tool.name,
                arguments=arguments,
                effects=effects,
                approved_by=by,
                receipt=verdict.receipt,
            )
        except StoreError as exc:
            return _Outcome(
                False,
                f"{tool.name} was not run: the audit log could not record it first "
                f"({exc.message}). Nothing was changed. Tell the user; do not try it again now.",
                "not-run",
            )
        return entry

    def _audit(
        self,
        entry: int,
        tool: Tool,
        arguments: dict[str, Any],
        verdict: Verdict,
        outcome: _Outcome,
    ) -> None:
        """Record how a logged change ended; the outcome learns its entry, summary and undo.

        If that cannot be written, the entry stays in the log as not confirmed and the
        outcome says so (what the model reads, and the person in the request's error)."""
        inverse: Inverse | str = (
            tool.inverse_of(arguments, outcome.value)
            if outcome.ok
            else "it failed, so there is nothing to undo"
        )
        if outcome.ok:
            outcome.summary = verdict.summary or tool.summarize(arguments)
        if outcome.ok and isinstance(inverse, Inverse):
            target = self.registry.get(inverse.tool)
            outcome.undo = (
                target.summarize(inverse.arguments) if target is not None else inverse.tool
            )
        outcome.action_id = entry
        if outcome.ok:
            first = (outcome.summary.splitlines() or [tool.name])[0]
            self._done.append(f"{first} (#{entry} in `botpsy log`)")
        try:
            self.audit.complete(
                entry,
                tool=tool.name,
                inverse=inverse,
                ok=outcome.ok,
                output=clean_output(outcome.output, 2000, self._secrets),
                value=outcome.value,
            )
        except StoreError as exc:
            outcome.undo = ""
            outcome.output = (
                f"{outcome.output}\n(The app could not record how this ended: {exc.message} "
                f"It is in the audit log as #{entry}, not confirmed.)"
            )


NOBODY_IN_TIME = "nobody in time"
"""Who denied a background run's approval request when its wait ran out."""


def waited(seconds: float | None) -> str:
    """A wait in words: "1 h", "90 min", "45 s"."""
    if seconds is None:
        return "as long as it could"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:g} s"


def _call_label(name: str | None, arguments: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={v!s:.60}" for k, v in arguments.items())
    return f"{name or '?'}({shown})"


def tool_family(tool: Tool) -> str:
    """The adapter a tool comes from (``botpsy_desktop.adapters.weather...`` -> ``weather``)."""
    parts = str(getattr(tool.handler, "__module__", "") or "").split(".")
    if len(parts) > 2 and parts[:2] == ["botpsy_desktop", "adapters"]:
        return parts[2]
    return ""


def _run_with_timeout(
    fn: Any,
    timeout: float,
    setting: str,
    name: str,
    verdict: GateDecision,
    cancel: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> _Outcome:
    """Run a tool on its own thread; give up after ``timeout`` s or as soon as ``cancel`` is set.

    Giving up sets ``stop`` (the call's CallContext.stop): a tool doing long work checks it and
    ends there. A thread cannot be killed, so one that does not check it finishes in the
    background; whatever it returns or raises then is dropped, never reported or applied a
    second time.
    """
    result: dict[str, Any] = {}
    lock = threading.Lock()
    done = threading.Event()
    abandoned = False

    def target() -> None:
        try:
            value: dict[str, Any] = {"value": fn()}
        except BotpsyError as exc:
            value = {"error": str(exc)}
        except Exception as exc:  # an adapter bug must not take the session down
            value = {"error": f"{name} failed: {type(exc).__name__}: {exc}"}
        with lock:
            if not abandoned:
                result.update(value)
            done.set()

    cancel = cancel or threading.Event()
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    worker = threading.Thread(target=target, name=f"tool-{name}", daemon=True)
    worker.start()
    while not done.is_set() and not cancel.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        done.wait(min(left, 0.02))  # Stop is noticed within 20 ms
    with lock:
        finished = done.is_set()
        abandoned = not finished
    if abandoned and stop is not None:
        stop.set()
    duration = time.perf_counter() - started
    if abandoned:
        if cancel.is_set():
            message = (
                f"The user stopped the request while {name} was running ({duration:.1f} s); "
                "its result, if it still comes, is ignored. It may still complete in the "
                "background: check before trying it again."
            )
        else:
            message = (
                f"{name} did not finish within {timeout:g} s ({setting}) and was abandoned; "
                "its result, if it still comes, is ignored. It may still complete in the "
                "background: tell the user it did not answer in time, and check before "
                "trying it again."
            )
        outcome = _Outcome(False, message, verdict, duration)
        outcome.ran = True
        return outcome
    # a file name that is not UTF-8 reaches the model, the store and the screen as "caf\xe9"
    if "error" in result:
        outcome = _Outcome(False, readable(str(result["error"])), verdict, duration)
    else:
        outcome = _Outcome(True, readable(_render(result.get("value"))), verdict, duration)
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


def _trim_key(fitted: Fitted) -> tuple[int, tuple[str, ...]]:
    return fitted.dropped_turns, tuple(fitted.clipped)


def _trimmed_event(fitted: Fitted, n_ctx: int) -> ContextTrimmed:
    parts = []
    if fitted.dropped_turns:
        turns = "turn" if fitted.dropped_turns == 1 else f"{fitted.dropped_turns} turns"
        parts.append(
            f"Left out the oldest {turns} ({fitted.dropped_messages} messages) of this "
            f"conversation to fit the model's context of {n_ctx} tokens; they are still saved."
        )
    if fitted.clipped:
        names = ", ".join(dict.fromkeys(fitted.clipped))
        parts.append(f"Clipped long results of {names} to fit the context.")
    return ContextTrimmed(
        fitted.dropped_turns,
        fitted.dropped_messages,
        tuple(fitted.clipped),
        fitted.prompt_tokens,
        n_ctx,
        " ".join(parts),
    )


def _context_full_message(exc: ContextFull, *, after_tools: bool = False) -> str:
    if after_tools:  # the request was short enough: what its tools returned filled the context
        return (
            f"The request stopped before an answer: with what its tool calls returned it needs "
            f"{exc.needed} tokens, more than the {max(exc.limit, 0)} of the model's "
            f"{exc.n_ctx} left after keeping {exc.reply_tokens} for the reply. The tool calls "
            "that ran are done (see them above and in `botpsy log`); do not simply repeat the "
            "request. Ask for a smaller part at a time, or raise model.n_ctx in the settings."
        )
    return (
        f"This request does not fit the model's context: the system prompt, the tools and the "
        f"request need {exc.needed} tokens, but only {max(exc.limit, 0)} of the {exc.n_ctx} are "
        f"left after keeping {exc.reply_tokens} for the reply. Write a shorter request, or "
        "raise model.n_ctx in the settings."
    )


def _stream_events(parts: Sequence[tuple[str, str]]) -> Iterator[Event]:
    for kind, text in parts:
        if kind == "thinking" and text:
            yield Thinking(text)
        elif kind == "text" and text:
            yield Token(text)
