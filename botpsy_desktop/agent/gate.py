"""The confirmation gate: code, not prompt, decides which calls may run without the user."""

from __future__ import annotations

import json
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from botpsy_desktop.agent.events import ApprovalRequest, Scope
from botpsy_desktop.agent.policy import NEVER_SCOPED, Assessment, Policy, within
from botpsy_desktop.agent.provenance import Finding, Provenance
from botpsy_desktop.agent.tools import Effect, Tool, ToolRegistry

ALWAYS_ASK = NEVER_SCOPED | {Effect.OUTBOUND, Effect.PERSONAL_DATA}
"""What the app never lets "allow for this conversation" cover: sending, money, deleting."""


class Decision(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one call: the decision, what the call does, and the receipt."""

    decision: Decision
    assessment: Assessment | None
    findings: tuple[Finding, ...] = ()
    receipt: str = ""
    lines: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    message: str = ""
    """For DENY: the sentence the model reads."""

    @property
    def scopable(self) -> bool:
        return self.assessment is not None and self.assessment.scopable and not self.findings


# Look-alike letters (Cyrillic, Greek) folded to Latin, only to name a trick in the message.
_CONFUSABLES = str.maketrans(
    "аеорсухіјѕԁɡոѵԝАВЕКМНОРСТХІЈЅαοτνικΑΒΕΗΙΚΜΝΟΡΤΧΥΖ",
    "aeopcyxijsdgnvwABEKMHOPCTXIJSaotvikABEHIKMNOPTXYZ",
)
_INVISIBLE_RE = re.compile(r"[\s\u00ad\u180e\u200b-\u200f\u2028-\u202f\u205f-\u206f\ufeff]+")
_XML_NAME_RE = re.compile(r"<function=([^>]*)>")
_JSON_NAME_RE = re.compile(r'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


def skeleton(name: str) -> str:
    """A name folded as far as tricks go: width, case, look-alikes and invisible characters."""
    folded = unicodedata.normalize("NFKC", name).translate(_CONFUSABLES)
    return _INVISIBLE_RE.sub("", folded).casefold()


def raw_name(raw: str, fmt: str) -> str | None:
    """The tool name exactly as written in the model's raw call text (before any stripping)."""
    match = (_XML_NAME_RE if fmt == "xml" else _JSON_NAME_RE).search(raw)
    return None if match is None else match.group(1)


class ScopeGrants:
    """ "Allow for this conversation" grants, kept in memory while the app runs."""

    def __init__(self) -> None:
        self._grants: dict[str, list[Scope]] = {}
        self._lock = threading.Lock()

    def add(self, scope: Scope) -> None:
        with self._lock:
            self._grants.setdefault(scope.conversation_id, []).append(scope)

    def covering(self, conversation_id: str, tool: str, assessment: Assessment) -> Scope | None:
        """The grant that covers this call, if any (same conversation, tool and targets)."""
        with self._lock:
            grants = list(self._grants.get(conversation_id, ()))
        for scope in grants:
            if scope.tool != tool:
                continue
            granted = {k: set(v) for k, v in scope.targets}
            if within(assessment.targets, granted):
                return scope
        return None

    def revoke(self, conversation_id: str) -> None:
        with self._lock:
            self._grants.pop(conversation_id, None)

    def clear(self) -> None:
        """Forget every grant (the user switched conversation-wide allowances off)."""
        with self._lock:
            self._grants.clear()

    def of(self, conversation_id: str) -> list[Scope]:
        with self._lock:
            return list(self._grants.get(conversation_id, ()))


@dataclass(frozen=True)
class InboxEntry:
    """A waiting request, which run asked (its conversation) and when (``time.time()``)."""

    request: ApprovalRequest
    origin: str
    posted_at: float


class ApprovalInbox:
    """Approval requests nobody is looking at yet (background runs): they wait here.

    Listeners are called (on the posting thread) with each new request and again when a
    request leaves the inbox (decided, stopped or timed out): ``request.decided`` tells which.
    """

    def __init__(self) -> None:
        self._pending: list[ApprovalRequest] = []
        self._listeners: list[Callable[[ApprovalRequest], None]] = []
        self._lock = threading.Lock()
        self._info: dict[int, tuple[str, float]] = {}

    def post(self, request: ApprovalRequest, *, origin: str = "") -> None:
        """Add ``request``; ``origin`` names the run that asked (its conversation id)."""
        with self._lock:
            self._pending.append(request)
            self._info[id(request)] = (origin, time.time())
            listeners = list(self._listeners)
        for listener in listeners:
            listener(request)

    def entries(self) -> list[InboxEntry]:
        """The undecided requests, oldest first, with their origin and posting time."""
        with self._lock:
            return [
                InboxEntry(r, *self._info.get(id(r), ("", 0.0)))
                for r in self._pending
                if not r.decided
            ]

    def pending(self) -> list[ApprovalRequest]:
        with self._lock:
            self._pending = [r for r in self._pending if not r.decided]
            return list(self._pending)

    def discard(self, request: ApprovalRequest) -> None:
        with self._lock:
            self._pending = [r for r in self._pending if r is not request]
            was = self._info.pop(id(request), None) is not None
            listeners = list(self._listeners) if was else []
        for listener in listeners:
            listener(request)

    def add_listener(self, listener: Callable[[ApprovalRequest], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[ApprovalRequest], None]) -> None:
        with self._lock:
            self._listeners = [x for x in self._listeners if x is not listener]


@dataclass
class Gate:
    """Decides per call. Read-only calls run; every other effect waits for the user's approval.

    The decision comes from the tool's declared effects and its arguments (:class:`Policy`):
    a read-only tool whose arguments would contact a web address asks, a payment always asks
    with the amount and payee shown, and a tool with undeclared effects is treated as the most
    dangerous kind. Unknown names and name tricks are denied. Values that came from tool output
    rather than from the user (:class:`Provenance`) are named in the receipt and stop any
    conversation-wide allowance from applying.
    """

    policy: Policy = field(default_factory=Policy)
    grants: ScopeGrants = field(default_factory=ScopeGrants)
    inbox: ApprovalInbox = field(default_factory=ApprovalInbox)
    offer_scopes: bool = True
    """Whether "allow for this conversation" is offered at all (a user preference)."""
    never_scoped: frozenset[Effect] = NEVER_SCOPED
    """Effects a conversation-wide allowance never covers (the app passes ``ALWAYS_ASK``)."""

    # --- names ---------------------------------------------------------------------------------

    def resolve(
        self, registry: ToolRegistry, name: str, raw: str = "", fmt: str = "xml"
    ) -> tuple[Tool | None, str]:
        """The tool named exactly ``name`` (and written exactly so in ``raw``), else a reason."""
        names = registry.names()
        exact = name in names and (not raw or raw_name(raw, fmt) == name)
        if exact:
            tool = registry.get(name)
            if tool is not None and tool.name == name:
                return tool, ""
        available = ", ".join(names) or "none"
        written = raw_name(raw, fmt) if raw else None
        shown = written if written is not None else name
        lookalikes = [n for n in names if skeleton(n) == skeleton(shown)]
        if lookalikes:
            return None, (
                f"{json.dumps(shown, ensure_ascii=True)} is not the exact name of a tool: it "
                f"differs from {lookalikes[0]} in letter case, look-alike characters or spaces, "
                "so nothing was run. Tool names must be written exactly."
            )
        return None, f"There is no tool named {name!r}. Available tools: {available}."

    # --- calls ---------------------------------------------------------------------------------

    def decide(self, tool: Tool | None, arguments: dict[str, Any]) -> Decision:
        """ALLOW for a read-only call, DENY for no tool, ASK for everything else."""
        if tool is None:
            return Decision.DENY
        return Decision.ALLOW if self.policy.assess(tool, arguments).read_only else Decision.ASK

    def check(
        self,
        tool: Tool | None,
        arguments: Mapping[str, Any],
        provenance: Provenance | None = None,
    ) -> Verdict:
        """The decision for one call with its receipt, reasons and provenance findings."""
        if tool is None:
            return Verdict(Decision.DENY, None, message="There is no such tool.")
        assessment = self.policy.assess(tool, arguments)
        findings = tuple(provenance.findings(arguments)) if provenance is not None else ()
        if assessment.read_only:
            return Verdict(Decision.ALLOW, assessment, findings)
        reasons = list(assessment.reasons) + [f.sentence() for f in findings]
        receipt = self._text(tool, arguments, assessment, reasons)
        return Verdict(
            Decision.ASK,
            assessment,
            findings,
            receipt=receipt,
            lines=assessment.lines,
            reasons=tuple(reasons),
        )

    def receipt(self, tool: Tool, arguments: dict[str, Any]) -> str:
        """Plain words and the full arguments of what will happen if approved."""
        assessment = self.policy.assess(tool, arguments)
        return self._text(tool, arguments, assessment, list(assessment.reasons))

    def scope_for(self, conversation_id: str, verdict: Verdict) -> Scope | None:
        """What "allow for this conversation" would cover, or None where it is not offered."""
        if not self.scopable(verdict) or verdict.assessment is None:
            return None
        a = verdict.assessment
        return Scope(conversation_id, a.tool, a.targets)

    def scopable(self, verdict: Verdict) -> bool:
        """May a conversation-wide allowance offer or cover this call (preference included)?"""
        return (
            self.offer_scopes
            and verdict.scopable
            and verdict.assessment is not None
            and not (verdict.assessment.effects & self.never_scoped)
        )

    def request(
        self,
        call_id: str,
        tool: Tool,
        arguments: dict[str, Any],
        verdict: Verdict,
        *,
        conversation_id: str = "",
        background: bool = False,
    ) -> ApprovalRequest:
        """The approval request for an ASK verdict."""
        assert verdict.assessment is not None
        return ApprovalRequest(
            call_id,
            tool.name,
            arguments,
            verdict.receipt,
            sorted(e.value for e in verdict.assessment.effects),
            lines=verdict.lines,
            reasons=verdict.reasons,
            scope=None if background else self.scope_for(conversation_id, verdict),
            background=background,
        )

    @staticmethod
    def _text(
        tool: Tool, arguments: Mapping[str, Any], assessment: Assessment, reasons: Sequence[str]
    ) -> str:
        effects = ", ".join(sorted(e.value for e in assessment.effects))
        parts = [f"Run {tool.describe_call(arguments)} — effects: {effects}."]
        parts += list(assessment.lines)
        if reasons:
            parts.append("Why it asks: " + "; ".join(reasons) + ".")
        return "\n".join(parts)
