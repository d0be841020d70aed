"""Where the model runs (llm/models/gpu_device.py): how many layers fit a GPU's free memory, and
the CPU with the reason when there is nothing to offload to. The Vulkan backend itself, on
lavapipe, through the real CLI: tests/cli/test_vulkan_device.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.llm.models import gpu_device

MiB = 2**20
# a BotPsy-0.8B-sized need: 530 MiB of weights, 96 MiB of KV cache, 20 MiB of state
NEED = {
    "weights": 530 * MiB,
    "kv_cache": 96 * MiB,
    "recurrent_state": 20 * MiB,
    "total": 646 * MiB,
}
LAYERS = 24


def test_every_layer_goes_to_a_device_with_room() -> None:
    assert gpu_device.layers_that_fit(NEED, LAYERS, free=4096 * MiB) == -1


def test_a_small_device_takes_the_layers_that_fit_beside_kv_and_state() -> None:
    # 0.9 x 800 - 256 scratch = 464 MiB: 464 - 96 - 20 = 348 MiB of 530/25 MiB layers
    assert gpu_device.layers_that_fit(NEED, LAYERS, free=800 * MiB) == 16
    # never more than the model has, never less than none
    assert gpu_device.layers_that_fit(NEED, LAYERS, free=300 * MiB) == 0


def test_each_reason_for_the_cpu_is_said(tmp_path: Path) -> None:
    def place(setting: str, folders: list[Path], max_layers: int = -1) -> gpu_device.Placement:
        return gpu_device.place(
            setting,
            libggml=None,
            folders=folders,
            need=NEED,
            n_layers=LAYERS,
            max_layers=max_layers,
        )

    chosen = place("cpu", [tmp_path])
    assert chosen.device is None and chosen.reason == "model.device is cpu"
    assert place("auto", [tmp_path], max_layers=0).reason == "model.n_gpu_layers is 0"
    missing = place("vulkan", [tmp_path / "gpu", tmp_path])
    assert missing.device is None and missing.n_gpu_layers == 0
    assert missing.reason == (
        f"no Vulkan backend ({gpu_device.VULKAN_MODULE} not in {tmp_path / 'gpu'}, {tmp_path})"
    )
    assert missing.describe() == {
        "setting": "vulkan",
        "device": "cpu",
        "reason": missing.reason,
        "layers": 0,
        "of_layers": LAYERS + 1,
    }
    assert gpu_device.describe_device(missing.describe()).startswith("on the CPU (no Vulkan")
    with pytest.raises(ValueError, match="unknown device 'cuda'"):
        place("cuda", [tmp_path])


def test_the_setting_is_checked_by_the_config() -> None:
    assert ModelSettings().device == "auto" and ModelSettings().n_gpu_layers == -1
    with pytest.raises(ValidationError):
        ModelSettings(device="metal")  # type: ignore[arg-type]


def test_a_library_cut_short_is_found_before_dlopen_would_crash_on_it(tmp_path: Path) -> None:
    """dlopen maps a truncated library's segments past its end and the first read of them is a
    bus error (it took the whole worker down): the module is checked before it is loaded."""
    import llama_cpp

    whole = Path(llama_cpp.__file__).parent / "lib" / "libllama.so"
    assert gpu_device.elf_damage(whole.resolve()) == ""
    data = whole.read_bytes()
    for cut in (4096, len(data) // 2):
        (tmp_path / "cut.so").write_bytes(data[:cut])
        assert gpu_device.elf_damage(tmp_path / "cut.so").startswith(f"{cut} bytes")
    (tmp_path / "text.so").write_text("not a library")  # dlopen refuses it with an error
    assert gpu_device.elf_damage(tmp_path / "text.so") == ""
