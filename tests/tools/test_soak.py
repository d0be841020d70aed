"""The soak bench (tools/soak.py) runs: a few requests through the whole app on the tiny model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

SOAK = Path(__file__).resolve().parents[2] / "tools" / "soak.py"


def soak_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("botpsy_soak", SOAK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.model
def test_soak_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    soak = soak_module()
    assert soak.main(["--requests", "5", "--max-tokens", "8", "--threads", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["requests"] == 5 and len(result["samples"]) == 5
    assert [s["request"] for s in result["samples"]] == [1, 2, 3, 4, 5]
    assert all(s["rss_kib"] > 10_000 and s["open_fds"] > 2 for s in result["samples"])
    assert all(s["prompt_tokens"] > 1000 for s in result["samples"])  # every tool schema
    assert sum(result["outcomes"].values()) == 5
    assert "model" not in result["outcomes"] and "context" not in result["outcomes"]
    for key in ("rss_kib", "open_fds"):
        summary = result[key]
        assert set(summary) == {"first", "last", "max", "growth_percent"}
        assert summary["max"] >= max(summary["first"], summary["last"])
    soak._print(result)
    printed = capsys.readouterr().out
    assert "5 requests on tiny16k-qwen35" in printed and "growth" in printed
