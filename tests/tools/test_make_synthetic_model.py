"""tools/make_synthetic_model.py: presets keep llama.cpp's qwen35 shapes; the tiny model is real."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.helpers.models import synthetic_model_module, tiny_qwen35_gguf
from tests.helpers.services import missing

GGML_F32, GGML_F16 = 0, 1


@pytest.fixture(scope="module")
def tool() -> Any:
    return synthetic_model_module()


@pytest.fixture(scope="module")
def tiny_path() -> Path:
    return tiny_qwen35_gguf()


@pytest.fixture(scope="module")
def tiny_header(tool: Any, tiny_path: Path) -> Any:
    return tool.read_gguf_header(tiny_path)


def test_presets_satisfy_llama_cpp_constraints(tool: Any) -> None:
    for preset in tool.PRESETS.values():
        preset.validate()
        assert preset.ssm_inner == preset.ssm_v_heads * preset.ssm_head_dim
    broken = tool.PRESETS["tiny"].__class__(
        **{**tool.PRESETS["tiny"].__dict__, "name": "broken", "ssm_v_heads": 3}
    )
    with pytest.raises(ValueError, match="multiple of the key heads"):
        broken.validate()


def test_botpsy_preset_has_qwen35_0_8b_shapes(tool: Any) -> None:
    preset = tool.PRESETS["botpsy"]
    specs = {s.name: s.ne for s in tool.tensor_specs(preset)}
    full_attention = [il for il in range(preset.n_layer) if not preset.is_recurrent(il)]
    assert full_attention == [3, 7, 11, 15, 19, 23]
    assert specs["token_embd.weight"] == (1024, 248_320)
    assert "output.weight" not in specs  # tied embeddings
    assert specs["blk.3.attn_q.weight"] == (1024, 4096)
    assert specs["blk.3.attn_k.weight"] == specs["blk.3.attn_v.weight"] == (1024, 512)
    assert specs["blk.3.attn_output.weight"] == (2048, 1024)
    assert specs["blk.3.attn_q_norm.weight"] == (256,)
    assert specs["blk.0.attn_qkv.weight"] == (1024, 6144)
    assert specs["blk.0.attn_gate.weight"] == (1024, 2048)
    assert specs["blk.0.ssm_conv1d.weight"] == (4, 6144)
    assert specs["blk.0.ssm_a"] == specs["blk.0.ssm_dt.bias"] == (16,)
    assert specs["blk.0.ssm_beta.weight"] == specs["blk.0.ssm_alpha.weight"] == (1024, 16)
    assert specs["blk.0.ssm_norm.weight"] == (128,)
    assert specs["blk.0.ssm_out.weight"] == (2048, 1024)
    assert specs["blk.23.ffn_down.weight"] == (3584, 1024)


def test_tiny_header(tool: Any, tiny_path: Path, tiny_header: Any) -> None:
    fields = tiny_header.fields
    preset = tool.PRESETS["tiny"]
    assert fields["general.architecture"] == b"qwen35"
    assert fields["qwen35.block_count"] == preset.n_layer == 4
    assert fields["qwen35.full_attention_interval"] == 4
    assert fields["qwen35.ssm.inner_size"] == preset.ssm_inner
    assert list(fields["qwen35.rope.dimension_sections"]) == list(preset.rope_sections)
    template = fields["tokenizer.chat_template"].decode()
    assert "<tool_call>" in template and "<function=" in template and "enable_thinking" in template
    assert fields["tokenizer.ggml.pre"] == b"qwen35"
    assert len(fields["tokenizer.ggml.merges"]) > 100_000
    assert tiny_path.stat().st_size < 40_000_000

    expected = {s.name: s for s in tool.tensor_specs(preset)}
    assert set(tiny_header.tensors) == set(expected)
    for name, (ne, ggml_type) in tiny_header.tensors.items():
        assert ne == expected[name].ne, name
        assert ggml_type == (GGML_F32 if expected[name].f32 else GGML_F16), name


def test_tiny_vocab_has_qwen35_ids(tiny_header: Any) -> None:
    fields = tiny_header.fields
    tokens = fields["tokenizer.ggml.tokens"]
    types = fields["tokenizer.ggml.token_type"]
    assert len(tokens) == len(types) == 248_320
    assert len(set(tokens)) == len(tokens)
    ids = {"<|endoftext|>": 248_044, "<|im_start|>": 248_045, "<|im_end|>": 248_046}
    ids |= {"<tool_call>": 248_058, "</tool_call>": 248_059, "<think>": 248_068}
    for text, token_id in ids.items():
        assert tokens[token_id] == text.encode()
    assert types[248_045] == 3  # CONTROL
    assert types[248_058] == types[248_068] == 4  # USER_DEFINED: rendered as text
    assert fields["tokenizer.ggml.eos_token_id"] == 248_046


def _llama_cpp() -> Any:
    if importlib.util.find_spec("llama_cpp") is None:
        missing("llama-cpp-python", 'pip install -e ".[test]"')
    import llama_cpp

    return llama_cpp


@pytest.mark.model
def test_tiny_loads_as_hybrid_and_generates(tiny_path: Path) -> None:
    llama_cpp = _llama_cpp()
    llm = llama_cpp.Llama(model_path=str(tiny_path), n_ctx=512, n_threads=2, verbose=False)
    try:
        assert llama_cpp.llama_model_is_hybrid(llm.model)
        assert "<tool_call>" in llm.metadata["tokenizer.chat_template"]
        assert llm.n_vocab() == 248_320
        assert llm.token_eos() == 248_046
        assert llm.tokenize(b"<tool_call>", add_bos=False, special=True) == [248_058]
        assert llm.tokenize(b"Hello world", add_bos=False) == [9707, 1879]  # real Qwen BPE

        prompt = llm.tokenize(
            b"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", add_bos=False, special=True
        )
        generated: list[int] = []
        for token in llm.generate(prompt, temp=0.0, reset=True):
            generated.append(token)
            if len(generated) == 8:
                break
        assert len(generated) == 8
        last = llama_cpp.llama_get_logits_ith(llm.ctx, -1)  # llm.scores stays 0 w/o logits_all
        logits = np.ctypeslib.as_array(last, shape=(llm.n_vocab(),))
        assert np.isfinite(logits).all()
        assert logits.std() > 0
    finally:
        llm.close()
