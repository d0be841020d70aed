"""The confirmation gate: code, not prompt, decides which calls may run without the user."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from botpsy_desktop.agent.events import ApprovalRequest, Scope, call_digest
from botpsy_desktop.agent.grounding import Request, ground, text_grounded
from botpsy_desktop.agent.people import Recipients, weigh
from botpsy_desktop.agent.policy import (
    EFFECT_REASONS,
    EMAIL_RE,
    NEVER_SCOPED,
    Assessment,
    Policy,
    within,
)
from botpsy_desktop.agent.provenance import Finding, Provenance
from botpsy_desktop.agent.receipts import build_receipt
from botpsy_desktop.agent.tools import Effect, Tier, Tool, ToolRegistry
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.people import AddressBookView
from botpsy_desktop.core.tools import Resolved

ALWAYS_ASK = NEVER_SCOPED | {Effect.OUTBOUND, Effect.PERSONAL_DATA}
"""What the app never lets "allow for this conversation" cover: sending, money, deleting."""

_ALWAYS_ASK_EFFECTS = ALWAYS_ASK
"""Effects that make any call the always-ask tier, declared or inferred from its arguments."""


class Decision(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one call: the decision, what the call does, and the receipt.

    ``summary`` is the call in plain words, ``details`` the tool, tier, effects and JSON for a
    Details section; ``receipt`` is the whole plain text (summary, lines and why it asks).
    ``tier`` is the call's effective tier; ``sources`` the untrusted content in its context.
    """

    decision: Decision
    assessment: Assessment | None
    findings: tuple[Finding, ...] = ()
    receipt: str = ""
    lines: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    message: str = ""
    """For DENY: the sentence the model reads."""
    tier: Tier = Tier.ASK
    summary: str = ""
    details: str = ""
    sources: tuple[str, ...] = ()
    texts: tuple[tuple[str, str], ...] = ()
    """Long text arguments whole (agent/receipts.py ``Receipt.texts``)."""
    grounded: bool = False
    """It runs at once in a tainted context because the person typed it in this request."""
    numbers: tuple[str, ...] = ()
    """The numbers of the typed request this change uses (no other tool may use them)."""
    effect: str = ""
    """For ASK: :attr:`Resolution.digest` of what the receipt shows the call acts on."""

    @property
    def scopable(self) -> bool:
        """May "allow for this conversation" cover calls like this one (before preferences)?"""
        return (
            self.assessment is not None
            and not self.assessment.undeclared
            and self.tier is not Tier.ASK
            and not self.findings
        )


@dataclass(frozen=True)
class Resolution:
    """What a call would act on now, resolved the way its tool will (core/tools.py
    ``Tool.resolve``; nothing changes): the items, or why its references name nothing.

    A person approves this, not the call's words: the receipt shows :meth:`lines`, the
    approval keeps :attr:`digest`, and just before the approved call runs it is resolved again;
    when the digest differs (the alarm it named was removed and another set for that time),
    the call does not run and the person is asked again with the new receipt."""

    items: tuple[Resolved, ...] = ()
    problem: str = ""
    declared: bool = False
    """Whether the tool declares a resolution at all (else :attr:`digest` is empty)."""

    @property
    def digest(self) -> str:
        if not self.declared:
            return ""
        body = json.dumps(
            {
                "items": [[i.kind, i.ref, dict(i.state)] for i in self.items],
                "problem": self.problem,
            },
            sort_keys=True,
            ensure_ascii=False,
            default=str,
        )
        return hashlib.sha256(body.encode("utf-8")).hexdigest()

    def lines(self) -> list[str]:
        """One line per item for the receipt (the text may be from outside: receipts escape)."""
        if self.problem:
            return [f"nothing it can name now: {self.problem}"]
        shown = [i.shown for i in self.items[:MAX_RESOLVED_LINES]]
        more = len(self.items) - MAX_RESOLVED_LINES
        if more > 0:
            shown.append(f"and {more} more")
        return shown


