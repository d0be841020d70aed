"""The agent loop: one request, from the person's words to the answer, as a generator of events.

``AgentSession.run`` takes a request and yields events (agent/events.py) until an Answer or an
Error. Each model turn takes these steps, one module each under agent/steps/:

1. select tools (steps/tools_offered.py): the tools the request is offered;
2. render (steps/prompt.py): the stored conversation as the prompt that fits the context;
3. stream (steps/stream.py): the model's turn shown and saved as it is written;
4. parse (steps/parse.py): an answer (the request ends) or tool calls, each:
5. decide (steps/decide.py): the gate's verdict, and the person's approval when it asks;
6. carry out (steps/carry_out.py): the call run on its own thread, within its time;
7. record (steps/record.py): a change logged before and after, the call's row for the model;

then the next turn reads what the calls returned. ``resume`` goes on with a background run
that was parked at an approval (steps/parked.py). The session keeps what one request gathers
as it goes: the untrusted content in its context, the changes it made, what ran.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Generator, Iterator, Mapping, Sequence
from typing import Any

from botpsy_desktop.agent.audit import AuditLog
from botpsy_desktop.agent.budget import ContextFull, Fitted
from botpsy_desktop.agent.claims import as_ran
from botpsy_desktop.agent.events import (
    Answer,
    Error,
    Event,
    ToolStarted,
    TurnFinished,
)
from botpsy_desktop.agent.gate import Context, Decision, Gate, Verdict
from botpsy_desktop.agent.hardening import defuse, known_secrets
from botpsy_desktop.agent.logs import logged_events
from botpsy_desktop.agent.reply import PendingReply
from botpsy_desktop.agent.selection import RequestTools, ToolSelector
from botpsy_desktop.agent.steps.carry_out import (
    Outcome,
    run_with_timeout,
    tool_timeout,
)
from botpsy_desktop.agent.steps.decide import Approved, Decider
from botpsy_desktop.agent.steps.parked import (
    NOBODY_IN_TIME,
    NOT_RUN_AFTER_GIVING_UP,
    Decided,
    earlier_call_ids,
    gave_up_sentence,
    parked_turn,
)
from botpsy_desktop.agent.steps.parse import answer_row, read_turn, result_row, turn_calls
from botpsy_desktop.agent.steps.prompt import (
    TrimNotices,
    context_full_message,
    context_sources,
    fit_prompt,
    prompt_messages,
)
from botpsy_desktop.agent.steps.record import (
    begin_change,
    finish_change,
    observation,
    result_event,
    skipped_note,
    tool_row,
)
from botpsy_desktop.agent.steps.settings import LoopSettings
from botpsy_desktop.agent.steps.stream import HeldStart, Streamed, stream_turn
from botpsy_desktop.agent.steps.tools_offered import keep_tool_set, offer_tools
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.tools import (
    CallContext,
    Tier,
    Tool,
    ToolArgumentsError,
    ToolRegistry,
    run_in_context,
)
from botpsy_desktop.core.busy import Busy
from botpsy_desktop.core.errors import BotpsyError, StoreError
from botpsy_desktop.core.outside import carries_outside
from botpsy_desktop.llm.backend import Backend
from botpsy_desktop.llm.types import Completion, ToolCall, ToolCallError

__all__ = ["NOBODY_IN_TIME", "AgentSession", "Decided", "LoopSettings"]  # from agent/steps/


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
        busy: Busy | None = None,
    ) -> None:
        self.backend = backend
        self.busy = busy
        """Held while the model writes (background work such as the documents index waits)."""
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
        self._ran: list[str] = []
        """The changes carried out in this request, by tool: what an answer's claims are
        checked against (agent/claims.py)."""
        self._changes = 0
        """The changes the current request has made (agent/gate.py MAX_CHANGES_AT_ONCE)."""
        self._done: list[str] = []
        """The changes the current request made, for an error that ends it."""
        self._typed: str | None = None
        """The request the person is typing now (None: a routine's, a resumed or background
        run's): a change grounded in it runs at once after a read (agent/grounding.py)."""
        self._domains: frozenset[str] | None = None
        """The domains the typed request's own text points to (None: no selection)."""
        self._used: dict[str, str] = {}
        """Numbers of the typed request that this request's changes used, with their tool."""
        if conversation_id is None:
            conversation_id = store.create()
        elif not store.exists(conversation_id):
            raise BotpsyError(
                f"There is no conversation {conversation_id}.",
                "List conversations with `botpsy history`.",
            )
        self.conversation_id = conversation_id
        self.decide = Decider(
            gate,
            store,
            conversation_id,
            background=background,
            approval_timeout_s=settings.background_approval_timeout_s,
        )
        """The decide step (steps/decide.py), with the decisions a parked run was given."""

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
                self.store.back_up_changes()  # a restore then loses little

    def _run(
        self,
        text: str,
        *,
        cancel: threading.Event | None = None,
        think: bool = False,
        origin: str | None = None,
    ) -> Iterator[Event]:
        """The request's start: its message kept (defused when it has an ``origin``), what it
        gathers reset, its tools selected (step 1); then the model turns from step 1 on."""
        cancel = cancel or threading.Event()
        history = self.store.messages(self.conversation_id)  # before this request's rows
        if not history:
            self.store.rename(self.conversation_id, text[:60])
        user: dict[str, Any] = {"role": "user", "content": text}
        if origin:
            user = {"role": "user", "content": defuse(text), "origin": origin}
        self._reply.start(user)
        self._sources = []
        self._changes = 0
        self._used = {}
        self._typed = None if origin or self.background else text
        self._domains = (
            frozenset(self.selector.domains_of(text))
            if self.selector is not None and self._typed is not None
            else None
        )
        # this request's tools (agent/selection.py), chosen from its text and the conversation
        # before it: the same every step, so the prompt's start stays cached, unless the model
        # calls a tool outside them (a registered one, or a name that points to a domain): then
        # that domain is offered from the next step on, a second chance within this request
        offer = self._offer(text, history)
        self._keep_tools(offer)
        yield from self._steps(offer, 1, cancel, think)

    def _steps(
        self, offer: RequestTools, first: int, cancel: threading.Event, think: bool
    ) -> Iterator[Event]:
        """Model turns from step ``first`` on, each followed by its tool calls, to an answer."""
        trims = TrimNotices(self.backend.n_ctx or 0)  # what the prompt leaves out, said once
        if first == 1:
            self._ran = []  # the changes carried out in this request (claims are checked)
        for step in range(first, self.settings.max_steps + 1):
            # 1. select tools: the request's set (it grows when the model reaches for another)
            tools = offer.schemas()
            # before any call, the answer's first sentence is held back until it is clear that
            # it does not say a tool is missing ("I can't read your email"): then the domain it
            # names is offered and the step asked again, nothing of it shown
            held = HeldStart(offer.lacking) if offer.may_lack() else None
            # 2. render and 3. stream: the prompt fitted, the model's turn shown as it comes
            completion = yield from self._model_turn(offer, tools, held, trims, step, cancel, think)
            if completion is None:  # the request ended there (its error was yielded)
                return
            yield TurnFinished(step, completion.stats, completion.finish_reason)
            # 4. parse: an answer, or tool calls
            parsed = read_turn(completion, tools)
            # the model reached for a tool the prompt lists but the choice left out, and the
            # grammar made it write another name (the engine says which): the call written is
            # not the one it meant, so its domain is offered and the step asked again, once per
            # request; the prompt is the same, so asking again evaluates nothing new. (A call
            # outside the choice that a backend without the grammar let through is the one
            # meant: it runs, and its domain is offered from the next step on, as below.)
            reached = list(completion.stats.wanted_tools)
            halted = completion.finish_reason == "cancelled" or cancel.is_set()
            if reached and not halted and offer.reached_for(reached):
                continue
            offer.called(c.name for c in parsed.calls if c.name)
            self._keep_tools(offer)  # a domain the model reached for stays with the conversation
            if held is not None and held.lacking and not parsed.calls and not cancel.is_set():
                continue  # asked again with the domain it lacked (the row stays open, empty)
            if completion.finish_reason == "cancelled":
                stopped = self._stopped(bool(parsed.content.strip()))
                self._reply.finish(
                    {"role": "assistant", "content": parsed.content} if parsed.content else None,
                    interrupted=True,
                )
                yield stopped
                return
            if not parsed.calls:
                final, note = answer_row(parsed, self._ran)
                self._reply.finish(final)
                yield Answer(parsed.content, parsed.thinking, step, note)
                return
            # 5. decide, 6. carry out, 7. record: each call in turn, then the next model turn
            turn = turn_calls(parsed, self.settings.max_calls_per_turn)
            stubs = list(turn.result_rows)
            self._reply.finish(turn.row, then=stubs.pop(0))
            if (yield from self._run_calls(turn.calls, stubs, step, cancel, turn.skipped)):
                return
            if cancel.is_set():
                yield self._stopped(False)
                return
        yield Error(
            "step_limit",
            f"Stopped after {self.settings.max_steps} model turns without a final answer. "
            "Ask again more specifically, or raise agent.max_steps in the settings.",
        )

    def _model_turn(
        self,
        offer: RequestTools,
        tools: list[dict[str, Any]],
        held: HeldStart | None,
        trims: TrimNotices,
        step: int,
        cancel: threading.Event,
        think: bool,
    ) -> Generator[Event, None, Completion | None]:
        """Render the prompt (steps/prompt.py) and stream the model's turn (steps/stream.py):
        gives its completion, or None when the request ended here (the error is yielded: the
        prompt does not fit, the model failed, the person stopped it)."""
        try:
            prompt, fitted = self._fit(tools, think)
            self._sources = list(self._context_sources(tools))
            self._reply.taint = tuple(self._sources)  # what the model writes from it
            notice = trims.notice(fitted)
            if notice is not None:
                yield notice
            streamed = yield from stream_turn(
                self.backend,
                prompt,
                tools,
                think=think,
                cancel=cancel,
                may_call=offer.may_call(),
                reply=self._reply,
                held=held,
                busy=self.busy,
            )
        except ContextFull as exc:
            yield Error("context", context_full_message(exc, after_tools=step > 1))
            return None
        except BotpsyError as exc:  # the prompt could not be measured
            streamed = Streamed(None, exc)
        if streamed.failure is not None:  # the reply was cut short
            yield self._stopped() if cancel.is_set() else Error("model", str(streamed.failure))
            return None
        if streamed.completion is None:
            yield Error("internal", "The model backend ended without a completion.")
        return streamed.completion

    def _run_calls(
        self,
        calls: Sequence[tuple[str, ToolCall | ToolCallError]],
        stubs: list[dict[str, Any]],
        step: int,
        cancel: threading.Event,
        skipped: int = 0,
    ) -> Generator[Event, None, bool]:
        """Check, run and record one turn's calls (the first one's row is open); True when the
        run ended here: an approval nobody gave in time ends a background run without another
        model turn, so never with an action (the calls after it are not run; a sentence says so).
        """
        gave_up: list[str] = []
        for call_id, call in calls:
            name, args = (call.name, dict(call.arguments) if isinstance(call, ToolCall) else {})
            if gave_up:
                outcome = Outcome(False, NOT_RUN_AFTER_GIVING_UP, "not-run")
            elif cancel.is_set():
                outcome = Outcome(False, "The user stopped the request before this ran.", "not-run")
            else:
                if isinstance(call, ToolCall):
                    yield ToolStarted(call_id, call.name, dict(call.arguments))
                outcome = yield from self._decide_and_run(call_id, call, cancel)  # 5. and 6.
                if outcome.decided_by == NOBODY_IN_TIME and self.background:
                    gave_up.append(name or "a tool call")
            # 7. record: the call's row for the model, the store's record, the event
            output = observation(outcome, self.settings.max_observation_chars, self._secrets)
            if skipped > 0 and call_id == calls[-1][0]:
                output += skipped_note(len(calls), skipped)
            if outcome.arguments is not None:
                args = outcome.arguments
            message, untrusted = tool_row(call_id, name, args, output, outcome)
            if untrusted is not None:
                self._sources.append(untrusted)
                self._reply.taint = tuple(dict.fromkeys(self._sources))
            if outcome.ok and outcome.action_id is not None:
                self._changes += 1
            then = self._next_row(stubs, step, cancel)
            if gave_up and then is None:
                then = self._reply.next_turn()  # the sentence that ends the run goes there
            unsaved: StoreError | None = None
            try:
                self._reply.finish(message, then=then)
                self.store.record_tool_call(
                    self.conversation_id,
                    call_id=call_id,
                    name=name,
                    arguments=args,
                    decision=outcome.decision,
                    ok=outcome.ok,
                    result=output,
                )
            except StoreError as exc:  # the call ran: it is reported, then the request ends
                unsaved = exc
            if outcome.ok and outcome.action_id is not None:
                self._ran.append(as_ran(name or ""))
            yield result_event(call_id, name, args, output, outcome)
            if unsaved is not None:
                raise unsaved
        if gave_up:
            text = gave_up_sentence(gave_up, self.settings.background_approval_timeout_s)
            self._reply.finish({"role": "assistant", "content": text})
            yield Answer(text, "", step)
            return True
        return False

    def _decide_and_run(
        self, call_id: str, call: ToolCall | ToolCallError, cancel: threading.Event
    ) -> Generator[Event, None, Outcome]:
        """Decide on one call and carry it out: its tool and arguments checked, the gate's
        verdict (steps/decide.py), run at once when allowed, after the approval when it asks
        (steps/carry_out.py), a change logged before and after (steps/record.py)."""
        if isinstance(call, ToolCallError):
            return Outcome(False, call.message, "not-run")
        tool, why = self.gate.resolve(self.registry, call.name, call.raw, call.format)
        if tool is None:
            return Outcome(False, why, "denied")
        try:
            args_model = tool.validate(call.arguments)
        except ToolArgumentsError as exc:
            return Outcome(False, str(exc), "not-run")
        arguments = dict(call.arguments)
        parked_denial = self.decide.denied_while_parked(call_id, tool)
        if parked_denial is not None:  # denied while parked: never runs
            return parked_denial
        context = Context(
            tuple(dict.fromkeys(self._sources)),
            self._changes,
            typed=self._typed,
            domains=self._domains,
            used=tuple(self._used.items()),
        )
        verdict = self.decide.verdict(tool, arguments, context)
        call_context = CallContext(verdict.sources, call_id=call_id)
        if verdict.decision is Decision.DENY:
            return Outcome(False, verdict.message or f"{tool.name} is not allowed.", "denied")
        if verdict.decision is Decision.ALLOW:
            outcome = self._run_allowed(
                call_id, tool, args_model, arguments, verdict, call_context, cancel
            )
        else:  # ASK: a conversation-wide allowance, or the user's decision on this exact call
            approved = yield from self.decide.approve(
                call_id, tool, arguments, args_model, verdict, context, cancel
            )
            if isinstance(approved, Outcome):  # not run
                outcome = approved
            else:
                outcome = self._run_approved(call_id, tool, approved, call_context, cancel)
        # outside content field by field: a value a server set (core/outside.py) taints the
        # result of a tool that otherwise only confirms its own arguments
        outcome.untrusted = tool.untrusted_output or carries_outside(outcome.value)
        if outcome.ok and outcome.action_id is not None:
            for number in verdict.numbers:  # no other tool may ground a value in it now
                self._used.setdefault(number, tool.name)
        return outcome

    def _run_allowed(
        self,
        call_id: str,
        tool: Tool,
        args_model: Any,
        arguments: dict[str, Any],
        verdict: Verdict,
        call_context: CallContext,
        cancel: threading.Event,
    ) -> Outcome:
        """Run a call the gate allows at once; a change (not a read) is logged around it."""
        preset = self.decide.decided.pop(call_id, None)
        entry: int | Outcome | None = None
        at_once = "ran at once (a reversible change you asked for)"
        if verdict.grounded:
            at_once = "ran at once (a reversible change you typed in this request)"
        if preset is not None and preset.approved:  # approved while parked: it says so
            at_once = preset.by or "user"
        if verdict.tier is not Tier.READ:  # a reversible change runs at once: log it
            entry = self._begin(call_id, tool, arguments, verdict, at_once)
            if isinstance(entry, Outcome):  # the log could not record it: not run
                return entry
        outcome = run_with_timeout(
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

    def _run_approved(
        self,
        call_id: str,
        tool: Tool,
        approved: Approved,
        call_context: CallContext,
        cancel: threading.Event,
    ) -> Outcome:
        """Run an approved call, logged around it; edited arguments are told to the model."""
        entry = self._begin(
            call_id, tool, approved.arguments, approved.verdict, approved.decided_by
        )
        if isinstance(entry, Outcome):  # the log could not record it: not run
            return entry
        outcome = run_with_timeout(
            lambda: run_in_context(call_context, lambda: tool.call(approved.args_model)),
            *self._timeout(tool),
            tool.name,
            "approved",
            cancel,
            call_context.stop,
        )
        outcome.decided_by = approved.decided_by
        self._audit(entry, tool, approved.arguments, approved.verdict, outcome)
        if approved.edited is not None:
            outcome.arguments = approved.edited
            shown = json.dumps(approved.edited, ensure_ascii=False)
            outcome.output = f"(The user changed the arguments to {shown}.)\n{outcome.output}"
        return outcome

    def resume(
        self,
        call_id: str,
        decided: Decided,
        *,
        cancel: threading.Event | None = None,
        think: bool = False,
    ) -> Iterator[Event]:
        """Go on with a background run that was parked at ``call_id`` in an earlier process (its
        approval stored, agent/approvals.py) and decided since: the call runs only if
        ``decided`` approves exactly it (its digest), then the turn's other calls and the next
        model turns follow as if the run had never stopped. Everything it needs is in the
        stored conversation: the request, the model's turn with its calls, what ran before.
        """
        self._reply = PendingReply(self.store, self.conversation_id)
        self._done = []
        self._typed, self._domains, self._used = None, None, {}  # nobody is typing it now
        cancel = cancel or threading.Event()
        writer = self.store.writer(self.conversation_id)  # one writer per conversation
        if not writer.acquire(cancel):
            yield Error("cancelled", "Stopped.")
            return
        try:
            found = parked_turn(self.store.messages(self.conversation_id), call_id)
            if found is None:
                yield Error(
                    "internal",
                    "The waiting call is no longer in its conversation (deleted?), so nothing ran.",
                )
                return
            text, step, calls, earlier = found
            row = self.store.reopen_tool_row(self.conversation_id, call_id)
            if row is None:
                yield Error("internal", "The waiting call was already answered; nothing ran.")
                return
            self._reply.adopt(row, {"role": "tool", "tool_call_id": call_id, "content": ""})
            self.decide.decided[call_id] = decided
            # the request's bulk count goes on where it stopped (gate.py MAX_CHANGES_AT_ONCE):
            # the changes its earlier calls made, from the audit log, in whichever process
            self._changes = self.store.changes_of_calls(
                self.conversation_id,
                earlier_call_ids(self.store.messages(self.conversation_id), call_id),
            )
            history = self.store.messages(self.conversation_id)
            offer = self._offer(text, history)
            offer.called(earlier)
            self._keep_tools(offer)
            self._sources = list(self._context_sources(offer.schemas()))
            self._reply.taint = tuple(self._sources)  # what the model writes from it
            stubs = [result_row(i, c.name) for i, c in calls[1:]]

            def events() -> Iterator[Event]:
                if (yield from self._run_calls(calls, stubs, step, cancel)):
                    return
                if cancel.is_set():
                    yield self._stopped(False)
                    return
                yield from self._steps(offer, step + 1, cancel, think)

            yield from logged_events(events(), self.conversation_id, text)
        except StoreError as exc:
            yield Error("storage", self._storage_message(exc))
        finally:
            self.decide.decided.pop(call_id, None)
            try:
                with contextlib.suppress(StoreError):  # the next open marks the row
                    self._reply.abandon()
            finally:
                writer.release()
                self.store.back_up_changes()  # a restore then loses little

    def _offer(self, text: str | None, history: list[dict[str, Any]]) -> RequestTools:
        """The tools of a request ``text`` (steps/tools_offered.py ``offer_tools``)."""
        return offer_tools(
            self.store,
            self.conversation_id,
            self.registry,
            self.selector,
            self.backend,
            self.settings,
            text,
            history,
        )

    def _keep_tools(self, offer: RequestTools) -> None:
        """Remember the conversation's tool set (steps/tools_offered.py ``keep_tool_set``)."""
        selecting = self.selector is not None
        keep_tool_set(self.store, self.conversation_id, offer, self.settings, selecting)

    def _messages(self) -> list[dict[str, Any]]:
        """The prompt as stored (steps/prompt.py ``prompt_messages``)."""
        stored = self.store.messages(self.conversation_id)
        return prompt_messages(self.settings.system_prompt, stored)

    def _fit(
        self, tools: list[dict[str, Any]], think: bool, extra: list[dict[str, Any]] | None = None
    ) -> tuple[list[dict[str, Any]], Fitted]:
        """``_messages()`` (+ ``extra``) fitted into the backend's context (steps/prompt.py)."""
        return fit_prompt(
            self.backend,
            self._messages() + (extra or []),
            tools,
            think=think,
            reply_tokens=self.settings.reply_tokens,
            chunk_turns=self.settings.trim_chunk_turns,
        )

    def _context_sources(self, tools: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
        """The untrusted content of this request's context (steps/prompt.py)."""
        stored = self.store.messages(self.conversation_id)
        return context_sources(stored, self.registry, tools)

    def _timeout(self, tool: Tool) -> tuple[float, str]:
        """Seconds ``tool`` may run and the setting that says so: the tool's own entry in
        agent.tool_timeouts, else its adapter's, else agent.tool_timeout_s."""
        return tool_timeout(tool, self.settings.tool_timeout_s, self.settings.tool_timeouts)

    def _begin(
        self, call_id: str, tool: Tool, arguments: dict[str, Any], verdict: Verdict, by: str
    ) -> int | Outcome:
        """Log a change before it runs (steps/record.py ``begin_change``)."""
        return begin_change(self.audit, self.conversation_id, call_id, tool, arguments, verdict, by)

    def _audit(
        self, entry: int, tool: Tool, arguments: dict[str, Any], verdict: Verdict, outcome: Outcome
    ) -> None:
        """Record how a logged change ended (steps/record.py ``finish_change``)."""
        done = finish_change(
            self.audit, self.registry, self._secrets, entry, tool, arguments, verdict, outcome
        )
        if done is not None:
            self._done.append(done)

    def _next_row(
        self, stubs: list[dict[str, Any]], step: int, cancel: threading.Event
    ) -> dict[str, Any] | None:
        """The row to open when a tool row is finished: the next call's, or the next turn's."""
        if stubs:
            return stubs.pop(0)
        if cancel.is_set() or step >= self.settings.max_steps:
            return None
        return self._reply.next_turn()

    def _stopped(self, wrote: bool | None = None) -> Error:
        """The end of a request the person stopped, saying what of it was kept."""
        if wrote is None:
            wrote = bool(self._reply.text.strip())
        if wrote:
            kept = "What the model had written is kept in the conversation, marked as cut off."
        else:
            kept = "Your request is kept in the conversation; the model had not written more."
        if self._done:
            kept += " Before the stop, this request did: " + "; ".join(self._done) + "."
        return Error("cancelled", "Stopped.", kept)

    def _storage_message(self, exc: StoreError) -> str:
        """A failed write in words: what failed, and what this request had done before."""
        done = (
            " Before that, this request did: " + "; ".join(self._done) + "."
            if self._done
            else " Nothing was changed by this request."
        )
        return f"The request stopped: {exc}{done}"

    def warm_messages(self, tools: list[dict[str, Any]], think: bool) -> list[dict[str, Any]]:
        """The history as the next (short) request will send it, after the context budget: what
        ``App.warm`` evaluates ahead, so that the tokens match."""
        try:
            messages, _ = self._fit(tools, think, [{"role": "user", "content": ""}])
        except (ContextFull, BotpsyError):
            return self._messages()[:1]
        return messages[:-1]

    def warm_tools(self) -> list[dict[str, Any]]:
        """The tools the conversation's next request starts with, unless it grows the set."""
        history = self.store.messages(self.conversation_id)
        return self._offer(None, history).schemas()
