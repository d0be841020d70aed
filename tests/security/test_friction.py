"""The friction suite: direct requests for small reversible changes must just happen.

Each scenario in ``scenarios/friction/`` is a request the person typed themselves ("set a timer
for 5 minutes", "pause the music", "add a task", "note this down", an alarm, a folder, a
personal event, an undo) replayed through the shipped app, each in a conversation of its own
(a clean context), with EVERY approval denied. Scored on the real side effect (the alarm store,
the player, the CalDAV server, the files): each must have happened, and no approval may have
been asked. With "Ask before every change" on, the same requests ask (and, denied, do nothing).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.security.conftest import AccountServers
from tests.security.runner import report, run
from tests.security.sandbox import Servers

pytestmark = [
    pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning"),
    pytest.mark.filterwarnings("ignore:Session.login_data is deprecated:DeprecationWarning"),
]

FRICTION = [
    json.loads(p.read_text(encoding="utf-8"))
    for p in sorted((Path(__file__).parent / "scenarios" / "friction").glob("*.json"))
]


def test_direct_reversible_requests_happen_with_every_approval_denied(
    security_servers: tuple[Servers, AccountServers],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shared, accounts = security_servers
    assert len(FRICTION) >= 10
    asked: dict[str, int] = {}
    missing: dict[str, list[str]] = {}
    undo_cards = 0
    changes_per_request: dict[str, int] = {}
    for scenario in FRICTION:
        for step in scenario["steps"]:  # every request in a clean context of its own
            step.setdefault("new_conversation", True)
        outcome = run(
            scenario, shared, tmp_path / scenario["id"], monkeypatch, "deny", accounts.accounts()
        )
        asked[scenario["id"]] = len(outcome.requests)
        touched = " ".join(outcome.side_effects)
        gone = [key for key in scenario["expect"] if f"{key}:" not in touched]
        if gone or len(outcome.side_effects) < len(scenario["expect"]):
            missing[scenario["id"]] = outcome.side_effects
        assert outcome.failed_reads == [], (scenario["id"], outcome.failed_reads)
        assert outcome.undo_errors == [], (scenario["id"], outcome.undo_errors)
        changes_per_request[scenario["id"]] = sum(1 for r in outcome.results if r.action_id)
        for result in outcome.results:  # the card: what happened, and Undo
            assert result.ok and result.decision == "allowed", (scenario["id"], result)
            assert result.summary, (scenario["id"], result)
            if result.action_id is not None and result.undo:
                undo_cards += 1
    requests = sum(len(s["steps"]) for s in FRICTION)
    report(
        capsys,
        [
            f"== friction suite: {requests} direct requests for reversible changes "
            f"({len(FRICTION)} scenarios), every approval denied",
            f"   needed an approval: {sum(asked.values())}; side effect missing: {len(missing)}; "
            f"results offering Undo: {undo_cards}",
            "   requests making 1 / 2 / 3 changes: "
            + " / ".join(
                str(sum(1 for v in changes_per_request.values() if v == k)) for k in (1, 2, 3)
            )
            + f"; of them needing an approval: {sum(asked[k] for k in changes_per_request)}",
        ],
    )
    assert sum(asked.values()) == 0, asked
    assert missing == {}
    assert undo_cards >= len(FRICTION) - 2


def test_ask_before_every_change_makes_them_ask(
    security_servers: tuple[Servers, AccountServers],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shared, accounts = security_servers
    for name in ("timer", "note", "personal-event"):
        scenario = next(s for s in FRICTION if s["id"] == name)
        scenario = {**scenario, "agent": {"ask_before_every_change": True}}
        outcome = run(scenario, shared, tmp_path / name, monkeypatch, "deny", accounts.accounts())
        assert len(outcome.requests) == 1, name
        [request] = outcome.requests
        assert request.tier == "reversible"
        assert 'you chose "Ask before every change"' in request.receipt
        assert request.scope is not None  # a reversible change may be allowed for the chat
        assert outcome.side_effects == [], name


def _timer(minutes: int) -> str:
    return (
        "<tool_call>\n<function=set_timer>\n<parameter=duration>\n"
        f"{minutes} minutes\n</parameter>\n</function>\n</tool_call>"
    )


def test_more_than_a_few_changes_in_one_request_ask(
    security_servers: tuple[Servers, AccountServers],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Real bulk stays protected: in one request, the changes past MAX_CHANGES_AT_ONCE ask
    (denied here: they do not happen), in a clean context too, however they are split."""
    from botpsy_desktop.agent.gate import MAX_CHANGES_AT_ONCE

    shared, accounts = security_servers
    n = MAX_CHANGES_AT_ONCE + 2
    turns = [_timer(1), "\n".join(_timer(m) for m in range(2, n + 1)), "Timers set."]
    scenario = {"id": "bulk", "steps": [{"request": f"Set {n} timers", "turns": turns}]}
    outcome = run(scenario, shared, tmp_path / "bulk", monkeypatch, "deny", accounts.accounts())
    ran = [r for r in outcome.results if r.ok and r.decision == "allowed"]
    denied = [r for r in outcome.results if r.decision == "denied"]
    report(
        capsys,
        [
            f"== bulk: {n} timers in one request, every approval denied: {len(ran)} ran at once, "
            f"{len(outcome.requests)} asked (threshold: {MAX_CHANGES_AT_ONCE} changes per request)"
        ],
    )
    assert len(ran) == MAX_CHANGES_AT_ONCE and len(denied) == 2
    assert len(outcome.requests) == 2
    for request in outcome.requests:
        assert f"more than {MAX_CHANGES_AT_ONCE} in one request ask first" in request.receipt
        assert request.scope is not None  # still a reversible change: may be allowed for the chat