MAX_RESOLVED_LINES = 10
"""Items a receipt names one by one; the rest are counted."""

CHANGED_SINCE = (
    "what it would act on changed since it was approved, so it did not run; this receipt "
    "shows it as it is now"
)
"""Why a call that was approved asks again (its resolved effect differs)."""


def resolve_effect(tool: Tool, arguments: Mapping[str, Any]) -> Resolution:
    """What ``tool`` called with ``arguments`` would act on now (read-only)."""
    if tool.resolve is None:
        return Resolution()
    try:
        items = tuple(tool.resolve(arguments))
    except BotpsyError as exc:
        return Resolution(problem=" ".join(str(exc).split())[:300], declared=True)
    except Exception as exc:  # a lookup that fails: bound to the failure, never to nothing
        return Resolution(
            problem=f"it could not be looked up ({type(exc).__name__})", declared=True
        )
    return Resolution(items, declared=True)


def _stored(tool: Tool) -> tuple[str, ...]:
    """The arguments whose addresses ``tool`` keeps rather than contacts (the app's tools)."""
    return () if tool.author else tool.stores


def _unnamed(findings: tuple[Finding, ...], recipients: Recipients) -> tuple[Finding, ...]:
    """The findings left once the addresses the person named (their own address book gave
    them for a name they typed, agent/people.py) no longer count as copied from outside."""
    if not recipients.named:
        return findings
    kept = []
    for f in findings:
        found = {a.casefold() for a in EMAIL_RE.findall(f.value)}
        if found and found <= recipients.named and len(f.value) <= 200:
            continue
        kept.append(f)
    return tuple(kept)


_DESCRIPTIONS = "the descriptions of "


def described_by(author: str) -> str:
    """The name of a tool server's descriptions as untrusted content in a request."""
    return f"{_DESCRIPTIONS}{author}'s tools"


MAX_CHANGES_AT_ONCE = 3
"""Changes one request makes without asking: the next change asks (real bulk stays protected:
"set a timer and another one", "make a folder and put a note in it" just happen)."""


