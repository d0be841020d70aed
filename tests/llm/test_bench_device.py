"""`tools/bench.py --device` on the tiny model: the CPU and llama.cpp's Vulkan backend on Mesa's
lavapipe side by side in one run, raw llama.cpp against the app through its worker on each, and
the same tokens at temperature 0 on both. Marked ``vulkan`` (the cached backend module, see
tests/cli/test_vulkan_device.py): the main suite leaves it out, .ci/run runs it with the others.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_vulkan_device import LAVAPIPE, module, tiny_qwen35_gguf_layers
from tests.helpers.models import REPO_ROOT, tiny_qwen35_gguf

pytestmark = [pytest.mark.model, pytest.mark.vulkan]
__all__ = ["module"]  # the fixture, shared with the Vulkan CLI tests


def test_the_device_bench_puts_the_cpu_and_lavapipe_side_by_side(module: Path) -> None:
    command = [
        sys.executable,
        str(REPO_ROOT / "tools" / "bench.py"),
        "--model",
        str(tiny_qwen35_gguf()),
        "--tools",
        "none",  # the shortest prompt: lavapipe reads a few tokens a second here
        "--n-ctx",
        "2048",
        "--threads",
        "1",
        "--repeats",
        "1",
        "--decode-tokens",
        "8",
        "--prefill-tokens",
        "16",
        "--device",  # cpu,auto: the CPU and the GPU the app would choose
        "--gpu-backend-dir",
        str(module.parent),
    ]
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **LAVAPIPE},
    )
    assert proc.returncode == 0, proc.stderr
    table, last_line = proc.stdout.rstrip().rsplit("\n", 1)
    r = json.loads(last_line)
    cpu, gpu = r["devices"]
    assert (cpu["setting"], gpu["setting"]) == ("cpu", "auto")
    assert cpu["on_gpu"] is False and cpu["name"] == "CPU"
    # the GPU the app chose is lavapipe, every layer on it, and it is called a software device
    assert gpu["on_gpu"] is True and gpu["name"].startswith("llvmpipe"), gpu
    layers = tiny_qwen35_gguf_layers() + 1  # llama.cpp counts the output layer too
    assert gpu["layers"] == f"{layers} of {layers}"
    assert gpu["software"] is True and cpu["software"] is False
    assert f"{gpu['name']} is a software device" in table
    assert r["targets"]["auto.app_over_raw_decode"]["ok"] is None  # shown, not judged
    # the same tokens at temperature 0, from logits that agree
    assert len(cpu["greedy_tokens"]) == 8
    assert gpu["greedy_tokens"] == cpu["greedy_tokens"]
    assert r["same_tokens_at_temperature_0"] is True
    assert "same tokens at temperature 0 on every device: yes" in table
    assert gpu["first_token_unlike_first_device"] is None
    assert gpu["top5_same_steps"] >= 1 and gpu["max_logit_diff"] < 0.5, gpu
    # every figure measured on both devices: raw against the app, cold and warm
    for row in (cpu, gpu):
        for key in (
            "raw_prefill_tps",
            "raw_prompt_prefill_tps",
            "app_prefill_tps",
            "raw_decode_tps",
            "app_decode_tps",
            "ttft_cold_s",
            "ttft_warm_s",
            "worker_peak_rss_mib",
        ):
            assert row[key] > 0, (row["setting"], key)
        assert row["decode_tokens_timed"] > 0
        assert row["ttft_warm_s"] < row["ttft_cold_s"]
