"""The CPU weight layout: decided from llama.cpp's feature report, and each layout answers."""

from __future__ import annotations

import platform
import re
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pytest

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.llm.models.cpu_layout import (
    TensorSpec,
    choose_layout,
    cpu_features,
    override_patterns,
    repack_weights,
)
from tests.helpers.models import tiny_qwen35_q4_0_gguf

if TYPE_CHECKING:
    from botpsy_desktop.llm.engines.engine import LlamaBackend

# llama.cpp's system-info lines as they read on three kinds of machine
SAPPHIRE_RAPIDS = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | AMX_INT8 = 1 | "
    "LLAMAFILE = 1 | OPENMP = 1 | REPACK = 1 | "
)
EPYC = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | BMI2 = 1 | "
    "AVX512 = 1 | AVX512_VBMI = 1 | AVX512_VNNI = 1 | AVX512_BF16 = 1 | LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)
OLD_X86 = "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | F16C = 1 | LLAMAFILE = 1 | OPENMP = 1 | "


def test_features_are_read_from_the_report() -> None:
    f = cpu_features(SAPPHIRE_RAPIDS)
    assert f["AMX_INT8"] == "1" and f["AVX2"] == "1" and f["REPACK"] == "1"
    assert "AMX_INT8" not in cpu_features(EPYC)


@pytest.mark.parametrize(
    ("report", "setting", "layout"),
    [
        (SAPPHIRE_RAPIDS, "auto", "repack"),  # AMX crashes llama_decode: repack without it
        (EPYC, "auto", "extra"),  # llama.cpp's own choice where it has no AMX
        (OLD_X86, "auto", "extra"),
        (SAPPHIRE_RAPIDS, "extra", "extra"),  # the setting wins when it names a layout
        (EPYC, "plain", "plain"),
        (EPYC, "repack", "repack"),
    ],
)
def test_the_layout_follows_the_feature_report(report: str, setting: str, layout: str) -> None:
    assert choose_layout(setting, cpu_features(report)) == layout


def test_an_unknown_layout_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="auto, extra, repack or plain"):
        choose_layout("amx", {})


def test_the_setting_is_checked_by_the_config() -> None:
    assert ModelSettings().cpu_layout == "auto"
    with pytest.raises(ValueError):
        ModelSettings.model_validate({"cpu_layout": "fast"})


Q4_0, Q4_K, Q6_K, Q2_K, F32 = 2, 12, 14, 10, 0
WEIGHTS = [
    TensorSpec("token_embd.weight", Q4_K, (1024, 248320)),  # looked up by row: never repacked
    TensorSpec("output_norm.weight", F32, (1024,)),
    TensorSpec("blk.0.attn_qkv.weight", Q4_K, (1024, 6144)),
    TensorSpec("blk.0.ffn_down.weight", Q6_K, (3584, 1024)),  # no x86 repack kernel for Q6_K
    TensorSpec("blk.0.ffn_up.weight", Q4_K, (1024, 3584)),
    TensorSpec("blk.1.ffn_up.weight", Q4_K, (1024, 3584)),
    TensorSpec("blk.11.ffn_up.weight", Q4_K, (1024, 3584)),
    TensorSpec("blk.3.attn_q.weight", Q4_0, (1024, 4096)),
    TensorSpec("blk.3.attn_k.weight", Q4_0, (1024, 12)),  # rows not a multiple of 8
    TensorSpec("blk.3.ssm_conv1d.weight", Q4_K, (4, 6144)),  # a convolution, not a matmul
    TensorSpec("blk.5.ffn_gate.weight", Q2_K, (1024, 3584)),  # Q2_K needs AVX-512
    TensorSpec("output.weight", Q4_K, (1024, 248320)),  # an untied output matrix
]


def names(tensors: list[TensorSpec]) -> set[str]:
    return {t.name for t in tensors}


def test_repack_takes_the_matrices_the_x86_kernels_take() -> None:
    chosen = repack_weights(WEIGHTS, cpu_features(SAPPHIRE_RAPIDS), "x86_64")
    assert names(chosen) == {
        "blk.0.attn_qkv.weight",
        "blk.0.ffn_up.weight",
        "blk.1.ffn_up.weight",
        "blk.11.ffn_up.weight",
        "blk.3.attn_q.weight",
        "blk.5.ffn_gate.weight",
        "output.weight",
    }
    avx2_only = cpu_features(OLD_X86.replace("AVX = 1", "AVX = 1 | AVX2 = 1"))
    assert "blk.5.ffn_gate.weight" not in names(repack_weights(WEIGHTS, avx2_only, "x86_64"))
    assert repack_weights(WEIGHTS, cpu_features(OLD_X86), "x86_64") == []  # no AVX2
    assert repack_weights(WEIGHTS, cpu_features(SAPPHIRE_RAPIDS), "aarch64") == []


def test_the_override_patterns_match_exactly_the_chosen_weights() -> None:
    chosen = repack_weights(WEIGHTS, cpu_features(SAPPHIRE_RAPIDS), "x86_64")
    patterns = override_patterns(chosen)
    assert len(patterns) < len(chosen)  # one per kind of weight, not one per tensor
    every = [*WEIGHTS, TensorSpec("blk.111.ffn_up.weight", Q4_K, (1024, 3584))]
    matched = {t.name for t in every if any(re.search(p, t.name) for p in patterns)}
    assert matched == names(chosen)


def _last_logits(backend: LlamaBackend, text: str) -> npt.NDArray[np.float32]:
    import llama_cpp

    llm = backend._llama
    llm.eval(backend.tokenize(text))
    pointer = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
    return np.ctypeslib.as_array(pointer, shape=(llm.n_vocab(),)).copy()


@pytest.mark.model
def test_repacked_weights_answer_like_plain_ones() -> None:
    """The repack layout (the default on CPUs with AMX) really repacks, and a batch of many
    tokens gives the logits the plain layout gives (to the kernels' rounding)."""
    from botpsy_desktop.llm.engines.engine import LlamaBackend, system_info

    features = cpu_features(system_info())
    if platform.machine().lower() not in ("x86_64", "amd64") or features.get("AVX2") != "1":
        pytest.skip("the x86 repack kernels need AVX2")  # the rule is tested above without a CPU
    path = tiny_qwen35_q4_0_gguf()
    settings = ModelSettings(n_ctx=512, n_threads=1, n_threads_batch=1, state_checkpoints=0)
    text = "A batch of several tokens, evaluated at once. " * 6
    got = {}
    for layout in ("repack", "plain"):
        backend = LlamaBackend(settings, path, layout=layout)
        try:
            got[layout] = (backend.layout, _last_logits(backend, text))
        finally:
            backend.close()
    (repack, repacked), (plain, unpacked) = got["repack"], got["plain"]
    assert repack.layout == "repack" and repack.repacked > 0 and not repack.use_extra_bufts
    assert plain.layout == "plain" and plain.repacked == 0
    assert int(repacked.argmax()) == int(unpacked.argmax())
    assert float(np.corrcoef(repacked, unpacked)[0, 1]) > 0.99
