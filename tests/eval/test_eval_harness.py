"""The harness proves its scorer: the oracle scores 100%, a wrong backend its exact figures."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.cli import main
from botpsy_desktop.eval.oracle import Intended, oracle_turns, wrong_turns
from botpsy_desktop.eval.report import METRICS, build_report, compare, metrics
from botpsy_desktop.eval.runner import check_cases, run_cases
from botpsy_desktop.eval.sandbox import sandbox_tools
from botpsy_desktop.eval.spec import CATEGORIES, CaseError, load_cases, shipped_cases_dir
from botpsy_desktop.llm.backend import Backend
from botpsy_desktop.llm.engines.replay import ReplayBackend


@pytest.fixture(scope="module")
def oracle_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`botpsy eval --replay-oracle` on every shipped case, as its JSON report."""
    tmp = tmp_path_factory.mktemp("oracle")
    out = tmp / "oracle.json"
    code = main(
        ["--home", str(tmp / "profile"), "eval", "--replay-oracle", "--quiet", "--json", str(out)]
    )
    assert code == 0
    report: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return report


def test_the_shipped_set_covers_every_domain_and_category() -> None:
    cases = load_cases()
    kinds = Counter((c.domain, c.category) for c in cases)
    for domain in ("files", "calendar", "alarms", "email", "weather", "music"):
        for category in ("simple", "parallel", "multi_turn"):
            assert kinds[(domain, category)] >= 1, (domain, category)
    assert {c.category for c in cases} == set(CATEGORIES)
    assert len({c.language for c in cases}) >= 3
    check_cases(cases, sandbox_tools())


def test_the_oracle_scores_100_percent_on_every_case(oracle_report: dict[str, Any]) -> None:
    cases = oracle_report["cases"]
    assert len(cases) == len(load_cases())
    failed = [(c["id"], c["problems"], c["error"]) for c in cases if not c["passed"]]
    assert failed == []
    overall = oracle_report["overall"]
    for metric in ("pass_rate", "tool_choice_accuracy", "argument_accuracy", "end_state_accuracy"):
        assert overall[metric] == 1.0, metric
    assert overall["irrelevance_precision"] == overall["irrelevance_recall"] == 1.0
    assert overall["malformed_call_rate"] == 0.0
    assert overall["errors"] == 0
    assert set(oracle_report["domains"]) == {
        "files",
        "calendar",
        "alarms",
        "email",
        "weather",
        "music",
        "none",
    }


def _wrong_run() -> tuple[list[Any], dict[str, Intended]]:
    cases = load_cases()
    schemas = sandbox_tools().schemas()
    intended: dict[str, Intended] = {}

    def backend_for(case: Any, index: int) -> Backend:
        turns, intended[case.id] = wrong_turns(case, index, schemas)
        return ReplayBackend(turns)

    return run_cases(cases, backend_for), intended


def _rate(values: list[bool | None]) -> float | None:
    counted = [v for v in values if v is not None]
    return sum(counted) / len(counted) if counted else None


def test_a_wrong_backend_scores_exactly_the_figures_it_was_made_to(
    tmp_path: Path, oracle_report: dict[str, Any]
) -> None:
    results, intended = _wrong_run()
    assert {i.kind for i in intended.values()} == {
        "right",
        "no_call",
        "wrong_arguments",
        "wrong_tool",
    }
    for r in results:
        want = intended[r.id]
        got = (r.tool_ok, r.args_ok, r.state_ok, r.malformed)
        assert got == (want.tool_ok, want.args_ok, want.state_ok, want.malformed), (
            f"{r.id} ({want.kind}): scored {got}; problems {r.problems}. A wrong final call that "
            "still reaches the end state means the case's end_state does not check what the "
            "call does; a wrong call that is not caught means its checks accept too much."
        )
        assert r.error is None, r.error
    # the aggregate figures follow from the pattern, and are lower than the oracle's
    m = metrics(results)
    ids = [r.id for r in results]
    assert m["tool_choice_accuracy"] == _rate([intended[i].tool_ok for i in ids])
    assert m["argument_accuracy"] == _rate([intended[i].args_ok for i in ids])
    assert m["end_state_accuracy"] == _rate([intended[i].state_ok for i in ids])
    passed = [
        all(
            v is not False for v in (intended[i].tool_ok, intended[i].args_ok, intended[i].state_ok)
        )
        for i in ids
    ]
    assert m["pass_rate"] == sum(passed) / len(passed)
    written = sum(r.written_calls for r in results)
    assert m["malformed_call_rate"] == sum(i.malformed for i in intended.values()) / written
    for metric in ("pass_rate", "tool_choice_accuracy", "argument_accuracy", "end_state_accuracy"):
        assert m[metric] < 0.6, metric
    irrelevant = [
        i for i in ids if intended[i].tool_ok is not None and results[ids.index(i)].no_call_expected
    ]
    assert m["irrelevance_recall"] == sum(
        intended[i].kind in ("right", "no_call") for i in irrelevant
    ) / len(irrelevant)
    # --compare shows each metric and each case that changed
    wrong = build_report(results, {"model": "wrong"})
    a, b = tmp_path / "oracle.json", tmp_path / "wrong.json"
    a.write_text(json.dumps(oracle_report), encoding="utf-8")
    b.write_text(json.dumps(wrong), encoding="utf-8")
    text = compare(oracle_report, wrong)
    for metric in METRICS[:4]:
        assert any(
            line.startswith(metric) and line.rstrip().endswith("-") for line in text.splitlines()
        )
    not_passed = [r.id for r in results if not r.passed]
    assert f"cases that changed: {len(not_passed)}" in text
    for cid in not_passed:
        assert f"  {cid}: passed ok->wrong" in text


