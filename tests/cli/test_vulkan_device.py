"""The model on a GPU through llama.cpp's Vulkan backend, loaded as a module at start, proven
here on Mesa's lavapipe (Vulkan on the CPU) through the real CLI: it offloads every layer and
answers with the tokens the CPU gives (the same seed, the same draws); it falls back to the CPU
when no device is present, when the module is missing or broken, and when the backend crashes
in the first decode (remembered for the next start, retried by `botpsy doctor --retry-gpu`).

The module is built from llama-cpp-python's vendored llama.cpp by tests.helpers.vulkan_backend
(about 20 minutes on 2 cores, cached): these tests (mark ``vulkan``) never build it
themselves; without it they skip with the reason (under CI they fail). CI builds it in a
time-budgeted step and runs them there (.ci/run); the main suite leaves them out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.llm.engines.worker_protocol import CRASH_FILE_ENV
from tests.cli.test_engine_crash import botpsy, log_text, make_profile
from tests.helpers import vulkan_backend
from tests.helpers.models import tiny_qwen35_gguf
from tests.helpers.services import missing

pytestmark = [pytest.mark.model, pytest.mark.vulkan]

REQUEST = "Hello, who are you?"
# llama.cpp hides a CPU-type Vulkan device (lavapipe) unless told; its own variable names it
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0", "VK_ICD_FILENAMES": str(vulkan_backend.LAVAPIPE_ICD)}


@pytest.fixture(scope="module")
def module() -> Path:
    """The cached Vulkan backend module (never built here: see the module's comment)."""
    if not vulkan_backend.LAVAPIPE_ICD.is_file():
        missing("Mesa's lavapipe (Vulkan on the CPU)", "apt install mesa-vulkan-drivers")
    found = vulkan_backend.cached_module()
    if found is None:
        missing(
            "llama.cpp's Vulkan backend module (built, not installed)",
            "python -m tests.helpers.vulkan_backend --progress builds it in about 20 min",
        )
    return found


def profile(tmp_path: Path, backends: Path, **settings: Any) -> Path:
    """A profile for the tiny model whose prompt lists only the request's tools (a short
    prompt: lavapipe reads about a hundred tokens a second), sampled at temperature 1 with a
    fixed seed: at temperature 0 the random-weight model's most likely token renders as nothing,
    and the same seed draws the same visible tokens only where the logits agree."""
    home = make_profile(
        tmp_path,
        tiny_qwen35_gguf(),
        n_ctx=4096,
        max_tokens=16,
        temperature=1.0,
        gpu_backend_dir=str(backends),
        **settings,
    )
    config = home / "config" / "config.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    data["agent"] = {"prompt_tools": "selected"}
    config.write_text(json.dumps(data), encoding="utf-8")
    return home


def checks(home: Path, *extra: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    run = botpsy(home, "doctor", "--json", *extra, env=env)
    assert "Traceback" not in run.stderr, run.stderr
    return {c["name"]: c for c in json.loads(run.stdout)}


def ask(home: Path, env: dict[str, str]) -> dict[str, Any]:
    run = botpsy(home, "ask", "--json", REQUEST, env=env)
    assert "Traceback" not in run.stderr, run.stderr
    answer: dict[str, Any] = json.loads(run.stdout)
    return answer


def generated(home: Path, answer: dict[str, Any]) -> str:
    """What the model wrote, as the conversation keeps it."""
    run = botpsy(home, "history", answer["conversation_id"], "--json")
    last = json.loads(run.stdout)[-1]
    assert last["role"] == "assistant"
    return f"{last.get('reasoning_content', '')}|{last['content']}"


def test_the_model_runs_on_the_gpu_and_answers_as_on_the_cpu(tmp_path: Path, module: Path) -> None:
    gpu_home = profile(tmp_path / "gpu", module.parent)
    cpu_home = profile(tmp_path / "cpu", module.parent, device="cpu")

    device = checks(gpu_home, env=LAVAPIPE)["device"]
    assert device["status"] == "info"
    assert device["detail"].startswith("on llvmpipe"), device  # lavapipe's device name
    layers = int(tiny_qwen35_gguf_layers()) + 1  # llama.cpp counts the output layer too
    assert f"{layers} of {layers} layers offloaded" in device["detail"]

    capped = checks(profile(tmp_path / "capped", module.parent, n_gpu_layers=2), env=LAVAPIPE)
    assert f"2 of {layers} layers offloaded" in capped["device"]["detail"], capped["device"]

    on_gpu = ask(gpu_home, LAVAPIPE)
    on_cpu = ask(cpu_home, LAVAPIPE)
    assert on_gpu["error"] is None and on_cpu["error"] is None
    assert "runs on llvmpipe" in log_text(gpu_home)
    assert "runs on the CPU: model.device is cpu" in log_text(cpu_home)
    # the same prompt, and the same tokens drawn with the same seed from both devices' logits
    assert on_gpu["turns"][0]["prompt_tokens"] == on_cpu["turns"][0]["prompt_tokens"]
    assert on_gpu["turns"][0]["completion_tokens"] == on_cpu["turns"][0]["completion_tokens"] > 0
    written = generated(cpu_home, on_cpu)
    assert len(written.strip("|")) > 8  # visible text, not only control tokens
    assert generated(gpu_home, on_gpu) == written


def tiny_qwen35_gguf_layers() -> int:
    from botpsy_desktop.llm.models.gguf_info import read_gguf_info

    return read_gguf_info(tiny_qwen35_gguf()).arch_int("block_count")


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("no driver", "found no working Vulkan driver"),
        ("lavapipe hidden", "the Vulkan backend loaded but found no GPU device"),
        ("missing module", "no Vulkan backend (libggml-vulkan.so not in"),
        ("broken module", "libggml-vulkan.so is damaged (65536 bytes"),
    ],
)
def test_without_a_usable_gpu_the_model_runs_on_the_cpu(
    tmp_path: Path, module: Path, case: str, reason: str
) -> None:
    backends, env = module.parent, dict(LAVAPIPE)
    if case == "no driver":  # a Vulkan loader with no driver at all
        env["VK_ICD_FILENAMES"] = str(tmp_path / "no-driver.json")
    elif case == "lavapipe hidden":  # only a CPU-type device: llama.cpp's default hides it
        del env["GGML_VK_VISIBLE_DEVICES"]
    elif case == "missing module":
        backends = tmp_path / "empty"
        backends.mkdir()
    else:  # a damaged download: the first 64 KiB of the module
        backends = tmp_path / "broken"
        backends.mkdir()
        (backends / module.name).write_bytes(module.read_bytes()[: 64 * 1024])
    home = profile(tmp_path, backends)
    answer = ask(home, env)
    assert answer["error"] is None, answer["error"]
    assert answer["turns"][0]["completion_tokens"] > 0
    assert "the model runs on the CPU: " in log_text(home)
    assert reason in log_text(home).split("the model runs on the CPU: ", 1)[1].splitlines()[0]


