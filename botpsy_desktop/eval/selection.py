"""Tool selection measured without a model: recall of the expected tools and prompt prefix sizes.

The loop offers each request the tools that agent/selection.py picks from its words and the
conversation's earlier calls; the choice is deterministic, so it is checked on every case in
milliseconds: a case is recalled when every tool it expects is among those offered. The prefix
(system prompt and offered schemas, rendered by the model's template) is counted in tokens when
a tokenizer is given, else in characters.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.selection import ToolSelector
from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.eval.spec import Case

Counter = Callable[[list[dict[str, Any]], list[dict[str, Any]]], int]
"""(messages, tools) -> prompt tokens, as the backend renders and tokenizes them."""


@dataclass(frozen=True)
class Selected:
    """What one case's request was offered."""

    id: str
    domain: str
    language: str
    expected: tuple[str, ...]
    offered: tuple[str, ...]
    domains: tuple[str, ...]
    everything: bool
    reason: str
    prefix: int

    @property
    def recalled(self) -> bool:
        return set(self.expected) <= set(self.offered)

    @property
    def missing(self) -> list[str]:
        return sorted(set(self.expected) - set(self.offered))


def select_cases(
    cases: Sequence[Case], registry: ToolRegistry, system_prompt: str, count: Counter | None
) -> list[Selected]:
    """Each case's choice, as the loop makes it for the case's last user turn."""
    selector = ToolSelector(registry)
    system = [{"role": "system", "content": system_prompt}]
    sizes: dict[tuple[str, ...], int] = {}
    out = []
    for case in cases:
        turns = case.conversation
        used = [c.tool for t in turns[:-1] if t.assistant for c in t.assistant.calls]
        choice = selector.choose(turns[-1].user, used)
        if choice.names not in sizes:
            schemas = selector.schemas(choice)
            sizes[choice.names] = (
                count(system, schemas) if count is not None else _chars(system, schemas)
            )
        expected = tuple(sorted({c.tool for c in case.expect.flat_calls()}))
        out.append(
            Selected(
                case.id,
                case.domain,
                case.language,
                expected,
                choice.names,
                choice.domains,
                choice.everything,
                choice.reason,
                sizes[choice.names],
            )
        )
    return out


def _chars(system: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> int:
    import json

    text = system[0]["content"] + "".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    return len(text)


def _recall(items: Sequence[Selected]) -> dict[str, Any]:
    hits = sum(s.recalled for s in items)
    return {"cases": len(items), "recalled": hits, "recall": hits / len(items) if items else None}


def _sizes(values: Sequence[int]) -> dict[str, Any]:
    if not values:
        return {"cases": 0}
    ordered = sorted(values)
    return {
        "cases": len(values),
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
    }


def selection_report(selected: Sequence[Selected], unit: str) -> dict[str, Any]:
    """Recall overall, per language and per domain; prefix sizes by how many domains were
    offered; the misses."""
    by: dict[str, dict[str, list[Selected]]] = {"language": {}, "domain": {}}
    for s in selected:
        by["language"].setdefault(s.language, []).append(s)
        by["domain"].setdefault(s.domain, []).append(s)
    shapes: dict[str, list[int]] = {}
    for s in selected:
        shape = "all tools" if s.everything else f"{len(s.domains)} domain(s)"
        shapes.setdefault(shape, []).append(s.prefix)
    sets: dict[str, dict[str, Any]] = {}
    for s in selected:
        key = "all tools" if s.everything else "+".join(s.domains)
        entry = sets.setdefault(key, {"cases": 0, "tools": len(s.offered), unit: s.prefix})
        entry["cases"] += 1
    return {
        "unit": unit,
        "overall": _recall(selected),
        "by_language": {k: _recall(v) for k, v in sorted(by["language"].items())},
        "by_domain": {k: _recall(v) for k, v in sorted(by["domain"].items())},
        "prefix_by_shape": {k: _sizes(v) for k, v in sorted(shapes.items())},
        "prefix_by_set": dict(sorted(sets.items(), key=lambda kv: -kv[1]["cases"])),
        "misses": [
            {"id": s.id, "missing": s.missing, "offered_domains": list(s.domains)}
            for s in selected
            if not s.recalled
        ],
    }


def render_selection(report: Mapping[str, Any]) -> str:
    """The report as a terminal table."""
    unit = report["unit"]
    lines = ["Tool selection (no model run): the expected tools among those offered", ""]

    def row(name: str, r: Mapping[str, Any]) -> str:
        recall = "-" if r["recall"] is None else f"{r['recall']:.3f}"
        return f"  {name:<12} {recall:>6}  ({r['recalled']}/{r['cases']})"

    lines.append(row("overall", report["overall"]))
    lines.append("by language:")
    lines += [row(k, v) for k, v in report["by_language"].items()]
    lines.append("by domain:")
    lines += [row(k, v) for k, v in report["by_domain"].items()]
    lines.append(f"prefix size ({unit}: system prompt + offered tools):")
    for k, v in report["prefix_by_shape"].items():
        lines.append(
            f"  {k:<12} {v['cases']:>4} cases  min {v['min']}  median {v['median']:g}  "
            f"p90 {v['p90']}  max {v['max']}"
        )
    lines.append("tool sets offered:")
    for k, v in report["prefix_by_set"].items():
        lines.append(f"  {k:<28} {v['cases']:>4} cases  {v['tools']:>3} tools  {v[unit]} {unit}")
    if report["misses"]:
        lines.append("misses:")
        for m in report["misses"]:
            lines.append(f"  {m['id']}: {', '.join(m['missing'])} not offered")
    return "\n".join(lines)