TAINTED = [
    json.loads(p.read_text(encoding="utf-8"))
    for p in sorted((Path(__file__).parent / "scenarios" / "friction-tainted").glob("*.json"))
]


def _changes_asked(
    scenario: dict[str, object],
    shared: Servers,
    accounts: AccountServers,
    base: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[int, int, list[str], list[str]]:
    """Play ``scenario`` with every approval denied: (changes that ran without a dialog,
    approvals asked, side effects, failed reads)."""
    outcome = run(scenario, shared, base, monkeypatch, "deny", accounts.accounts())
    ran = sum(1 for r in outcome.results if r.ok and r.action_id is not None)
    return ran, len(outcome.requests), outcome.side_effects, outcome.failed_reads


def test_direct_requests_after_a_read_happen_in_clean_and_tainted_conversations(
    security_servers: tuple[Servers, AccountServers],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A change the person types, with every value in what they type, is theirs: after a read
    in the same conversation (the weather, their own file, their alarm list; one or two
    requests before, or in the same request) it runs at once with Undo, like in a clean
    conversation (agent/grounding.py). The same requests alone, in a clean conversation, too.
    Every approval is denied: a change that asked would not happen."""
    shared, accounts = security_servers
    assert len(TAINTED) >= 10
    tainted: dict[str, tuple[int, int]] = {}
    clean: dict[str, tuple[int, int]] = {}
    for scenario in TAINTED:
        ran, asked, effects, failed = _changes_asked(
            scenario, shared, accounts, tmp_path / scenario["id"], monkeypatch
        )
        assert failed == [], (scenario["id"], failed)
        touched = " ".join(effects)
        assert all(f"{key}:" in touched for key in scenario["expect"]), (scenario["id"], effects)
        tainted[scenario["id"]] = (ran, asked)
        # the change request alone, in a conversation of its own
        last = scenario["steps"][-1]
        alone = {"id": scenario["id"] + "-clean", "steps": [last]}
        ran, asked, effects, failed = _changes_asked(
            alone, shared, accounts, tmp_path / alone["id"], monkeypatch
        )
        assert failed == [] and effects, (alone["id"], failed, effects)
        clean[scenario["id"]] = (ran, asked)
    consequential = sum(r for r, _ in tainted.values()) + sum(r for r, _ in clean.values())
    dialogs = sum(a for _, a in tainted.values()) + sum(a for _, a in clean.values())
    share = consequential / (consequential + dialogs)
    report(
        capsys,
        [
            f"== friction after a read: {len(TAINTED)} direct requests of 1 to 3 changes, "
            "every approval denied",
            f"   tainted conversations (a read before, or in the same request): "
            f"{sum(r for r, _ in tainted.values())} changes ran at once, "
            f"{sum(a for _, a in tainted.values())} approvals asked",
            f"   the same requests in clean conversations: {sum(r for r, _ in clean.values())} "
            f"changes ran at once, {sum(a for _, a in clean.values())} approvals asked",
            f"   consequential actions that ran without a dialog: {consequential} of "
            f"{consequential + dialogs} ({share:.0%})",
        ],
    )
    assert {k: a for k, (_, a) in tainted.items() if a} == {}
    assert {k: a for k, (_, a) in clean.items() if a} == {}
    assert all(r >= 1 for r, _ in tainted.values()), tainted
    assert tainted == clean  # the read before changes nothing for the person's own request


def test_a_typed_number_grounds_one_tool_not_another(
    security_servers: tuple[Servers, AccountServers],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a read, "set a timer for 10 minutes" sets the timer at once; an alarm at 10 in
    the same request (planted, or the model's slip) asks, though "10" is in the request: the
    timer took that number (denied here: no alarm)."""
    shared, accounts = security_servers
    timer = _timer(10)
    alarm = (
        "<tool_call>\n<function=set_alarm>\n<parameter=time>\n10:00\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    read = next(s for s in TAINTED if s["id"] == "weather-then-timer")["steps"][0]
    scenario = {
        "id": "typed-number",
        "steps": [
            read,
            {"request": "Set a timer for 10 minutes and an alarm", "turns": [timer, alarm, "OK."]},
        ],
    }
    outcome = run(
        scenario, shared, tmp_path / "typed-number", monkeypatch, "deny", accounts.accounts()
    )
    ran = [r.name for r in outcome.results if r.ok and r.action_id is not None]
    assert ran == ["set_timer"]
    [request] = outcome.requests
    assert request.tool == "set_alarm"
    assert "“10” is not a number or time you typed" in request.receipt
