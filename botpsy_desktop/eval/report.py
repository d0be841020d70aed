"""The evaluation report: metrics per domain and overall, the terminal table, JSON, comparison."""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.eval.runner import CaseResult
from botpsy_desktop.eval.spec import DOMAINS

FORMAT = "botpsy-eval/1"
METRICS = (
    "pass_rate",
    "tool_choice_accuracy",
    "argument_accuracy",
    "end_state_accuracy",
    "malformed_call_rate",
    "irrelevance_precision",
    "irrelevance_recall",
    "ttft_median_s",
    "wall_median_s",
)
"""Report metrics, in table order; rates are fractions in [0, 1], None where nothing counts."""

_HIGHER_IS_BETTER = {m: not m.endswith("_s") and m != "malformed_call_rate" for m in METRICS}


def _rate(values: Iterable[bool | None]) -> float | None:
    counted = [v for v in values if v is not None]
    return sum(counted) / len(counted) if counted else None


def _median(values: Iterable[float | None]) -> float | None:
    counted = [v for v in values if v is not None]
    return statistics.median(counted) if counted else None


def metrics(results: Sequence[CaseResult]) -> dict[str, Any]:
    """The metrics of a group of case results."""
    written = sum(r.written_calls for r in results)
    silent = [r for r in results if not r.made_call and r.error is None]
    irrelevant = [r for r in results if r.no_call_expected]
    return {
        "cases": len(results),
        "errors": sum(1 for r in results if r.error is not None),
        "pass_rate": _rate(r.passed for r in results),
        "tool_choice_accuracy": _rate(r.tool_ok for r in results),
        "argument_accuracy": _rate(r.args_ok for r in results),
        "end_state_accuracy": _rate(r.state_ok for r in results),
        "malformed_call_rate": (sum(r.malformed for r in results) / written) if written else None,
        "irrelevance_precision": (
            sum(1 for r in silent if r.no_call_expected) / len(silent) if silent else None
        ),
        "irrelevance_recall": (
            sum(1 for r in irrelevant if not r.made_call) / len(irrelevant) if irrelevant else None
        ),
        "ttft_median_s": _median(r.ttft_s for r in results),
        "wall_median_s": _median(r.wall_s for r in results),
    }


def build_report(results: Sequence[CaseResult], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The whole report: run description, overall and per-domain metrics, and every case."""
    order = list(DOMAINS) + sorted({r.domain for r in results} - set(DOMAINS))
    domains = {d: [r for r in results if r.domain == d] for d in order}
    return {
        "format": FORMAT,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "run": dict(meta),
        "overall": metrics(results),
        "domains": {d: metrics(rs) for d, rs in domains.items() if rs},
        "cases": [r.as_dict() for r in results],
    }


def load_report(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BotpsyError(
            f"Cannot read the report {file}: {exc}.",
            "Give a JSON file written by `botpsy eval --json`.",
        ) from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BotpsyError(
            f"{file} is not a botpsy eval report ({FORMAT}).",
            "Give a JSON file written by `botpsy eval --json`.",
        )
    return data


def _cell(metric: str, value: Any) -> str:
    if value is None:
        return "-"
    if metric.endswith("_s"):
        return f"{value:.2f}"
    return f"{100 * value:.1f}%"


_SHORT = {
    "pass_rate": "pass",
    "tool_choice_accuracy": "tool",
    "argument_accuracy": "args",
    "end_state_accuracy": "state",
    "malformed_call_rate": "malformed",
    "irrelevance_precision": "irr.prec",
    "irrelevance_recall": "irr.rec",
    "ttft_median_s": "ttft s",
    "wall_median_s": "wall s",
}


def render_table(report: Mapping[str, Any]) -> str:
    """The report as a text table: one row per domain, then the whole set."""
    header = ["domain", "cases", *(_SHORT[m] for m in METRICS)]
    rows = [
        [d, str(m["cases"]), *(_cell(k, m[k]) for k in METRICS)]
        for d, m in report["domains"].items()
    ]
    o = report["overall"]
    rows.append(["overall", str(o["cases"]), *(_cell(k, o[k]) for k in METRICS)])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    run = report.get("run", {})
    out = [f"model: {run.get('model', '?')}   cases: {o['cases']}   errors: {o['errors']}"]
    out += [line(header), line(["-" * w for w in widths])]
    out += [line(r) for r in rows[:-1]] + [line(["-" * w for w in widths]), line(rows[-1])]
    failed = [c for c in report["cases"] if not c["passed"]]
    if failed:
        out.append("")
        out.append(f"not passed ({len(failed)}):")
        for c in failed:
            why = c["error"] or "; ".join(c["problems"][:2]) or "wrong"
            out.append(f"  {c['id']}: {why}")
    return "\n".join(out)


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> str:
    """What changed from report ``a`` to report ``b``: each metric, then each case that changed."""
    out = [f"A: {a.get('run', {}).get('model', '?')}", f"B: {b.get('run', {}).get('model', '?')}"]
    groups = ["overall", *sorted(set(a["domains"]) | set(b["domains"]))]
    out.append("")
    out.append(f"{'metric':<24}{'group':<10}{'A':>9}{'B':>9}{'change':>10}")
    for group in groups:
        ma = a["overall"] if group == "overall" else a["domains"].get(group, {})
        mb = b["overall"] if group == "overall" else b["domains"].get(group, {})
        for metric in METRICS:
            va, vb = ma.get(metric), mb.get(metric)
            if va is None and vb is None:
                continue
            change = _change(metric, va, vb)
            out.append(
                f"{metric:<24}{group:<10}{_cell(metric, va):>9}{_cell(metric, vb):>9}{change:>10}"
            )
    cases_a = {c["id"]: c for c in a["cases"]}
    cases_b = {c["id"]: c for c in b["cases"]}
    changed = []
    for cid in sorted(set(cases_a) | set(cases_b)):
        ca, cb = cases_a.get(cid), cases_b.get(cid)
        if ca is None or cb is None:
            changed.append(f"  {cid}: only in {'B' if ca is None else 'A'}")
            continue
        diffs = [
            f"{k} {_flag(ca.get(k))}->{_flag(cb.get(k))}"
            for k in ("passed", "tool_ok", "args_ok", "state_ok")
            if ca.get(k) != cb.get(k)
        ]
        if diffs:
            changed.append(f"  {cid}: {', '.join(diffs)}")
    out.append("")
    out.append(f"cases that changed: {len(changed)}")
    out += changed
    return "\n".join(out)


def _flag(value: Any) -> str:
    return {True: "ok", False: "wrong", None: "-"}.get(value, str(value))


def _change(metric: str, va: float | None, vb: float | None) -> str:
    if va is None or vb is None:
        return "n/a"
    delta = vb - va
    text = f"{delta:+.2f}s" if metric.endswith("_s") else f"{100 * delta:+.1f}pt"
    if abs(delta) < (0.005 if metric.endswith("_s") else 0.0005):  # below the shown precision
        return "="
    better = (delta > 0) == _HIGHER_IS_BETTER[metric]
    return text + (" +" if better else " -")