@dataclass(frozen=True)
class Context:
    """What is in a request's context, for the gate: ``sources`` names each piece of content the
    user did not type (tool output from outside, replies written while reading it, a tool
    server's descriptions, a stored request of untrusted origin). Empty: clean. ``changes``:
    the changes this request has made so far."""

    sources: tuple[str, ...] = ()
    changes: int = 0
    typed: str | None = None
    """The request the person is typing now (None: a routine, a background run, another
    app's request): what a change may be grounded in (agent/grounding.py)."""
    domains: frozenset[str] | None = None
    """The domains the typed request's own text points to (agent/selection.py); None: no
    selection runs."""
    used: tuple[tuple[str, str], ...] = ()
    """Numbers earlier changes of this request took from it, each with the tool that did."""

    @property
    def tainted(self) -> bool:
        return bool(self.sources)

    @classmethod
    def clean(cls) -> Context:
        return cls()


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

    def covering_call(
        self, conversation_id: str, tool: Tool, arguments: Mapping[str, Any]
    ) -> Scope | None:
        """The grant that covers this call: same conversation and tool, and the same values of
        every declared target field (or, with none declared, identical arguments)."""
        with self._lock:
            grants = list(self._grants.get(conversation_id, ()))
        digest = call_digest(tool.name, dict(arguments))
        values = dict(tool.target_values(arguments))
        for scope in grants:
            if scope.tool != tool.name:
                continue
            if scope.exact is not None:
                if scope.exact == digest:
                    return scope
                continue
            if not tool.targets:
                continue
            granted = {k: set(v) for k, v in scope.targets}
            if all(
                key in granted and set(vals) <= granted[key] and (bool(vals) or not granted[key])
                for key, vals in values.items()
            ):
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
    """Decides per call, from the tool's declared tier and the request's :class:`Context`.

    Trust follows the data, per request: a request's context is clean until content the user
    did not type is in it (any tool output still in the rendered prompt, or a routine stored
    from such content). Then:

    * read calls run, except those that send text to a service (``sends``, e.g. the place
      name a weather look-up geocodes) that is not in the request the person is typing now,
      while the context holds words they did not type (content read, a server's descriptions);
    * reversible local changes (declared with an inverse) run at once in a clean context, and
      in a tainted one only when the person typed them, tool and values, in this request
      (agent/grounding.py); otherwise they ask (always, with ``ask_every_change``); "allow for this
      conversation" then binds to the values of the tool's declared target fields (else to
      identical arguments);
    * the always-ask tier (outbound, money, personal data, destructive or bulk, routines, the
      gate's own settings) always asks and is never allowed for the conversation.

    :class:`Policy` only adds caution: a web address, recipients or a telling verb make a call
    stricter than declared; a tool with undeclared effects is treated as the most dangerous
    kind. Unknown names and name tricks are denied. Values that came from tool output rather
    than from the user (:class:`Provenance`) are named in the receipt, taint the context, and
    stop any allowance from being offered for that call.
    """

    policy: Policy = field(default_factory=Policy)
    grants: ScopeGrants = field(default_factory=ScopeGrants)
    inbox: ApprovalInbox = field(default_factory=ApprovalInbox)
    offer_scopes: bool = True
    """Whether "allow for this conversation" is offered at all (a user preference)."""
    never_scoped: frozenset[Effect] = NEVER_SCOPED
    """Effects a conversation-wide allowance never covers (the app passes ``ALWAYS_ASK``)."""
    ask_every_change: bool = False
    """The "Ask before every change" setting: reversible changes ask even in a clean context."""
    folders: tuple[str, ...] = ()
    """The person's configured folders: a path's folder part may be one of them and still be
    grounded in a request that names only what is inside (agent/grounding.py)."""
    people: AddressBookView | None = None
    """The address books' local copy: whom a recipient is, and whether the person named them
    (agent/people.py)."""

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

    def decide(
        self, tool: Tool | None, arguments: dict[str, Any], context: Context | None = None
    ) -> Decision:
        """ALLOW, ASK or DENY for one call (see :meth:`check`)."""
        return self.check(tool, arguments, context=context).decision

    def tier(
        self,
        tool: Tool,
        arguments: Mapping[str, Any],
        assessment: Assessment,
        declared_tier: Tier | None = None,
    ) -> Tier:
        """The call's effective tier: its declaration, made stricter (never looser) by what the
        policy infers from its name and arguments. ``declared_tier`` (an inverse's own
        declaration) replaces the tool's declared tier and effects; inferred effects still count.
        """
        if declared_tier is not None and not assessment.undeclared:
            inferred = assessment.effects - assessment.declared
            if inferred & _ALWAYS_ASK_EFFECTS:
                return Tier.ASK
            return declared_tier
        declared = tool.tier_for(arguments)
        if assessment.undeclared or (assessment.effects & _ALWAYS_ASK_EFFECTS):
            return Tier.ASK
        if tool.tier is None:  # an old-style declaration: effects only
            return Tier.READ if assessment.read_only else Tier.ASK
        if declared is Tier.READ and not assessment.read_only:
            return Tier.ASK  # a "read" tool whose arguments write: no inverse is declared
        return declared

    def check(
        self,
        tool: Tool | None,
        arguments: Mapping[str, Any],
        provenance: Provenance | None = None,
        *,
        context: Context | None = None,
        tier: Tier | None = None,
        why: tuple[str, ...] = (),
    ) -> Verdict:
        """The decision for one call with its receipt, reasons and provenance findings.

        ``tier``: the call's declared tier where its caller declares it instead of the tool
        (an undo: the inverse's own declaration, see core/tools.py Inverse). ``why``: reasons
        the caller knows that the receipt must give (an undo of something changed since).

        * read: runs, unless the context is tainted and the call sends text off the computer
          (a declared ``sends`` field) that the request typed now does not hold: then it asks;
        * reversible: runs in a clean context, or in a tainted one when grounded in the typed
          request (unless ``ask_every_change`` or past the bulk limit), asks otherwise;
        * ask: always asks, never covered by an allowance.
        A provenance finding (an argument value seen in untrusted output) taints the context
        even when the caller passed none.
        """
        if tool is None:
            return Verdict(Decision.DENY, None, message="There is no such tool.")
        context = context or Context()
        assessment = self.policy.assess(tool, arguments)
        findings = tuple(provenance.findings(arguments)) if provenance is not None else ()
        recipients = weigh(arguments, self.people, context.typed, _stored(tool))
        findings = _unnamed(findings, recipients)
        sources = context.sources or tuple(
            dict.fromkeys(f"what {f.source} returned" for f in findings)
        )
        tier = self.tier(tool, arguments, assessment, tier)
        reasons = [] if tier is Tier.REVERSIBLE else [*why, *assessment.reasons]
        reasons += recipients.concerns
        if tier is Tier.ASK and tool.tier is not None and Effect.LOCAL_WRITE in assessment.effects:
            # a declared always-ask tool asks for what its summary says, not for a local write
            local = EFFECT_REASONS[Effect.LOCAL_WRITE]
            reasons = [r for r in reasons if not r.lower().startswith(local)]
        if tier is Tier.READ:
            # text leaving to a third party, in a context that holds a third party's words
            # (content read, a tool server's descriptions), asks unless the person is typing
            # that very text now: their earlier messages are exactly the data a planted
            # instruction asks for
            sent = tool.sent(arguments)
            unsent = self._not_typed(tool, arguments, sent, context) if sources else []
            if not (sources and unsent):
                return Verdict(
                    Decision.ALLOW,
                    assessment,
                    findings,
                    tier=tier,
                    sources=sources,
                    summary=tool.summarize(arguments),
                )
            reasons.append(
                f"it sends what is in {', '.join(unsent)} to an online service, and this "
                "request holds words you did not type, while what it sends is not all in the "
                "request you are typing now"
            )
        elif tier is Tier.REVERSIBLE:
            bulk = context.changes >= MAX_CHANGES_AT_ONCE
            grounding = ground(
                tool,
                arguments,
                None if context.typed is None else Request(context.typed),
                domains=None if context.domains is None else set(context.domains),
                folders=self.folders,
                used=dict(context.used),
            )
            # a change whose tool and every value the person typed in this request is theirs,
            # whatever the conversation read before (agent/grounding.py); a value that came
            # from outside content (a provenance finding) never is
            typed = grounding.grounded and not findings
            if (not sources or typed) and not self.ask_every_change and not bulk:
                return Verdict(
                    Decision.ALLOW,
                    assessment,
                    findings,
                    tier=tier,
                    sources=sources,
                    summary=tool.summarize(arguments),
                    grounded=bool(sources),
                    numbers=grounding.numbers,
                )
            if sources:
                why_not = f" ({grounding.why})" if grounding.why and not bulk else ""
                reasons.append(
                    "this request has read content you did not type, so changes ask first "
                    f"unless you typed them in this request{why_not}"
                )
            elif bulk:
                reasons.append(
                    f"this request has made {context.changes} changes already; more than "
                    f"{MAX_CHANGES_AT_ONCE} in one request ask first"
                )
            else:
                reasons.append('you chose "Ask before every change"')
        resolution = resolve_effect(tool, arguments)
        built = build_receipt(
            tool,
            arguments,
            assessment,
            tier=tier,
            sources=sources,
            findings=findings,
            reasons=reasons,
            resolved=resolution.lines(),
            people=recipients.lines,
        )
        return Verdict(
            Decision.ASK,
            assessment,
            findings,
            receipt=built.text,
            lines=built.lines,
            reasons=built.reasons,
            tier=tier,
            summary=built.summary,
            details=built.details,
            sources=sources,
            texts=built.texts,
            effect=resolution.digest,
        )

    def _not_typed(
        self, tool: Tool, arguments: Mapping[str, Any], sent: list[str], context: Context
    ) -> list[str]:
        """The sent arguments whose text is not all in the request the person is typing now."""
        if context.typed is None:
            return sent
        request = Request(context.typed)
        out = []
        for key in sent:
            value = arguments.get(key)
            texts = [value] if isinstance(value, str) else [json.dumps(value, ensure_ascii=False)]
            if not all(text_grounded(t, request)[0] for t in texts):
                out.append(key)
        return out

    def ask_again(
        self,
        tool: Tool,
        arguments: Mapping[str, Any],
        provenance: Provenance | None = None,
        *,
        context: Context | None = None,
    ) -> Verdict:
        """An approved call whose resolved effect changed before it ran: it asks again (also
        where the gate would now let it run at once), with the receipt of what it would act on
        now and why it asks again. DENY stays DENY."""
        verdict = self.check(tool, arguments, provenance, context=context)
        if verdict.decision is Decision.DENY or verdict.assessment is None:
            return verdict
        resolution = resolve_effect(tool, arguments)
        recipients = weigh(arguments, self.people, (context or Context()).typed, _stored(tool))
        built = build_receipt(
            tool,
            arguments,
            verdict.assessment,
            tier=verdict.tier,
            sources=verdict.sources,
            reasons=[CHANGED_SINCE, *verdict.reasons],
            resolved=resolution.lines(),
            people=recipients.lines,
        )
        return Verdict(
            Decision.ASK,
            verdict.assessment,
            verdict.findings,
            receipt=built.text,
            lines=built.lines,
            reasons=built.reasons,
            tier=verdict.tier,
            summary=built.summary,
            details=built.details,
            sources=verdict.sources,
            texts=built.texts,
            effect=resolution.digest,
        )

    def effect(self, tool: Tool, arguments: Mapping[str, Any]) -> Resolution:
        """What the call would act on now: checked against an approval's just before it runs."""
        return resolve_effect(tool, arguments)

    def receipt(self, tool: Tool, arguments: dict[str, Any]) -> str:
        """Plain words of what will happen if approved (the call judged in a clean context)."""
        assessment = self.policy.assess(tool, arguments)
        tier = self.tier(tool, arguments, assessment)
        resolved = resolve_effect(tool, arguments).lines()
        recipients = weigh(arguments, self.people, None, _stored(tool))
        return build_receipt(
            tool,
            arguments,
            assessment,
            tier=tier,
            reasons=[*assessment.reasons, *recipients.concerns],
            resolved=resolved,
            people=recipients.lines,
        ).text

    def scope_for(
        self,
        conversation_id: str,
        verdict: Verdict,
        tool: Tool | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Scope | None:
        """What "allow for this conversation" would cover, or None where it is not offered:
        the values of the tool's declared target fields, else exactly these arguments."""
        if not self.scopable(verdict) or verdict.assessment is None:
            return None
        if tool is None or arguments is None:
            return None
        if tool.targets:
            return Scope(
                conversation_id, tool.name, tool.target_values(arguments), what=verdict.summary
            )
        return Scope(
            conversation_id,
            tool.name,
            exact=call_digest(tool.name, dict(arguments)),
            what=verdict.summary,
        )

    def scopable(self, verdict: Verdict) -> bool:
        """May a conversation-wide allowance offer or cover this call (preference included)?"""
        return (
            self.offer_scopes
            and verdict.scopable
            and verdict.assessment is not None
            and not (verdict.assessment.effects & self.never_scoped)
        )

    def covering(
        self, conversation_id: str, tool: Tool, arguments: Mapping[str, Any], verdict: Verdict
    ) -> Scope | None:
        """The allowance of this conversation that covers this call, if any."""
        if not self.scopable(verdict):
            return None
        return self.grants.covering_call(conversation_id, tool, arguments)

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
            scope=None if background else self.scope_for(conversation_id, verdict, tool, arguments),
            background=background,
            summary=verdict.summary,
            details=verdict.details,
            tier=verdict.tier.value,
            sources=verdict.sources,
            texts=verdict.texts,
            effect=verdict.effect,
        )