def test_a_gpu_crash_in_the_first_decode_moves_the_model_to_the_cpu(
    tmp_path: Path, module: Path
) -> None:
    home = profile(tmp_path, module.parent)
    crash = tmp_path / "crash-now"
    crash.write_text("SIGSEGV 0", encoding="utf-8")  # before any token: its first decode
    run = botpsy(home, "ask", "--json", REQUEST, env={**LAVAPIPE, CRASH_FILE_ENV: str(crash)})
    assert run.returncode == 1, run.stderr
    message = json.loads(run.stdout)["error"]["message"]
    assert "the first time it ran tiny-qwen35" in message and "on llvmpipe" in message
    assert "It will restart on the CPU for your next request" in message
    layouts = json.loads((home / "cache" / "engine" / "layouts.json").read_text("utf-8"))
    [entry] = layouts["models"].values()
    assert entry["cpu"]["after"].startswith("llvmpipe") and "plain" not in entry

    # the next start remembers it: the CPU, and doctor says why and what to do
    answer = ask(home, LAVAPIPE)
    assert answer["error"] is None
    assert "the model runs on the CPU: moved there after a GPU backend crash" in log_text(home)
    device = checks(home, env=LAVAPIPE)["device"]
    assert (
        device["status"] == "warn"
        and "GPU backend crashed (segmentation fault)" in (device["detail"])
    )
    assert "`botpsy doctor --retry-gpu`" in device["hint"]

    # a retry that decodes forgets the verdict: the GPU again
    retried = checks(home, "--retry-gpu", env=LAVAPIPE)
    assert retried["gpu"]["status"] == "ok", retried["gpu"]
    assert "layers offloaded" in retried["gpu"]["detail"]
    assert retried["device"]["detail"].startswith("on llvmpipe"), retried["device"]
    layouts = json.loads((home / "cache" / "engine" / "layouts.json").read_text("utf-8"))
    [entry] = layouts["models"].values()
    assert "cpu" not in entry
