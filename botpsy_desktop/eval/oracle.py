"""Replays made from the cases: the oracle (canonical calls) and a backend wrong in a pattern."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from botpsy_desktop.eval.spec import Case, ExpectedCall, Group, Step
from botpsy_desktop.llm.language.parser import parse_turn

FINAL_ANSWER = "Done."
MALFORMED_CALL = '<tool_call>\n{"name": "list_alarms", "arguments": {\n</tool_call>'
"""A call the parser must catch: its JSON is cut off."""

WrongKind = Literal["right", "no_call", "wrong_arguments", "wrong_tool"]


def render_value(value: Any) -> str:
    """A parameter value as the model writes it: strings raw, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def render_call(tool: str, arguments: Mapping[str, Any]) -> str:
    """One call in Qwen3-Coder XML, the format BotPsy writes."""
    params = "".join(
        f"<parameter={name}>\n{render_value(value)}\n</parameter>\n"
        for name, value in arguments.items()
    )
    return f"<tool_call>\n<function={tool}>\n{params}</function>\n</tool_call>"


def _calls(step: Step) -> list[ExpectedCall]:
    return list(step.any_order) if isinstance(step, Group) else [step]


def oracle_turns(case: Case) -> list[str]:
    """The completions of a perfect model: each step's canonical calls in one turn, then a reply."""
    turns = [
        "\n".join(render_call(c.tool, c.arguments) for c in _calls(step))
        for step in case.expect.script
    ]
    return [*turns, FINAL_ANSWER]


@dataclass(frozen=True)
class Intended:
    """What a wrong-backend case was made to score: None where the case does not score it."""

    kind: WrongKind
    tool_ok: bool | None
    args_ok: bool | None
    state_ok: bool | None
    malformed: int


_PATTERN: tuple[WrongKind, ...] = ("right", "no_call", "wrong_arguments", "wrong_tool")


def _corrupt(value: Any) -> Any:
    """A value of the same JSON type that no sensible check accepts."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1000
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return str(int(value) + 1000)
    return "zzz-wrong-value"


def _wrong_call(call: ExpectedCall) -> ExpectedCall | None:
    """``call`` with every judged argument corrupted; None when no argument can be judged."""
    checks = call.parsed_checks()
    args = dict(call.arguments)
    changed = False
    for name, check in checks.items():
        if check.kind in ("any", "absent") or check.optional or name not in args:
            continue
        args[name] = _corrupt(args[name])
        changed = True
    return call.model_copy(update={"arguments": args}) if changed else None


def _other_tool(case: Case) -> tuple[str, dict[str, Any]]:
    used = {c.tool for s in case.expect.script for c in _calls(s)} | set(case.expect.tolerate)
    for tool, args in (("get_weather", {"place": "Tokyo"}), ("list_tasks", {})):
        if tool not in used:
            return tool, args
    return "now_playing", {}


def _parses(text: str, tools: Sequence[Mapping[str, Any]]) -> bool:
    parsed = parse_turn(text, tools)
    return bool(parsed.calls) and not parsed.errors


def wrong_turns(
    case: Case, index: int, tools: Sequence[Mapping[str, Any]]
) -> tuple[list[str], Intended]:
    """Completions of a model that is wrong in a known way, chosen by ``index`` (case order):
    right, no call, wrong arguments (every judged argument of the last step's calls), wrong tool
    (a malformed call first, then an unrelated read-only tool instead of the last step)."""
    kind = _PATTERN[index % len(_PATTERN)]
    expect = case.expect
    scored = expect.scored
    has_state = bool(expect.end_state)
    if expect.no_call:
        if kind in ("right", "no_call"):
            return [FINAL_ANSWER], Intended(kind, True, True, None, 0)
        tool, args = _other_tool(case)
        turns = [render_call(tool, args), FINAL_ANSWER]
        if kind == "wrong_tool":
            turns = [MALFORMED_CALL, *turns]
        return turns, Intended(kind, False, False, None, 1 if kind == "wrong_tool" else 0)
    steps = expect.script
    if kind == "right":
        return oracle_turns(case), Intended(
            kind, scored or None, scored or None, has_state or None, 0
        )
    if kind == "no_call":
        return [FINAL_ANSWER], Intended(
            kind,
            False if scored else None,
            False if scored else None,
            False if has_state else None,
            0,
        )
    last = _calls(steps[-1])
    if kind == "wrong_arguments":
        wrong = [_wrong_call(c) for c in last]
        text = "\n".join(render_call(w.tool, w.arguments) for w in wrong if w)
        if all(w is not None for w in wrong) and _parses(text, tools):
            turns = [
                "\n".join(render_call(c.tool, c.arguments) for c in _calls(s)) for s in steps[:-1]
            ]
            turns.append(text)
            return [*turns, FINAL_ANSWER], Intended(
                kind,
                True if scored else None,
                False if scored else None,
                False if has_state else None,
                0,
            )
        kind = "wrong_tool"  # nothing to corrupt: wrong in the tool instead
    tool, args = _other_tool(case)
    turns = ["\n".join(render_call(c.tool, c.arguments) for c in _calls(s)) for s in steps[:-1]]
    turns += [MALFORMED_CALL, render_call(tool, args), FINAL_ANSWER]
    return turns, Intended(
        "wrong_tool",
        False if scored else None,
        False if scored else None,
        False if has_state else None,
        1,
    )
