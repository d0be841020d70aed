"""Property and fuzz tests of the gate: whatever names and arguments the model emits, no
sensitive tool runs unless the user approved exactly that call."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from botpsy_desktop.agent.events import ApprovalNeeded, ApprovalRequest, ToolResult, call_digest
from botpsy_desktop.agent.policy import Policy
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.tools import Effect, Tool, ToolRegistry, make_tool
from tests.agent.gate_tools import make_session, shipped_gate

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class AnyArgs(BaseModel):
    """Do a thing."""

    target: str = Field("", description="who or where")
    amount: float = Field(0.0, description="how much")
    note: str = Field("", description="free text")


SENSITIVE = {
    "pay_bill": {Effect.MONEY},
    "send_note": {Effect.OUTBOUND},
    "wipe_folder": {Effect.DESTRUCTIVE},
    "tweak_setting": {Effect.LOCAL_WRITE},
    "share_file": {Effect.PERSONAL_DATA},
    "mystery": {"undeclared-effect"},
}
READ_ONLY = {"peek": {Effect.READ}}


def recorder(name: str, executed: list[tuple[str, dict[str, Any]]]) -> Any:
    def handler(args: AnyArgs) -> str:
        executed.append((name, args.model_dump()))
        return "done"

    return handler


def build_registry(executed: list[tuple[str, dict[str, Any]]]) -> ToolRegistry:
    registry = ToolRegistry()
    for name, effects in {**SENSITIVE, **READ_ONLY}.items():
        registry.register(make_tool(recorder(name, executed), effects=effects, name=name))
    return registry


CONFUSABLE = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "p": "\u0440", "s": "\u0455"}


@st.composite
def tool_names(draw: st.DrawFn) -> str:
    """Exact names, names bent by a trick (case, look-alike, width, invisible, space), or noise."""
    base = draw(st.sampled_from(sorted({**SENSITIVE, **READ_ONLY})))
    trick = draw(
        st.sampled_from(["exact", "case", "confusable", "fullwidth", "invisible", "space", "noise"])
    )
    if trick == "exact":
        return base
    i = draw(st.integers(0, len(base) - 1))
    if trick == "case":
        return base[:i] + base[i].upper() + base[i + 1 :] if base[i].isalpha() else base.upper()
    if trick == "confusable":
        hits = [j for j, c in enumerate(base) if c in CONFUSABLE]
        j = draw(st.sampled_from(hits)) if hits else 0
        return base[:j] + CONFUSABLE.get(base[j], "\u0430") + base[j + 1 :]
    if trick == "fullwidth":
        return unicodedata.normalize("NFC", chr(ord(base[0]) + 0xFEE0) + base[1:])
    if trick == "invisible":
        return base[:i] + draw(st.sampled_from(["\u200b", "\u200d", "\u2060", "\ufeff"])) + base[i:]
    if trick == "space":
        return draw(st.sampled_from([" ", "\t", "  "])) + base
    return draw(st.text(min_size=1, max_size=20))


json_scalars = st.one_of(
    st.text(max_size=30), st.integers(-(10**6), 10**6), st.floats(allow_nan=False), st.booleans()
)
arguments = st.dictionaries(
    st.sampled_from(["target", "amount", "note", "path", "url", "to"]), json_scalars, max_size=4
)


def render(name: str, args: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    body = "".join(
        f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
        for k, v in args.items()
    )
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


calls = st.lists(
    st.tuples(tool_names(), arguments, st.sampled_from(["xml", "json"])), min_size=1, max_size=4
)


@SETTINGS
@given(turns=st.lists(calls, min_size=1, max_size=3))
def test_with_approvals_denied_no_sensitive_tool_ever_runs(
    turns: list[list[tuple[str, dict[str, Any], str]]],
) -> None:
    executed: list[tuple[str, dict[str, Any]]] = []
    registry = build_registry(executed)
    replay = ["\n".join(render(n, a, f) for n, a, f in turn) for turn in turns] + ["end"]
    session = make_session(replay, registry, ConversationStore(":memory:"), max_steps=8)
    for event in session.run("do things"):
        if isinstance(event, ApprovalNeeded):
            event.request.deny()
    assert [name for name, _ in executed if name not in READ_ONLY] == []


@SETTINGS
@given(
    turns=st.lists(calls, min_size=1, max_size=3),
    decisions=st.lists(st.sampled_from(["approve", "deny", "edit", "none"]), min_size=12),
)
def test_every_sensitive_run_matches_one_approval_of_exactly_that_call(
    turns: list[list[tuple[str, dict[str, Any], str]]], decisions: list[str]
) -> None:
    executed: list[tuple[str, dict[str, Any]]] = []
    registry = build_registry(executed)
    replay = ["\n".join(render(n, a, f) for n, a, f in turn) for turn in turns] + ["end"]
    session = make_session(replay, registry, ConversationStore(":memory:"), max_steps=8)
    approved: list[tuple[str, dict[str, Any]]] = []
    choice = iter(decisions)
    for event in session.run("do things"):
        if isinstance(event, ApprovalNeeded):
            request = event.request
            what = next(choice, "deny")
            if what == "approve":
                request.approve()
                approved.append((request.tool, request.arguments))
            elif what == "edit":
                edited = {"target": "edited", "note": "by the user"}
                request.approve(arguments=edited)
                approved.append((request.tool, edited))
            elif what == "deny":
                request.deny()
        elif isinstance(event, ToolResult) and event.decision == "approved":
            assert event.name in SENSITIVE
    tool = {t.name: t for t in registry}
    ran = [
        (n, a)
        for n, a in executed
        if n not in READ_ONLY or not Policy().assess(tool[n], a).read_only
    ]
    expected = [(n, tool[n].validate(a).model_dump()) for n, a in approved]
    for item in ran:
        assert item in expected
        expected.remove(item)  # each approval is used once


@SETTINGS
@given(name=st.text(min_size=1, max_size=30))
def test_only_an_exact_registered_name_resolves(name: str) -> None:
    registry = build_registry([])
    found, why = shipped_gate().resolve(registry, name, f"<tool_call>\n<function={name}>\n", "xml")
    if found is not None:
        assert found.name == name and name in registry.names()
    else:
        assert why


@SETTINGS
@given(
    effects=st.sets(st.sampled_from([*Effect, "other"]), min_size=1),
    args=st.dictionaries(st.text(max_size=10), json_scalars, max_size=5),
)
def test_only_read_only_calls_without_web_addresses_are_allowed(
    effects: set[Any], args: dict[str, Any]
) -> None:
    tool = Tool("some_tool", "Does something.", AnyArgs, lambda a: "x", frozenset(effects))
    assessment = Policy().assess(tool, args)
    if assessment.read_only:
        assert effects == {Effect.READ}
        assert not any("://" in str(v) for v in args.values())
    else:
        assert shipped_gate().check(tool, args).decision.value == "ask"


@SETTINGS
@given(
    args=st.dictionaries(st.text(max_size=8), json_scalars, max_size=4),
    other=st.dictionaries(st.text(max_size=8), json_scalars, max_size=4),
)
def test_an_approval_is_spent_by_exactly_one_matching_call(
    args: dict[str, Any], other: dict[str, Any]
) -> None:
    request = ApprovalRequest("c", "pay_bill", args, "r", ["money"])
    request.approve()
    if call_digest("pay_bill", other) != call_digest("pay_bill", args):
        assert not request.consume("pay_bill", other)
    assert request.consume("pay_bill", args)
    assert not request.consume("pay_bill", args)


_ADDRESS_OLD = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"


@SETTINGS
@given(st.text(alphabet="ab.+-@ _x1\n", max_size=60))
def test_the_email_pattern_finds_what_the_backtracking_one_found(text: str) -> None:
    """The linear-time e-mail pattern finds an address wherever the old, quadratic one found
    one (it starts each search only where a run of address characters starts)."""
    import re

    from botpsy_desktop.agent.policy import EMAIL_RE

    assert bool(EMAIL_RE.search(text)) == bool(re.search(_ADDRESS_OLD, text))


def test_the_email_pattern_on_long_runs_without_an_address() -> None:
    """Long arguments the policy scans on every call (times: tools/bench_scanner.py)."""
    from botpsy_desktop.agent.policy import EMAIL_RE

    for text in ("a" * 200_000, "a." * 100_000, "a@" * 100_000):
        assert EMAIL_RE.search(text) is None or "@" in text
    assert EMAIL_RE.findall("x " + "a" * 50_000 + "@b.example") == ["a" * 50_000 + "@b.example"]
    assert EMAIL_RE.findall("to: ann@x.org, bob+1@y.co.uk.") == ["ann@x.org", "bob+1@y.co.uk"]
