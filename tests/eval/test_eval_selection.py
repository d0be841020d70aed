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
    # measured 1.000 (docs/EVALUATION.md 2.4; the target is 0.99): a floor
    assert report["overall"]["recall"] >= 0.99, report["misses"]
    languages = report["by_language"]
    assert {"en", "fr", "de", "es", "ja", "zh"} <= set(languages)
    for language, figures in languages.items():
        assert figures["recall"] >= 0.97, (language, report["misses"])
    shapes = report["prefix_by_shape"]
    # the prompt is well under every tool's (measured 9,288 characters of 23,052 on average);
    # few requests fall back to every tool (measured 0.023)
    assert report["prefix"]["mean"] < 0.5 * 23052, report["prefix"]
    assert shapes["1 domain(s)"]["cases"] > report["overall"]["cases"] / 4
    assert report["fallback"]["share"] <= 0.05


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
        "request": "play some jazz",
        "expect": {"calls": [{"tool": "get_weather", "arguments": {"place": "Lyon"}}]},
    }
    (cases / "c.json").write_text(json.dumps([case]), encoding="utf-8")
    report = run_selection(tmp_path, "--cases", str(cases))
    assert report["overall"] == {"cases": 1, "recalled": 0, "recall": 0.0, "fallback": 0.0}
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
    assert report["prefix_by_shape"]["no domain"]["max"] < 200  # chit-chat: no schemas
    # measured 2,797 tokens on average, every tool 6,664
    assert report["prefix"]["mean"] < 0.5 * report["prefix_by_shape"]["all tools"]["max"]


def test_the_held_out_set_is_large_multilingual_and_reported(tmp_path: Path) -> None:
    out = tmp_path / "heldout.json"
    code = main(
        ["--home", str(tmp_path / "p"), "eval", "--selection", "--held-out", "--json", str(out)]
    )
    report = json.loads(out.read_text(encoding="utf-8"))
    assert code == (0 if not report["misses"] else 1)
    assert report["overall"]["cases"] >= 400
    languages = report["by_language"]
    assert {"en", "de", "fr", "es", "it", "pt", "ja", "zh", "ru", "hi", "ko"} <= set(languages)
    assert all(v["cases"] >= 35 for v in languages.values())
    kinds = report["by_domain"]  # a selection set's rows are its kinds of request
    assert {"indirect", "colloquial", "typo", "multi", "followup", "chitchat"} <= set(kinds)
    # every figure the issue asks for is in the report
    assert report["fallback"]["requests"] > 300
    assert report["no_tool_needed"]["requests"] >= 60
    assert report["extra_domains"]["mean"] is not None
    assert report["prefix"]["mean"] > 0


def test_a_selection_set_of_ones_own_names_tools_and_turns(tmp_path: Path) -> None:
    selection_set = {
        "format": "botpsy-selection/1",
        "requests": [
            {
                "id": "w",
                "language": "en",
                "request": "is it raining in Oslo?",
                "tools": ["get_weather"],
            },
            {
                "id": "f",
                "language": "en",
                "turns": [
                    {
                        "user": "what's on friday?",
                        "assistant": "Dentist at 10.",
                        "calls": ["list_events"],
                    },
                    {"user": "move it to 11"},
                ],
                "domains": ["calendar"],
            },
            {"id": "c", "language": "en", "request": "thanks a lot!", "domains": []},
        ],
    }
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(selection_set), encoding="utf-8")
    report = run_selection(tmp_path, "--cases", str(path))
    assert report["overall"] == {"cases": 3, "recalled": 3, "recall": 1.0, "fallback": 0.0}
    chat = report["no_tool_needed"]  # "thanks a lot!" gets a domain or none, never everything
    assert chat["requests"] == 1 and chat["no_domain"] + chat["some_domains"] == 1, chat
    assert chat["everything"] == 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "botpsy-selection/1", "requests": [{"id": "x"}]}))
    out = tmp_path / "x.json"
    assert (
        main(
            [
                "--home",
                str(tmp_path / "p"),
                "eval",
                "--selection",
                "--cases",
                str(bad),
                "--json",
                str(out),
            ]
        )
        != 0
    )


def test_no_held_out_request_is_among_the_selection_models_training_phrases() -> None:
    # the held-out figures are honest only if the model never saw these requests
    from botpsy_desktop.agent.selection_model import normalize

    root = Path(__file__).resolve().parents[2] / "tools" / "selection"
    trained = set()
    for path in root.glob("*.txt"):
        for line in path.read_text(encoding="utf-8").splitlines():
            for part in line.split(":", 1)[-1].split(";") if ":" in line else [line]:
                trained.add(" ".join(normalize(part).split()))
    held = [
        r for f in heldout_files() for r in json.loads(f.read_text(encoding="utf-8"))["requests"]
    ]
    assert len(held) >= 880  # both held-out sets
    texts = [t["user"] for r in held for t in r.get("turns") or [{"user": r.get("request")}]]
    copies = [t for t in texts if " ".join(normalize(t).split()) in trained]
    assert not copies
    # and its training tool does not read them (it names their folder once, to say so)
    source = (root / "train.py").read_text(encoding="utf-8")
    assert source.count("selection_sets") == 1 and "heldout" not in source


def heldout_files() -> list[Path]:
    from botpsy_desktop.eval.selection import heldout_path

    return sorted(heldout_path().glob("*.json"))


@pytest.mark.servers
def test_a_profiles_tool_server_is_measured_too(tmp_path: Path) -> None:
    # a real tool server (mcp-server-time) added to the profile: its tools take part in the
    # selection measured, found by their names and descriptions, and offered when unsure
    home = str(tmp_path / "p")
    assert main(["--home", home, "mcp", "add", "time", "--", "mcp-server-time"]) == 0
    selection_set = {
        "format": "botpsy-selection/1",
        "requests": [
            {
                "id": "t1",
                "language": "en",
                "request": "what's the current time in Tokyo?",
                "tools": ["time__get_current_time"],
            },
            {
                "id": "w1",
                "language": "en",
                "request": "will it rain in Oslo tomorrow?",
                "domains": ["weather"],
            },
        ],
    }
    path = tmp_path / "servers.json"
    path.write_text(json.dumps(selection_set), encoding="utf-8")
    out = tmp_path / "report.json"
    code = main(["--home", home, "eval", "--selection", "--cases", str(path), "--json", str(out)])
    report = json.loads(out.read_text(encoding="utf-8"))
    assert code == 0 and report["overall"]["recalled"] == 2, report
    sets = report["prefix_by_set"]
    assert any("time" in key.split("+") for key in sets), sets  # the server's own domain
    assert "weather" in sets  # and a request about something else does not get it
