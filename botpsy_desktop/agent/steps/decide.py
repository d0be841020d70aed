"""Decide: the gate's verdict on one tool call, and, when it asks, the person's decision (or a
conversation-wide allowance, or one made while a background run was parked)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.events import ApprovalNeeded, ApprovalRequest, Event
from botpsy_desktop.agent.gate import Context, Decision, Gate, Verdict
from botpsy_desktop.agent.provenance import Provenance
from botpsy_desktop.agent.steps.carry_out import Outcome
from botpsy_desktop.agent.steps.parked import NOBODY_IN_TIME, Decided, waited
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.tools import Tool, ToolArgumentsError

MAX_ASKED_AGAIN = 3
"""How often an approved call is asked again because what it acts on changed meanwhile."""


@dataclass(frozen=True)
class Approved:
    """An asked call the person approved: the arguments it runs with (edited or not), their
    validated model, the verdict it runs under, and who approved it."""

    arguments: dict[str, Any]
    args_model: Any
    verdict: Verdict
    decided_by: str
    edited: dict[str, Any] | None = None


class Decider:
    """The decide step of one conversation: the gate's verdict on a call, and for a call the
    gate asks about, the approval (the person's, a conversation-wide allowance, or one decided
    while a background run was parked: :attr:`decided`).

    A background run's request waits in the gate's inbox and is never answered by an
    allowance; nobody deciding in ``approval_timeout_s`` denies it (:data:`NOBODY_IN_TIME`)."""

    def __init__(
        self,
        gate: Gate,
        store: ConversationStore,
        conversation_id: str,
        *,
        background: bool,
        approval_timeout_s: float | None,
    ) -> None:
        self.gate = gate
        self.store = store
        self.conversation_id = conversation_id
        self.background = background
        self.approval_timeout_s = approval_timeout_s
        self.decided: dict[str, Decided] = {}
        """Decisions made while a stored run was parked, by call id (agent/loop.py resume)."""

    def verdict(self, tool: Tool, arguments: dict[str, Any], context: Context) -> Verdict:
        """The gate's verdict on a call, with the provenance of the conversation's values."""
        provenance = Provenance.from_messages(self.store.messages(self.conversation_id))
        return self.gate.check(tool, arguments, provenance, context=context)

    def denied_while_parked(self, call_id: str, tool: Tool) -> Outcome | None:
        """The outcome of a call denied while its run was parked (it never runs), else None."""
        preset = self.decided.get(call_id)
        if preset is None or preset.approved:
            return None
        del self.decided[call_id]
        declined = Outcome(False, self.declined(tool.name, preset.by), "denied")
        declined.decided_by = preset.by
        return declined

    def approve(
        self,
        call_id: str,
        tool: Tool,
        arguments: dict[str, Any],
        args_model: Any,
        verdict: Verdict,
        context: Context,
        cancel: threading.Event,
    ) -> Generator[Event, None, Approved | Outcome]:
        """Takes a call the gate asks about; yields ApprovalNeeded while it waits; gives it
        Approved, or the Outcome of a call that does not run (declined, edited into something
        invalid or forbidden, its approval not for this exact call).

        An approval binds to the effect its receipt showed (agent/gate.py ``Resolution``): just
        before the approved call runs, what it acts on is resolved again; when it differs (the
        alarm it named is gone and another rings at that time), the person is asked again with
        the new receipt (a background run parks again), at most MAX_ASKED_AGAIN times."""
        edited: dict[str, Any] | None = None
        scope = None
        if not self.background:
            scope = self.gate.covering(self.conversation_id, tool, arguments, verdict)
        if scope is not None:
            decided_by = f"allowed for this conversation ({scope.describe()})"
            return Approved(arguments, args_model, verdict, decided_by)
        request = self._request(call_id, tool, arguments, verdict)
        decided = self.decided.pop(call_id, None)
        if decided is not None:  # a stored run resumed: decided while it was parked
            same_call = decided.approved and decided.digest == request.digest
            if same_call and decided.effect == request.effect:
                request.settle(True, decided.by, decided.edited_arguments)
            elif same_call:  # approved on a receipt that no longer holds: asked again
                verdict = self._ask_again(tool, arguments, context)
                if verdict.decision is Decision.DENY:
                    return Outcome(False, verdict.message, "denied")
                request = self._request(call_id, tool, arguments, verdict)
                yield from self.ask(request, cancel)
            else:
                request.settle(False, decided.by if not decided.approved else "not this call")
        else:
            yield from self.ask(request, cancel)
        asked_again = 0
        while True:
            if not request.approved:
                declined = Outcome(False, self.declined(tool.name, request.decided_by), "denied")
                declined.decided_by = request.decided_by
                return declined
            if request.edited_arguments is not None:
                edited = request.edited_arguments
                try:
                    args_model = tool.validate(edited)
                except ToolArgumentsError as exc:
                    return Outcome(
                        False, f"The user's edited arguments were invalid: {exc}", "denied"
                    )
                verdict = self.gate.check(tool, edited, context=context)
                if verdict.decision is Decision.DENY:
                    return Outcome(False, verdict.message, "denied")
            if not request.consume(tool.name, arguments if edited is None else edited):
                return Outcome(
                    False,
                    f"{tool.name} was not run: the approval does not match this exact call "
                    "(or was used already).",
                    "denied",
                )
            if request.scoped and request.scope is not None:
                self.gate.grants.add(request.scope)
            # just before it runs: is what it acts on still what the receipt showed?
            if edited is not None or not request.effect:
                break
            if self.gate.effect(tool, arguments).digest == request.effect:
                break
            asked_again += 1
            if asked_again > MAX_ASKED_AGAIN:
                return Outcome(
                    False,
                    f"{tool.name} was not run: what it would act on kept changing while "
                    "it waited for approval. Tell the user; do not try it again now.",
                    "denied",
                )
            verdict = self._ask_again(tool, arguments, context)
            if verdict.decision is Decision.DENY:
                return Outcome(False, verdict.message, "denied")
            request = self._request(call_id, tool, arguments, verdict)
            yield from self.ask(request, cancel)
        ran_with = arguments if edited is None else edited
        return Approved(ran_with, args_model, verdict, request.decided_by or "user", edited)

    def _request(
        self, call_id: str, tool: Tool, arguments: dict[str, Any], verdict: Verdict
    ) -> ApprovalRequest:
        return self.gate.request(
            call_id,
            tool,
            arguments,
            verdict,
            conversation_id=self.conversation_id,
            background=self.background,
        )

    def ask(self, request: ApprovalRequest, cancel: threading.Event) -> Iterator[Event]:
        """Show ``request`` and wait for the decision (a background run's waits in the inbox;
        the scheduler parks the run at the ApprovalNeeded event)."""
        if self.background:  # the pending-approvals queue shows it while the run waits
            self.gate.inbox.post(request, origin=self.conversation_id)
        try:
            yield ApprovalNeeded(request)
            if self.background and not request.decided:
                self._wait_in_inbox(request, cancel)
        finally:
            if self.background:
                self.gate.inbox.discard(request)

    def _ask_again(self, tool: Tool, arguments: dict[str, Any], context: Context) -> Verdict:
        """The verdict for an approved call whose resolved effect changed: always asks, with
        the receipt of what it would act on now."""
        provenance = Provenance.from_messages(self.store.messages(self.conversation_id))
        return self.gate.ask_again(tool, arguments, provenance, context=context)

    def _wait_in_inbox(self, request: ApprovalRequest, cancel: threading.Event) -> None:
        """A background run's request waits for the user: never answered automatically.

        Only for a consumer that reads on without deciding; the scheduler parks the run at
        the ApprovalNeeded event instead, so that the engine serves others meanwhile.
        """
        timeout = self.approval_timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        while not request.decided:
            if cancel.is_set() or (deadline is not None and time.monotonic() >= deadline):
                with contextlib.suppress(RuntimeError):  # decided meanwhile
                    request.deny(by="stopped" if cancel.is_set() else NOBODY_IN_TIME)
                break
            request.wait(0.05)

    def declined(self, tool: str, by: str) -> str:
        """What the model reads when a call was not approved (``by``: who decided)."""
        if by == NOBODY_IN_TIME:
            return (
                f"{tool} was not run: it waited for the user's approval for "
                f"{waited(self.approval_timeout_s)} and nobody answered "
                "(agent.background_approval_timeout_s). Say so in your answer; do not try it "
                "again in this run."
            )
        if by == "stopped":
            return f"{tool} was not run: the request was stopped while it waited for approval."
        return (
            f"The user declined {tool}; it was not run. Do not try it again unless the user asks."
        )
