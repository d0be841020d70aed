"""GGUF header checks before any load: not GGUF, truncated, unsupported, too big for memory."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.models.gguf_info import GGML_TYPE_SIZES, check_fits, read_gguf_info


def _write(path: Path, arch: str = "qwen35", template: str | None = "{{ messages }}") -> Path:
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name("test-model")
    writer.add_block_count(4)
    writer.add_context_length(4096)
    writer.add_embedding_length(64)
    writer.add_head_count(2)
    writer.add_head_count_kv(1)
    writer.add_key_length(32)
    writer.add_value_length(32)
    writer.add_uint32(f"{arch}.full_attention_interval", 4)
    writer.add_file_type(1)
    if template is not None:
        writer.add_chat_template(template)
    writer.add_tensor("token_embd.weight", np.zeros((16, 64), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_reads_a_complete_file(tmp_path: Path) -> None:
    info = read_gguf_info(_write(tmp_path / "m.gguf"))
    assert info.architecture == "qwen35"
    assert info.name == "test-model"
    assert info.file_type == "F16"
    assert info.tensor_count == 2
    assert info.expected_size == info.file_size
    assert info.chat_template == "{{ messages }}"
    assert info.context_length == 4096


def test_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not exist"):
        read_gguf_info(tmp_path / "nope.gguf")
    with pytest.raises(ModelError, match="is a folder"):
        read_gguf_info(tmp_path)


def test_not_a_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(b"\x00\x01safetensors" * 10)
    with pytest.raises(ModelError, match="not a GGUF model file") as info:
        read_gguf_info(bad)
    assert "Download the GGUF version" in str(info.value)


@pytest.mark.parametrize("keep", [3, 20, 200, -1, -100])
def test_truncated_anywhere_is_detected(tmp_path: Path, keep: int) -> None:
    full = _write(tmp_path / "m.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full[:keep])
    with pytest.raises(ModelError, match=r"truncated|incomplete|not a GGUF") as info:
        read_gguf_info(cut)
    assert "download" in str(info.value).lower() or "GGUF" in str(info.value)


def test_unsupported_and_non_chat_architectures(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="does not support"):
        read_gguf_info(_write(tmp_path / "a.gguf", arch="frobnicator9"))
    with pytest.raises(ModelError, match="not a chat model"):
        read_gguf_info(_write(tmp_path / "b.gguf", arch="bert"))


def test_memory_estimate_and_fit(tmp_path: Path) -> None:
    info = read_gguf_info(_write(tmp_path / "m.gguf"))
    need = info.estimate_memory(4096)
    # one full-attention layer of four: 4096 tokens * 1 layer * 1 kv head * (32 + 32) * 2 bytes
    assert need["kv_cache"] == 4096 * 1 * 1 * 64 * 2
    assert need["total"] == need["weights"] + need["kv_cache"] + need["recurrent_state"]
    with pytest.raises(ModelError, match=r"only 0\.0 GiB of memory is available"):
        check_fits(info, 4096, available=1000)
    assert check_fits(info, 4096, available=10**12)["total"] == need["total"]


def test_type_size_table_matches_ggml() -> None:
    for type_id, (block, nbytes) in GGML_TYPE_SIZES.items():
        try:
            qtype = gguf.GGMLQuantizationType(type_id)
        except ValueError:
            continue
        assert gguf.GGML_QUANT_SIZES[qtype] == (block, nbytes), qtype.name


def _write_with_vocabulary(path: Path, n_tokens: int) -> Path:
    writer = gguf.GGUFWriter(str(path), "qwen35")
    writer.add_name("vocab-model")
    writer.add_block_count(4)
    writer.add_tokenizer_model("gpt2")
    # lengths from 1 to 40 bytes, some multi-byte: the list spans several read chunks
    tokens = [("tok\u00e9" * (i % 10)) + str(i) for i in range(n_tokens)]
    writer.add_token_list(tokens)
    writer.add_token_types([1] * n_tokens)
    writer.add_token_merges([f"{t} {t}" for t in tokens[: n_tokens // 2]])
    writer.add_uint32("tokenizer.ggml.eos_token_id", 7)
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_vocabulary_is_counted_not_kept(tmp_path: Path) -> None:
    info = read_gguf_info(_write_with_vocabulary(tmp_path / "v.gguf", 100_000))
    assert info.metadata["tokenizer.ggml.tokens"] == 100_000
    assert info.metadata["tokenizer.ggml.token_type"] == 100_000
    assert info.metadata["tokenizer.ggml.merges"] == 50_000
    assert info.metadata["tokenizer.ggml.eos_token_id"] == 7
    assert info.metadata["tokenizer.ggml.model"] == "gpt2"
    assert info.tensor_count == 1
    assert info.expected_size == info.file_size


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.5, 0.62, 0.9, 0.97])
def test_truncated_inside_the_vocabulary_is_detected(tmp_path: Path, fraction: float) -> None:
    full = _write_with_vocabulary(tmp_path / "v.gguf", 100_000).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(full[: int(len(full) * fraction)])
    with pytest.raises(ModelError, match=r"truncated|incomplete") as info:
        read_gguf_info(cut)
    assert "download" in str(info.value).lower()


# --- damaged headers: refused before llama.cpp sees them, in true words ----------------------


def _write_with(path: Path, *, layers: int = 4, context: int = 4096) -> Path:
    writer = gguf.GGUFWriter(str(path), "qwen35")
    writer.add_name("damaged-model")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(64)
    writer.add_head_count(2)
    writer.add_file_type(1)
    writer.add_tensor("token_embd.weight", np.zeros((16, 64), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _patch_after(path: Path, marker: bytes, offset: int, data: bytes) -> Path:
    """Overwrite bytes ``offset`` bytes after the end of ``marker`` (a tensor's name)."""
    raw = bytearray(path.read_bytes())
    at = raw.index(marker) + len(marker) + offset
    raw[at : at + len(data)] = data
    path.write_bytes(bytes(raw))
    return path


def damaged_files(folder: Path) -> dict[str, Path]:
    """One file per kind of damage the header check refuses."""
    import struct

    dims = _patch_after(  # output_norm.weight: its dimension count, then its dims
        _write_with(folder / "dims.gguf"), b"output_norm.weight", 0, struct.pack("<I", 2**32 - 1)
    )
    offset = _patch_after(  # its data offset: past the end, as a flipped byte makes it
        _write_with(folder / "offset.gguf"), b"output_norm.weight", 4 + 8 + 4, b"\x00\x00\x10"
    )
    return {
        "no layers": _write_with(folder / "zero.gguf", layers=0),
        "too many layers": _write_with(folder / "many.gguf", layers=513),
        "huge context": _write_with(folder / "ctx.gguf", context=0xFFFFFFFF),
        "huge dimension count": dims,
        "tensor offset": offset,
    }


@pytest.mark.parametrize(
    "kind",
    ["no layers", "too many layers", "huge context", "huge dimension count", "tensor offset"],
)
def test_a_damaged_header_is_refused_as_damaged(tmp_path: Path, kind: str) -> None:
    file = damaged_files(tmp_path)[kind]
    with pytest.raises(ModelError) as info:
        read_gguf_info(file)
    said = str(info.value)
    assert "is damaged" in said, said
    assert "was interrupted" not in said and "is incomplete" not in said
    assert "download it again" in said or "choose another model" in said


def test_the_weights_own_bytes_leave_out_the_header_and_its_vocabulary(tmp_path: Path) -> None:
    plain = read_gguf_info(_write(tmp_path / "m.gguf"))
    # the tensors as written: 16 x 64 halves and 64 floats
    assert plain.tensor_bytes == 16 * 64 * 2 + 64 * 4
    assert plain.estimate_memory(4096)["tensor_data"] == plain.tensor_bytes
    # a vocabulary in the header makes the file larger, not the weights
    writer = gguf.GGUFWriter(str(tmp_path / "v.gguf"), "qwen35")
    writer.add_block_count(4)
    writer.add_token_list([f"token-{i}" for i in range(5000)])
    writer.add_tensor("token_embd.weight", np.zeros((16, 64), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    vocab = read_gguf_info(tmp_path / "v.gguf")
    assert vocab.tensor_bytes == plain.tensor_bytes
    assert vocab.file_size - vocab.tensor_bytes > 5000 * len("token-0000")
    assert vocab.estimate_memory(4096)["weights"] == vocab.file_size  # the fit check: the file
