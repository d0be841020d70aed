"""Tool selection measured without a model: recall, fallbacks, extra domains and prompt sizes.

The loop offers each request the tools that agent/selection.py picks from its text and the
conversation; the choice is deterministic, so it is checked on every request in milliseconds.
Two kinds of input: evaluation cases (a case is recalled when every tool it expects is offered
for its last user turn, its given history being the conversation) and selection sets
(``{"format": "botpsy-selection/1", "requests": [...]}``: a request or turns, and the domains
or tools it needs; the shipped held-out sets are ``selection_sets/heldout*.json``). The prompt
size is that of an empty request (system prompt, offered schemas, an empty user turn and the
reply's start, rendered by the model's template), in tokens when a tokenizer is given, else
the characters of the system prompt and schemas.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from botpsy_desktop.agent.selection import ToolSelector
from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.eval.spec import Case

Counter = Callable[[list[dict[str, Any]], list[dict[str, Any]]], int]
"""(messages, tools) -> prompt tokens, as the backend renders and tokenizes them."""

SET_FORMAT = "botpsy-selection/1"


@dataclass(frozen=True)
class Request:
    """One request to choose tools for: its text, the conversation before it, what it needs."""

    id: str
    language: str
    group: str
    """The case's domain, or the kind of a selection set's request (indirect, typo, ...)."""
    text: str
    history: tuple[dict[str, Any], ...]
    tools: tuple[str, ...]
    """Tools it needs (cases, and sets that name tools)."""
    domains: tuple[str, ...]
    """Domains it needs (empty with no tools: it needs none)."""


@dataclass(frozen=True)
class Selected:
    """What one request was offered."""

    id: str
    domain: str
    language: str
    expected: tuple[str, ...]
    needed_domains: tuple[str, ...]
    offered: tuple[str, ...]
    domains: tuple[str, ...]
    everything: bool
    reason: str
    prefix: int

    @property
    def needs_tools(self) -> bool:
        return bool(self.expected or self.needed_domains)

    @property
    def recalled(self) -> bool:
        if self.everything:
            return True
        return set(self.expected) <= set(self.offered) and set(self.needed_domains) <= set(
            self.domains
        )

    @property
    def missing(self) -> list[str]:
        if self.everything:
            return []
        tools = sorted(set(self.expected) - set(self.offered))  # their domains say no more
        return tools or sorted(f"domain {d}" for d in set(self.needed_domains) - set(self.domains))

    @property
    def extra(self) -> list[str]:
        """Domains offered that the request does not need (none when everything is offered)."""
        return [] if self.everything else sorted(set(self.domains) - set(self.needed_domains))


def _messages(turns: Sequence[Any]) -> list[dict[str, Any]]:
    """Given turns as the conversation store keeps them."""
    out: list[dict[str, Any]] = []
    for t in turns:
        out.append({"role": "user", "content": t.user})
        if t.assistant is not None:
            message: dict[str, Any] = {"role": "assistant", "content": t.assistant.content}
            if t.assistant.calls:
                message["tool_calls"] = [
                    {"type": "function", "function": {"name": c.tool, "arguments": c.arguments}}
                    for c in t.assistant.calls
                ]
            out.append(message)
    return out


def case_requests(cases: Sequence[Case], registry: ToolRegistry) -> list[Request]:
    """Evaluation cases as requests: the last user turn after the given history."""
    out = []
    for case in cases:
        turns = case.conversation
        tools = tuple(sorted({c.tool for c in case.expect.flat_calls()}))
        domains = tuple(
            sorted({t.domain for n in tools if (t := registry.get(n)) is not None and t.domain})
        )
        history = tuple(_messages(turns[:-1]))
        out.append(
            Request(case.id, case.language, case.domain, turns[-1].user, history, tools, domains)
        )
    return out


def heldout_path() -> Path:
    """The folder of the shipped held-out selection sets (every ``*.json`` in it)."""
    return Path(str(resources.files("botpsy_desktop.eval").joinpath("selection_sets")))


def is_selection_set(path: Path) -> bool:
    """Whether ``path`` (a file, or a folder's first JSON file) is a selection set."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        return False
    try:
        data = json.loads(files[0].read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("format") == SET_FORMAT


def load_selection_set(path: Path) -> list[Request]:
    """The requests of a selection set file, or of every ``*.json`` in a folder."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    out: list[Request] = []
    for file in files:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BotpsyError(
                f"Cannot read the selection set {file}: {exc}.", "Fix the JSON."
            ) from exc
        if not isinstance(data, dict) or data.get("format") != SET_FORMAT:
            raise BotpsyError(
                f"{file} is not a selection set.",
                f'A selection set is {{"format": "{SET_FORMAT}", "requests": [...]}}.',
            )
        for n, item in enumerate(data.get("requests") or ()):
            out.append(_set_request(file, n, item))
    return out


def _set_request(file: Path, n: int, item: Any) -> Request:
    where = f"{file.name}, request {n + 1}"
    if not isinstance(item, dict):
        raise BotpsyError(f"{where} is not an object.", "Give each request as a JSON object.")
    turns = item.get("turns")
    if turns is None:
        turns = [{"user": item.get("request")}]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, dict) for t in turns):
        raise BotpsyError(f"{where}: 'turns' must be a list of objects.", "Fix the request.")
    text = turns[-1].get("user")
    if not isinstance(text, str) or not text.strip():
        raise BotpsyError(
            f"{where} has no request text.", "Give 'request', or 'turns' ending in a user turn."
        )
    history: list[dict[str, Any]] = []
    for t in turns[:-1]:
        history.append({"role": "user", "content": str(t.get("user") or "")})
        message: dict[str, Any] = {"role": "assistant", "content": str(t.get("assistant") or "")}
        calls = t.get("calls") or []
        if calls:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": str(c), "arguments": {}}} for c in calls
            ]
        history.append(message)
    domains, tools = item.get("domains") or [], item.get("tools") or []
    if not all(isinstance(x, str) for x in [*domains, *tools]):
        raise BotpsyError(f"{where}: 'domains' and 'tools' are lists of names.", "Fix them.")
    return Request(
        str(item.get("id") or f"{file.stem}-{n + 1}"),
        str(item.get("language") or "-"),
        str(item.get("kind") or "-"),
        text,
        tuple(history),
        tuple(sorted(tools)),
        tuple(sorted(domains)),
    )


def select_requests(
    requests: Sequence[Request],
    registry: ToolRegistry,
    system_prompt: str,
    count: Counter | None,
    selector: ToolSelector | None = None,
) -> list[Selected]:
    """Each request's choice, as the loop makes it."""
    selector = selector or ToolSelector(registry)
    system = [{"role": "system", "content": system_prompt}, {"role": "user", "content": ""}]
    sizes: dict[tuple[str, ...], int] = {}
    out = []
    for r in requests:
        choice = selector.choose(r.text, r.history)
        if choice.names not in sizes:
            schemas = selector.schemas(choice)
            sizes[choice.names] = (
                count(system, schemas) if count is not None else _chars(system, schemas)
            )
        out.append(
            Selected(
                r.id,
                r.group,
                r.language,
                r.tools,
                r.domains,
                choice.names,
                choice.domains,
                choice.everything,
                choice.reason,
                sizes[choice.names],
            )
        )
    return out


def select_cases(
    cases: Sequence[Case], registry: ToolRegistry, system_prompt: str, count: Counter | None
) -> list[Selected]:
    """Each case's choice, as the loop makes it for the case's last user turn."""
    return select_requests(case_requests(cases, registry), registry, system_prompt, count)


def _chars(system: list[dict[str, Any]], schemas: list[dict[str, Any]]) -> int:
    text = system[0]["content"] + "".join(json.dumps(s, ensure_ascii=False) for s in schemas)
    return len(text)


def _recall(items: Sequence[Selected]) -> dict[str, Any]:
    hits = sum(s.recalled for s in items)
    need = [s for s in items if s.needs_tools]
    fell = sum(s.everything for s in need)
    return {
        "cases": len(items),
        "recalled": hits,
        "recall": hits / len(items) if items else None,
        "fallback": fell / len(need) if need else None,
    }


def _sizes(values: Sequence[int]) -> dict[str, Any]:
    if not values:
        return {"cases": 0}
    ordered = sorted(values)
    return {
        "cases": len(values),
        "min": ordered[0],
        "median": statistics.median(ordered),
        "mean": round(statistics.fmean(ordered), 1),
        "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
        "max": ordered[-1],
    }


def selection_report(selected: Sequence[Selected], unit: str) -> dict[str, Any]:
    """Recall overall, per language and per domain (or kind); fallbacks to every tool among
    the requests that need one; what requests that need none get; extra domains; prefix sizes
    by how many domains were offered; the misses."""
    by: dict[str, dict[str, list[Selected]]] = {"language": {}, "domain": {}}
    for s in selected:
        by["language"].setdefault(s.language, []).append(s)
        by["domain"].setdefault(s.domain, []).append(s)
    shapes: dict[str, list[int]] = {}
    for s in selected:
        if s.everything:
            shape = "all tools"
        elif not s.domains:
            shape = "no domain"
        else:
            shape = f"{len(s.domains)} domain(s)"
        shapes.setdefault(shape, []).append(s.prefix)
    sets: dict[str, dict[str, Any]] = {}
    for s in selected:
        key = "all tools" if s.everything else "+".join(s.domains) or "no domain"
        entry = sets.setdefault(key, {"cases": 0, "tools": len(s.offered), unit: s.prefix})
        entry["cases"] += 1
    need = [s for s in selected if s.needs_tools]
    chat = [s for s in selected if not s.needs_tools]
    narrowed = [s for s in need if not s.everything]
    return {
        "unit": unit,
        "overall": _recall(selected),
        "fallback": {
            "requests": len(need),
            "everything": sum(s.everything for s in need),
            "share": sum(s.everything for s in need) / len(need) if need else None,
        },
        "no_tool_needed": {
            "requests": len(chat),
            "no_domain": sum(not s.everything and not s.domains for s in chat),
            "some_domains": sum(not s.everything and bool(s.domains) for s in chat),
            "everything": sum(s.everything for s in chat),
        },
        "extra_domains": {
            "requests": len(narrowed),
            "with_extra": sum(bool(s.extra) for s in narrowed),
            "mean": round(statistics.fmean(len(s.extra) for s in narrowed), 3)
            if narrowed
            else None,
        },
        "prefix": _sizes([s.prefix for s in selected]),
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
        fell = "" if r.get("fallback") is None else f"  all tools {r['fallback']:.3f}"
        return f"  {name:<12} {recall:>6}  ({r['recalled']}/{r['cases']}){fell}"

    lines.append("recall (and the share of tool-needing requests offered all tools):")
    lines.append(row("overall", report["overall"]))
    lines.append("by language:")
    lines += [row(k, v) for k, v in report["by_language"].items()]
    lines.append("by domain:")
    lines += [row(k, v) for k, v in report["by_domain"].items()]
    f, n, x = report["fallback"], report["no_tool_needed"], report["extra_domains"]
    if f["requests"]:
        lines.append(
            f"all tools offered: {f['everything']} of {f['requests']} requests that need a tool "
            f"({f['share']:.3f})"
        )
    if n["requests"]:
        lines.append(
            f"requests that need no tool: {n['requests']}: offered no domain {n['no_domain']}, "
            f"some domains {n['some_domains']}, all tools {n['everything']}"
        )
    if x["requests"]:
        lines.append(
            f"extra domains: {x['with_extra']} of {x['requests']} narrowed requests got a "
            f"domain they do not need (mean {x['mean']:.3f} per request)"
        )
    p = report["prefix"]
    lines.append(
        f"prompt size ({unit}: system prompt + offered tools, an empty request): mean "
        f"{p['mean']:g}, median {p['median']:g}"
    )
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
            lines.append(
                f"  {m['id']}: {', '.join(m['missing'])} not offered "
                f"(offered: {', '.join(m['offered_domains']) or 'no domain'})"
            )
    return "\n".join(lines)
