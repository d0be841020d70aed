"""The offline demo: SmolLM2-135M (8,192 tokens of context) answers `botpsy ask` with the app's
tools in its prompt, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from botpsy_desktop.cli import main
from tests.helpers.demo_package import smollm2_site

pytestmark = pytest.mark.model


def test_with_no_model_set_up_the_first_answer_comes_from_the_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(smollm2_site()))  # as if `botpsy-desktop[demo]` installed
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    model = {"seed": 1, "n_threads": 1, "n_threads_batch": 1, "max_tokens": 64}
    settings = {"files": {"roots": [str(tmp_path / "files")]}, "model": model}
    config = home / "config" / "config.json"
    config.write_text(json.dumps(settings), encoding="utf-8")

    # the README's first command, with no model set up and no network
    code = main(["--home", str(home), "ask", "set a timer for 10 minutes"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert err.startswith(
        "Using SmolLM2-135M-Instruct (demo): a tiny offline demo model, too small to use the "
        "tools reliably. Get BotPsy-0.8B, the model this app is made for, with `botpsy model "
        "pull`.\n"
    )
    assert out.strip() or "[tool]" in err
    # said once: the next request answers without it; it names no domain, so every tool is
    # offered, and with the shipped defaults (2,048 tokens kept for the reply) the prompt still
    # fits the 8,192 tokens
    saved = json.loads(config.read_text(encoding="utf-8"))
    del saved["model"]["max_tokens"]
    config.write_text(json.dumps(saved), encoding="utf-8")
    code = main(["--home", str(home), "ask", "Say hello in one short sentence."])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "tiny offline demo" not in err and out.strip()
    assert "does not fit" not in out + err
    # the demo is installed (linked in place) but not made active: BotPsy, once pulled or
    # imported, becomes the active model
    assert json.loads(config.read_text(encoding="utf-8"))["model"].get("path") is None
    assert main(["--home", str(home), "model", "list", "--json"]) == 0
    (installed,) = json.loads(capsys.readouterr().out)["installed"]
    assert installed["id"] == "smollm2-135m-demo" and not installed["active"]

    # pulled, the demo becomes the active model; the model is not prepared ahead here
    # (preparing the demo's usual tool sets takes minutes on 2 cores; tests/cli/test_model_cli.py
    # tests it)
    assert main(["--home", str(home), "model", "pull", "smollm2-135m-demo", "--no-prepare"]) == 0
    out, err = capsys.readouterr()
    assert "Preparing" not in out + err
    assert main(["--home", str(home), "model", "list", "--json"]) == 0
    (installed,) = json.loads(capsys.readouterr().out)["installed"]
    assert installed["id"] == "smollm2-135m-demo" and installed["active"]
