"""Real models through the harness: prompt-path fidelity, and a SmolLM2-135M smoke run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from botpsy_desktop.cli import main
from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.eval.fidelity import check_fidelity, conversation, reference_template
from botpsy_desktop.eval.report import METRICS
from botpsy_desktop.llm.engines.engine import LlamaBackend
from tests.helpers.models import smollm2_gguf, tiny_qwen35_gguf

pytestmark = pytest.mark.model


def _load(path: Path, n_ctx: int = 4096) -> LlamaBackend:
    # one thread: the suite runs in two processes on two cores, and two llama.cpp threads that
    # wait for each other at every layer beside another busy process are several times slower
    return LlamaBackend(ModelSettings(n_ctx=n_ctx, n_threads=1, n_threads_batch=1, seed=0), path)


def test_the_scripted_conversation_has_every_part_of_a_prompt() -> None:
    prompts, tools = conversation()
    last = prompts[-1]
    roles = [m["role"] for m in last]
    assert roles[0] == "system" and roles.count("user") == 2 and "tool" in roles
    assert any(m.get("reasoning_content") for m in last if m["role"] == "assistant")
    assert any(m.get("tool_calls") for m in last if m["role"] == "assistant")
    tool_results = [m["content"] for m in last if m["role"] == "tool"]
    assert any("Lyon" in r for r in tool_results)  # real results from the weather stand-in
    assert {t["function"]["name"] for t in tools} == {"get_weather", "set_alarm", "list_alarms"}


def test_the_tiny_qwen35_engine_evaluates_its_own_templates_tokens() -> None:
    model = tiny_qwen35_gguf()
    assert reference_template(model)[1] == "the GGUF's chat template"
    backend = _load(model)
    try:
        result = check_fidelity(model, backend)
        assert result.mismatches == []
        assert result.ok and result.prompts == 10 and result.tokens > 5000
        # the check does see a difference: a template one newline off is reported
        template, _ = reference_template(model)
        altered = template.replace("<|im_start|>", "<|im_start|> ", 1)
        assert altered != template
        off = check_fidelity(
            model, backend, thinking=(False,), every_prompt=False, template=altered
        )
        assert not off.ok and off.mismatches
        assert "first difference at token" in off.mismatches[0]
    finally:
        backend.close()


def test_smollm2_is_prompted_with_the_documented_fallback_token_for_token() -> None:
    model = smollm2_gguf()
    assert "ChatML tool fallback" in reference_template(model)[1]
    backend = _load(model)
    try:
        # every prompt as the engine would tokenize it on a fresh context, without the prefill,
        # and the last one (both requests, every kind of message) as it really evaluates it
        planned = check_fidelity(model, backend, evaluate=False)
        evaluated = check_fidelity(model, backend, thinking=(False,), every_prompt=False)
    finally:
        backend.close()
    assert planned.mismatches == [] and evaluated.mismatches == []
    assert planned.ok and planned.prompts == 10 and planned.tokens > 5000
    assert evaluated.ok and evaluated.prompts == 1 and evaluated.tokens > 1000


def test_a_smollm2_run_produces_a_well_formed_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "smollm2.json"
    code = main(
        [
            "--home",
            str(tmp_path / "profile"),
            "eval",
            "--model",
            str(smollm2_gguf()),
            "--domain",
            "weather",
            "--limit",
            "3",
            "--tools",
            "domain",
            "--n-ctx",
            "4096",
            "--max-tokens",
            "24",
            "--threads",
            "1",
            "--quiet",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    table = capsys.readouterr().out
    assert "overall" in table and "tool" in table
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["format"] == "botpsy-eval/1"
    assert report["run"]["model"].endswith(".gguf")
    assert report["overall"]["cases"] == len(report["cases"]) == 3
    for metric in METRICS:
        value = report["overall"][metric]
        assert value is None or (isinstance(value, float) and value >= 0), metric
        if not metric.endswith("_s") and value is not None:
            assert value <= 1
    assert report["overall"]["ttft_median_s"] > 0
    for case in report["cases"]:
        assert case["model_turns"] >= 1 and case["prompt_tokens"] > 0
        assert (case["wall_s"] > 0 and case["error"] is None) or case["error"]
        assert isinstance(case["passed"], bool)


def test_the_fidelity_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fidelity.json"
    home = str(tmp_path / "profile")
    model = str(tiny_qwen35_gguf())
    args = [
        "--home",
        home,
        "eval",
        "--fidelity",
        "--model",
        model,
        "--n-ctx",
        "4096",
        "--threads",
        "1",
    ]
    assert main([*args, "--json", str(out)]) == 0
    assert "10 prompts" in capsys.readouterr().out
    assert json.loads(out.read_text(encoding="utf-8"))["ok"] is True
    assert main(["--home", home, "eval", "--fidelity", "--model", str(tmp_path / "no.gguf")]) == 1
    assert "does not exist" in capsys.readouterr().err