def test_compare_from_the_command_line(
    tmp_path: Path, oracle_report: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    a = tmp_path / "a.json"
    a.write_text(json.dumps(oracle_report), encoding="utf-8")
    assert main(["--home", str(tmp_path / "p"), "eval", "--compare", str(a), str(a)]) == 0
    out = capsys.readouterr().out
    assert "cases that changed: 0" in out
    assert "pass_rate" in out and "=" in out
    not_a_report = tmp_path / "x.json"
    not_a_report.write_text("[]", encoding="utf-8")
    assert (
        main(["--home", str(tmp_path / "p"), "eval", "--compare", str(a), str(not_a_report)]) == 1
    )
    assert "is not a botpsy eval report" in capsys.readouterr().err


def test_the_wrong_pattern_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "wrong.json"
    home = str(tmp_path / "p")
    args = ["--home", home, "eval", "--replay-wrong", "--domain", "music", "--quiet"]
    assert main([*args, "--json", str(out)]) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["run"]["model"].startswith("wrong")
    assert 0 < report["overall"]["pass_rate"] < 1
    assert "not passed" in capsys.readouterr().out


# --- the loader -----------------------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "id": "mine-001",
    "domain": "weather",
    "category": "simple",
    "language": "en",
    "now": "2026-03-10T08:00",
    "time_zone": "Europe/Paris",
    "request": "Weather in Lyon?",
    "expect": {"calls": [{"tool": "get_weather", "arguments": {"place": "Lyon"}}]},
}


def _write(folder: Path, name: str, data: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_the_documented_examples_are_valid_cases_the_oracle_passes(tmp_path: Path) -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "EVALUATION.md"
    blocks = re.findall(r"```json\n(\{\n  \"id\".*?)```", doc.read_text(encoding="utf-8"), re.S)
    examples = [json.loads(b) for b in blocks]
    kinds = {e["category"] for e in examples} | {
        "end_state" for e in examples if "end_state" in e["expect"]
    }
    assert kinds >= {*CATEGORIES, "end_state"}
    _write(tmp_path, "examples.json", examples)
    cases = load_cases(tmp_path)
    results = run_cases(cases, lambda case, i: ReplayBackend(oracle_turns(case)))
    assert [(r.id, r.problems) for r in results if not r.passed] == []


def test_every_json_file_in_the_folder_is_read(tmp_path: Path) -> None:
    _write(tmp_path, "a.json", [GOOD])
    _write(tmp_path, "b_more.json", [{**GOOD, "id": "mine-002"}])
    _write(tmp_path, "notes.txt", "not a case file")
    assert [c.id for c in load_cases(tmp_path)] == ["mine-001", "mine-002"]
    assert [c.id for c in load_cases(tmp_path, ids=["mine-002"])] == ["mine-002"]
    assert len(load_cases(tmp_path, limit=1)) == 1
    assert [c.id for c in load_cases(tmp_path, domains=["weather"])] == ["mine-001", "mine-002"]
    with pytest.raises(CaseError, match="No case has the domain 'music'"):
        load_cases(tmp_path, domains=["music"])
    assert shipped_cases_dir().is_dir()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("[{", r"Cannot read the case file .*bad\.json"),
        ([{**GOOD, "expect": {}}], r"bad\.json, case 'mine-001' is invalid: expect: .*give calls"),
        ([{**GOOD, "domain": "Cooking!"}], r"case 'mine-001' is invalid: domain"),
        ([{**GOOD, "now": "tomorrow"}], r"case 'mine-001' is invalid: now: 'tomorrow' is not"),
        ([{**GOOD, "category": "parallel"}], r"case 'mine-001' is invalid: .*any_order group"),
        (
            [
                {
                    **GOOD,
                    "expect": {
                        "calls": [{"tool": "get_weather", "checks": {"place": {"near": 1}}}]
                    },
                }
            ],
            r"case 'mine-001' is invalid: .*get_weather\.place: a check needs exactly one of",
        ),
        ([{**GOOD, "turns": [{"user": "a"}, {"user": "b"}]}], "exactly one of request and turns"),
        ([{k: v for k, v in GOOD.items() if k != "id"}], r"bad\.json, case #1 is invalid: id"),
        ([GOOD, GOOD], r"Case id 'mine-001' is in both bad\.json and bad\.json"),
    ],
)
def test_a_bad_case_is_named_with_its_file_and_id(tmp_path: Path, data: Any, message: str) -> None:
    _write(tmp_path, "bad.json", data)
    with pytest.raises(CaseError, match=message):
        load_cases(tmp_path)


def test_a_case_the_app_cannot_run_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = {**GOOD, "expect": {"calls": [{"tool": "get_weather", "arguments": {"place": 3}}]}}
    _write(tmp_path / "c", "x.json", [bad])
    home = str(tmp_path / "p")
    assert main(["--home", home, "eval", "--replay-oracle", "--cases", str(tmp_path / "c")]) == 1
    assert "mine-001: the canonical arguments of get_weather are invalid" in capsys.readouterr().err
    tolerant = {**GOOD, "expect": {**GOOD["expect"], "tolerate": ["set_alarm"]}}
    _write(tmp_path / "d", "x.json", [tolerant])
    assert main(["--home", home, "eval", "--replay-oracle", "--cases", str(tmp_path / "d")]) == 1
    assert "tolerates 'set_alarm', which is not a read-only tool" in capsys.readouterr().err
