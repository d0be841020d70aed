"""Read a GGUF file's header without loading it: magic, version, architecture, completeness, RAM."""

from __future__ import annotations

import os
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.models.cpu_layout import TensorSpec

GGUF_MAGIC = b"GGUF"

# Architecture names known to the llama.cpp bundled with llama-cpp-python 0.3.36
# (LLM_ARCH_NAMES in vendor/llama.cpp/src/llama-arch.cpp). Refresh when the pin moves.
LLAMA_CPP_ARCHITECTURES = frozenset(
    """
    llama llama4 deci falcon grok gpt2 gptj gptneox mpt baichuan starcoder refact bloom stablelm
    qwen qwen2 qwen2moe qwen2vl qwen3 qwen3moe qwen3next qwen3vl qwen3vlmoe qwen35 qwen35moe
    qwen4exp phi2 phi3 phimoe plamo plamo2 plamo3 codeshell orion internlm2 minicpm minicpm3 gemma
    gemma2 gemma3 gemma3n gemma4 starcoder2 mamba mamba2 maple jamba falcon-h1 xverse command-r
    cohere2 cohere2moe dbrx olmo olmo2 olmoe muse-glimmer openelm arctic deepseek deepseek2
    deepseek32 deepseek4 chatglm glm4 glm4moe glm-dsa bitnet t5 jais jais2 nemotron nemotron_h
    nemotron_h_moe exaone exaone4 exaone-moe rwkv6 rwkv6qwen2 rwkv7 arwkv7 granite granitemoe
    granitehybrid graniteswitch granite_swa chameleon plm bailingmoe bailingmoe2 bailingmoe3 dots1
    dots3note arcee afmoe laguna ernie4_5 ernie4_5-moe hunyuan-moe hunyuan-dense hunyuan_vl hy_v3
    hy_v4 smollm3 gpt-oss lfm2 lfm2moe dream smallthinker llada llada-moe seed_oss grovemoe apertus
    minimax-01 hrm_text minimax-m2 minimax-m3 cogvlm rnd1 pangu-embedded mistral3 mistral4 mimo2
    step35 spark2_5 maincoder kimi-linear kimi-k3 glm5-next talkie mellum nanbeige
    """.split()  # noqa: SIM905
)
# Names llama.cpp knows that are not chat models (encoders, vision towers, audio codecs).
NON_CHAT_ARCHITECTURES = frozenset(
    """clip bert modern-bert nomic-bert nomic-bert-moe neo-bert jina-bert-v2 jina-bert-v3 eurobert
    gemma-embedding t5encoder wavtokenizer-dec llama-embed deepseek2-ocr paddleocr eagle3 dflash
    gemma4-assistant qwen3tts pockettts""".split()  # noqa: SIM905
)

# ggml tensor type id -> (elements per block, bytes per block)
GGML_TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 40), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
    27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66),
    39: (32, 17), 40: (64, 36), 41: (128, 18),
}  # fmt: skip

FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS",
    23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL", 26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M",
    30: "IQ4_XS", 31: "IQ1_M", 32: "BF16", 36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4_MOE",
}  # fmt: skip

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}  # fmt: skip
_MAX_STRING = 64 * 1024 * 1024
_CHUNK = 1024 * 1024


GGML_MAX_DIMS = 4

_DAMAGED_HINT = (
    "The file is damaged, not just incomplete: download it again from where it came from, or "
    "choose another model (`botpsy model list`)."
)


class _Truncated(Exception):
    pass


class _Damaged(Exception):
    """The header holds a value no valid GGUF file has (not the end of a cut-off download)."""


