"""`botpsy eval --selection`: recall of the expected tools per language and domain, prefix sizes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from botpsy_desktop.cli import main
from tests.helpers.models import tiny_qwen35_gguf


def run_selection(tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "selection.json"
    home = str(tmp_path / "p")
    code = main(["--home", home, "eval", "--selection", "--json", str(out), *extra])
    report = json.loads(out.read_text(encoding="utf-8"))
    assert code == (0 if not report["misses"] else 1)
    return report


def test_the_shipped_cases_are_offered_their_tools_in_every_language(tmp_path: Path) -> None:
    report = run_selection(tmp_path)
    assert report["unit"] == "characters"  # no model configured: sizes in characters
    assert report["overall"]["cases"] >= 200
    assert report["overall"]["recall"] >= 0.99, report["misses"]
    languages = report["by_language"]
    assert {"en", "fr", "de", "es", "ja", "zh"} <= set(languages)
    for language, figures in languages.items():
        assert figures["recall"] >= 0.97, (language, report["misses"])
    shapes = report["prefix_by_shape"]
    # most requests get one domain's tools, a far smaller prompt than all of them
    assert shapes["1 domain(s)"]["cases"] > shapes["all tools"]["cases"]
    assert shapes["1 domain(s)"]["max"] < shapes["all tools"]["min"] / 2


def test_a_case_whose_tools_are_not_offered_is_reported(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    case = {
        "id": "hidden-001",
        "domain": "weather",
        "category": "simple",
        "language": "en",
        "now": "2026-03-10T09:00",
        "time_zone": "Europe/Paris",
        # names music only, yet the weather is expected: selection cannot know
        "request": "play a song about Lyon",
        "expect": {"calls": [{"tool": "get_weather", "arguments": {"place": "Lyon"}}]},
    }
    (cases / "c.json").write_text(json.dumps([case]), encoding="utf-8")
    report = run_selection(tmp_path, "--cases", str(cases))
    assert report["overall"] == {"cases": 1, "recalled": 0, "recall": 0.0}
    assert report["misses"] == [
        {"id": "hidden-001", "missing": ["get_weather"], "offered_domains": ["music"]}
    ]


@pytest.mark.model
def test_prefix_sizes_in_tokens_with_the_models_tokenizer(tmp_path: Path) -> None:
    # the tiny model has BotPsy's tokenizer and chat template: the sizes are BotPsy's
    report = run_selection(tmp_path, "--model", str(tiny_qwen35_gguf()))
    assert report["unit"] == "tokens"
    one = report["prefix_by_shape"]["1 domain(s)"]
    assert one["max"] <= 2500, report["prefix_by_set"]
    assert report["prefix_by_shape"]["all tools"]["max"] > one["max"]
