"""The offline demo: SmolLM2-135M (8,192 tokens of context) answers `botpsy ask` with the app's
tools in its prompt, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from botpsy_desktop.cli import main
from tests.helpers.demo_package import smollm2_site

pytestmark = pytest.mark.model


def test_the_demo_model_answers_a_simple_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(smollm2_site()))  # as if `botpsy-desktop[demo]` installed
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    # the shipped defaults (2,048 tokens kept for the reply), a fixed seed for a repeatable run
    # one thread: llama.cpp threads waiting on each other crawl on a shared, loaded CPU
    model = {"seed": 1, "n_threads": 1, "n_threads_batch": 1}
    settings = {"files": {"roots": [str(tmp_path / "files")]}, "model": model}
    (home / "config" / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    assert main(["--home", str(home), "model", "pull", "smollm2-135m-demo"]) == 0
    capsys.readouterr()

    # names no domain: every tool is offered, and the prompt still fits the 8,192 tokens
    code = main(["--home", str(home), "ask", "Say hello in one short sentence."])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "does not fit" not in out + err
    assert out.strip(), err