@dataclass
class GGUFInfo:
    """What the header says about a model file."""

    path: Path
    version: int
    architecture: str
    name: str
    file_type: str
    file_size: int
    expected_size: int
    tensor_count: int
    metadata: dict[str, Any] = field(repr=False, default_factory=dict)
    tensors: tuple[TensorSpec, ...] = field(repr=False, default=())
    """Every tensor's name, ggml type and shape (the CPU layout decision reads them)."""

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    @property
    def context_length(self) -> int | None:
        value = self.metadata.get(f"{self.architecture}.context_length")
        return int(value) if isinstance(value, int) else None

    def arch_int(self, key: str, default: int = 0) -> int:
        value = self.metadata.get(f"{self.architecture}.{key}", default)
        if isinstance(value, list):
            return int(max(value)) if value else default
        return int(value) if isinstance(value, (int, float)) else default

    @property
    def tensor_bytes(self) -> int:
        """The weights' own bytes (every tensor's data), without the header: the file's size
        less its metadata (for a 248k-token vocabulary, about 8 MiB of it); the file's size
        where a tensor's type is one this version does not know."""
        total = 0
        for tensor in self.tensors:
            block, nbytes = GGML_TYPE_SIZES.get(tensor.ggml_type, (0, 0))
            if not block:
                return self.file_size
            count = 1
            for d in tensor.dims:
                count *= d
            total += count // block * nbytes
        return total if self.tensors else self.file_size

    def estimate_memory(self, n_ctx: int) -> dict[str, int]:
        """Bytes needed: weights (the file), KV cache (f16) for n_ctx, recurrent state (f32);
        ``tensor_data``: the part of the weights that is tensors (``tensor_bytes``)."""
        n_layer = self.arch_int("block_count")
        n_head_kv = self.arch_int("attention.head_count_kv", self.arch_int("attention.head_count"))
        n_embd = self.arch_int("embedding_length")
        n_head = max(self.arch_int("attention.head_count", 1), 1)
        k_len = self.arch_int("attention.key_length", n_embd // n_head)
        v_len = self.arch_int("attention.value_length", n_embd // n_head)
        interval = self.arch_int("full_attention_interval", 0)
        attn_layers = n_layer // interval if interval > 0 else n_layer
        kv = n_ctx * attn_layers * n_head_kv * (k_len + v_len) * 2
        recurrent = 0
        inner = self.arch_int("ssm.inner_size")
        if inner and interval > 0:
            linear_layers = n_layer - attn_layers
            state = self.arch_int("ssm.state_size")
            groups = self.arch_int("ssm.group_count", 1)
            conv = max(self.arch_int("ssm.conv_kernel", 4) - 1, 0)
            conv_channels = inner + 2 * groups * state
            per_layer = (conv * conv_channels + inner * state) * 4
            recurrent = linear_layers * per_layer
        return {
            "weights": self.file_size,
            "kv_cache": kv,
            "recurrent_state": recurrent,
            "total": self.file_size + kv + recurrent,
            "tensor_data": self.tensor_bytes,
        }


def _read(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Truncated
    return data


def _string(f: BinaryIO) -> str:
    (n,) = struct.unpack("<Q", _read(f, 8))
    if n > _MAX_STRING:
        raise ValueError(f"string of {n} bytes")
    return _read(f, n).decode("utf-8", errors="replace")


def _skip(f: BinaryIO, n: int, end: int) -> None:
    """Move `n` bytes on, raising _Truncated if that passes the end of the file."""
    target = f.tell() + n
    if target > end:
        raise _Truncated
    f.seek(target)


def _skip_strings(f: BinaryIO, count: int, end: int) -> None:
    """Move past `count` strings without decoding them, reading their lengths in chunks.

    A vocabulary has about 250k strings; decoding them only to drop them costs ~25 MiB of peak
    memory and most of the header's read time.
    """
    base = f.tell()  # file offset of buf[0]
    buf = b""
    pos = 0  # offset in buf of the next string's length
    for _ in range(count):
        if pos + 8 > len(buf):
            base += pos
            f.seek(base)
            buf = f.read(_CHUNK)
            pos = 0
            if len(buf) < 8:
                raise _Truncated
        (n,) = struct.unpack_from("<Q", buf, pos)
        if n > _MAX_STRING:
            raise ValueError(f"string of {n} bytes")
        pos += 8 + n
    f.seek(base)
    _skip(f, pos, end)


def _value(f: BinaryIO, vtype: int, keep: bool, end: int) -> Any:
    if vtype in _SCALARS:
        fmt = _SCALARS[vtype]
        return struct.unpack(fmt, _read(f, struct.calcsize(fmt)))[0]
    if vtype == 8:
        return _string(f)
    if vtype == 9:
        (etype,) = struct.unpack("<I", _read(f, 4))
        (count,) = struct.unpack("<Q", _read(f, 8))
        if count > 1 << 32 or (keep and count > 1 << 20):
            raise _Damaged(f"an array of {count:,} values")
        if keep:
            return [_value(f, etype, keep, end) for _ in range(count)]
        if etype in _SCALARS:
            _skip(f, struct.calcsize(_SCALARS[etype]) * count, end)
        elif etype == 8:
            _skip_strings(f, count, end)
        else:
            for _ in range(count):
                _value(f, etype, keep, end)
        return count
    raise ValueError(f"unknown value type {vtype}")


# Large arrays (vocabularies, merges) are skipped: only their length is kept.
_KEEP_ARRAYS = ("rope.dimension_sections",)


def read_gguf_info(path: str | os.PathLike[str]) -> GGUFInfo:
    """Read and check the header. Raises ModelError naming what is wrong and what to do."""
    file = Path(path).expanduser()
    if not file.exists():
        raise ModelError(
            f"Model file {file} does not exist.",
            "Check the path, or run `botpsy model list` to see installed models.",
        )
    if file.is_dir():
        raise ModelError(f"{file} is a folder, not a model file.", "Give the path of a .gguf file.")
    size = file.stat().st_size
    try:
        with file.open("rb") as f:
            magic = f.read(4)
            if magic != GGUF_MAGIC:
                raise ModelError(
                    f"{file} is not a GGUF model file (it starts with {magic!r}).",
                    "Download the GGUF version of the model (llama.cpp format).",
                )
            (version,) = struct.unpack("<I", _read(f, 4))
            if version not in (2, 3):
                raise ModelError(
                    f"{file} uses GGUF version {version}; versions 2 and 3 are supported.",
                    "Get a file written by a current llama.cpp.",
                )
            n_tensors, n_kv = struct.unpack("<QQ", _read(f, 16))
            # far more than any model has (a few dozen entries, a few thousand tensors)
            if n_kv > 1 << 20 or n_tensors > 1 << 24:
                raise _Damaged(f"it declares {n_kv:,} metadata entries and {n_tensors:,} tensors")
            metadata: dict[str, Any] = {}
            for _ in range(n_kv):
                key = _string(f)
                (vtype,) = struct.unpack("<I", _read(f, 4))
                keep = vtype != 9 or key.endswith(_KEEP_ARRAYS)
                metadata[key] = _value(f, vtype, keep, size)
            alignment = metadata.get("general.alignment", 32)
            if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
                raise _Damaged(f"its alignment is {alignment!r}, not a power of two")
            data_end = 0
            tensors: list[TensorSpec] = []
            running: int | None = 0  # where the next tensor must start (llama.cpp checks it)
            for _ in range(n_tensors):
                name = _string(f)
                (n_dims,) = struct.unpack("<I", _read(f, 4))
                if n_dims > GGML_MAX_DIMS:
                    raise _Damaged(f"tensor {name!r} has {n_dims:,} dimensions (at most 4)")
                dims = struct.unpack(f"<{n_dims}Q", _read(f, 8 * n_dims))
                ttype, offset = struct.unpack("<IQ", _read(f, 12))
                count = 1
                for d in dims:
                    count *= d
                if count >= 2**62:
                    raise _Damaged(f"tensor {name!r} has {count:,} elements")
                if offset % alignment:
                    raise _Damaged(f"tensor {name!r} starts at {offset:,}, not aligned")
                if running is not None and offset != running:
                    raise _Damaged(f"tensor {name!r} starts at {offset:,}, not at {running:,}")
                tensors.append(TensorSpec(name, ttype, tuple(dims)))
                block, nbytes = GGML_TYPE_SIZES.get(ttype, (0, 0))
                if block:
                    if count % block:
                        raise _Damaged(f"tensor {name!r} has {count:,} elements of type {ttype}")
                    end = offset + count // block * nbytes
                    data_end = max(data_end, end)
                    running = (end + alignment - 1) // alignment * alignment
                else:  # a type this version does not know: its size cannot be checked
                    running = None
            header_end = f.tell()
    except _Truncated:
        raise ModelError(
            f"{file} is truncated: its header ends early ({size} bytes on disk).",
            "The download is incomplete; download it again.",
        ) from None
    except _Damaged as exc:
        raise ModelError(
            f"{file} is damaged: its GGUF header is not one llama.cpp can load ({exc}).",
            _DAMAGED_HINT,
        ) from None
    except (ValueError, struct.error, UnicodeDecodeError) as exc:
        raise ModelError(f"{file} has a damaged GGUF header ({exc}).", _DAMAGED_HINT) from exc
    data_start = (header_end + alignment - 1) // alignment * alignment
    expected = data_start + data_end if data_end else header_end
    arch = str(metadata.get("general.architecture", ""))
    info = GGUFInfo(
        path=file,
        version=version,
        architecture=arch,
        name=str(metadata.get("general.name", file.stem)),
        file_type=FILE_TYPES.get(
            int(metadata.get("general.file_type", -1)),
            f"type {metadata.get('general.file_type', '?')}",
        ),
        file_size=size,
        expected_size=expected,
        tensor_count=n_tensors,
        metadata=metadata,
        tensors=tuple(tensors),
    )
    if size < expected:
        raise ModelError(
            f"{file} is incomplete: {size:,} of {expected:,} bytes "
            f"({100 * size / max(expected, 1):.1f}%).",
            "The download was interrupted; download it again.",
        )
    if not arch:
        raise ModelError(f"{file} does not name its architecture.", "Use another GGUF file.")
    _check_hyperparameters(info)
    if arch in NON_CHAT_ARCHITECTURES:
        raise ModelError(
            f"{file} is a {arch} model, not a chat model.",
            "Choose a chat model such as BotPsy-0.8B.",
        )
    if arch not in LLAMA_CPP_ARCHITECTURES:
        raise ModelError(
            f"{file} has architecture {arch!r}, which the bundled llama.cpp does not support.",
            "Choose a model of a supported family (e.g. BotPsy/Qwen3.5), or update botpsy-desktop.",
        )
    return info


MAX_LAYERS = 512
"""llama.cpp's limit on a model's layers (LLAMA_MAX_LAYERS): more aborts the process."""
MAX_CONTEXT = 1 << 24
"""The largest training context accepted (16,777,216 tokens; today's largest models have ~10M)."""


def _check_hyperparameters(info: GGUFInfo) -> None:
    """Refuse numbers llama.cpp would abort on (it kills the process, logging nothing), or that
    no real model has: the layer count, the training context, the embedding and head counts."""
    arch = info.architecture

    def number(key: str) -> int | None:
        value = info.metadata.get(f"{arch}.{key}")
        if isinstance(value, list):  # per-layer values: each must be sane
            return max(value) if value and all(isinstance(v, int) for v in value) else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    problems = []
    layers = number("block_count")
    if layers is not None and not 1 <= layers <= MAX_LAYERS:
        problems.append(f"{layers:,} layers (a model has 1 to {MAX_LAYERS})")
    context = number("context_length")
    if context is not None and not 1 <= context <= MAX_CONTEXT:
        problems.append(f"a training context of {context:,} tokens (1 to {MAX_CONTEXT:,})")
    width = number("embedding_length")
    if width is not None and not 1 <= width <= 1 << 20:
        problems.append(f"an embedding length of {width:,}")
    heads = number("attention.head_count")
    if heads is not None and not 0 <= heads <= 1 << 16:
        problems.append(f"{heads:,} attention heads")
    if problems:
        raise ModelError(
            f"{info.path} is damaged: its header declares {', '.join(problems)}, which "
            "llama.cpp cannot load; it was not loaded.",
            _DAMAGED_HINT,
        )


def available_memory() -> int | None:
    """Bytes of memory available for a new allocation, or None if unknown on this system."""
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/meminfo", encoding="ascii") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return None
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(info: GGUFInfo, n_ctx: int, available: int | None = None) -> dict[str, int]:
    """Raise ModelError if weights + KV + recurrent state will not fit in available memory."""
    need = info.estimate_memory(n_ctx)
    avail = available if available is not None else available_memory()
    if avail is not None and need["total"] > avail:
        gib = 1024**3
        raise ModelError(
            f"{info.path.name} needs about {need['total'] / gib:.1f} GiB with a {n_ctx}-token "
            f"context, but only {avail / gib:.1f} GiB of memory is available.",
            "Close other programs, lower model.n_ctx, or choose a smaller quantization.",
        )
    return need
