"""Write random-weight GGUF models of llama.cpp arch ``qwen35``: a tiny fixture or BotPsy shapes."""

# The files use the real Qwen byte-level BPE vocabulary and the Qwen3.5 chat template shipped in
# the llama-cpp-python sdist, so tokenization, templating and every hybrid-memory code path are
# the real ones; only the weights are noise. Decode/prefill cost does not depend on weight
# values, so the `botpsy` preset (exact Qwen3.5-0.8B shapes, quantized like the release)
# measures BotPsy-class speed and memory without the real weights.

from __future__ import annotations

import argparse
import contextlib
import mmap
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

LLAMA_CPP_FALLBACK_VERSION = "0.3.36"
VOCAB_MEMBER = "vendor/llama.cpp/models/ggml-vocab-qwen35.gguf"
TEMPLATE_MEMBER = "vendor/llama.cpp/models/templates/Qwen3.5-4B.jinja"
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "botpsy-desktop-tools"

ARCH = "qwen35"
# Qwen3.5's vocabulary: 248,044 BPE tokens, then the added tokens in the Qwen3 layout
# (<|endoftext|> 248044, <|im_start|> 248045, <|im_end|> 248046, ..., <think> 248068), padded
# to 248,320 rows. The sdist vocab is the older Qwen table (151,643 BPE tokens, 3 specials, no
# <tool_call>/<think>), so: ids 0-151642 and the merges are its real BPE tokens (text tokenizes
# as Qwen does); 151643-248043 are synthetic NORMAL tokens (two real tokens glued together, never
# produced by the merges) standing in for Qwen3.5's newer BPE entries, so whole-vocabulary work
# (grammar masks, detokenizing sampled ids) costs what it does for the real model; the added
# tokens sit at their real Qwen3.5 ids; the rest is UNUSED padding. botpsy_vocab writes the
# table once as a vocab-only GGUF; the models and the tests (tests/helpers/vocab.py) read it.
QWEN35_N_VOCAB = 248_320
QWEN35_FIRST_SPECIAL_ID = 248_044
# (text, is_control). Non-control added tokens are USER_DEFINED, as llama.cpp's converter types
# Qwen's added tokens that are not marked special: they are always parsed as one token and are
# rendered as text when detokenized, so the model's "<tool_call>" output stays visible.
QWEN35_SPECIAL_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", True),
    ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True),
    ("<|fim_pad|>", True),
    ("<|repo_name|>", True),
    ("<|file_sep|>", True),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)
# gguf.TokenType values (kept literal so the table above needs no gguf import).
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5
BOTPSY_VOCAB_FORMAT = 2  # part of the cached vocab's name: bump on any change to the table

QUANT_FTYPES: dict[str, int] = {"f16": 1, "q8_0": 7, "q4_k_m": 15}  # llama_ftype values
WEIGHT_STD = 0.02


@dataclass(frozen=True)
class Preset:
    """Shapes of one synthetic ``qwen35`` model (names follow llama.cpp's GGUF keys)."""

    name: str
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int  # attention.key_length == attention.value_length
    rope_dim: int  # rope.dimension_count (partial rotary)
    rope_sections: tuple[int, int, int, int]
    ssm_conv_kernel: int
    ssm_head_dim: int  # ssm.state_size: linear-attention key and value head dim
    ssm_k_heads: int  # ssm.group_count
    ssm_v_heads: int  # ssm.time_step_rank
    full_attention_interval: int
    context_length: int
    default_quant: str
    n_vocab: int = QWEN35_N_VOCAB
    rope_freq_base: float = 1e7
    rms_eps: float = 1e-6

    @property
    def ssm_inner(self) -> int:
        """ssm.inner_size: value heads times value head dim."""
        return self.ssm_v_heads * self.ssm_head_dim

    @property
    def ssm_conv_channels(self) -> int:
        """Channels of attn_qkv / ssm_conv1d: q and k (group heads) plus v (value heads)."""
        return 2 * self.ssm_k_heads * self.ssm_head_dim + self.ssm_inner

    def is_recurrent(self, layer: int) -> bool:
        """Whether a layer is gated-DeltaNet (llama.cpp: (il + 1) % interval != 0)."""
        return (layer + 1) % self.full_attention_interval != 0

    def validate(self) -> None:
        """Raise ValueError unless the shape constraints llama.cpp's qwen35 code relies on hold."""
        problems: list[str] = []
        if self.n_head % self.n_head_kv:
            problems.append("n_head must be a multiple of n_head_kv")
        if self.rope_dim % 2 or not 0 < self.rope_dim <= self.head_dim:
            problems.append("rope_dim must be even and within head_dim")
        if 2 * sum(self.rope_sections) != self.rope_dim:
            problems.append("rope sections must cover rope_dim / 2 pairs")
        if self.ssm_v_heads % self.ssm_k_heads:
            problems.append("ssm value heads must be a multiple of the key heads (group count)")
        if self.n_layer < self.full_attention_interval:
            problems.append("need at least one full-attention layer")
        if self.ssm_conv_kernel < 2:
            problems.append("ssm conv kernel must be >= 2")
        if self.n_vocab < QWEN35_FIRST_SPECIAL_ID + len(QWEN35_SPECIAL_TOKENS):
            problems.append("n_vocab too small for the Qwen3.5 special token ids")
        if problems:
            raise ValueError(f"preset {self.name!r}: " + "; ".join(problems))


PRESETS: dict[str, Preset] = {
    # Same hybrid layout as Qwen3.5 (3 DeltaNet layers then 1 gated full-attention layer), real
    # vocab and template, minimal widths: loads and generates in well under a second.
    "tiny": Preset(
        name="tiny",
        n_embd=32,
        n_layer=4,
        n_ff=128,
        n_head=4,
        n_head_kv=1,
        head_dim=32,
        rope_dim=8,
        rope_sections=(2, 1, 1, 0),
        ssm_conv_kernel=4,
        ssm_head_dim=16,
        ssm_k_heads=2,
        ssm_v_heads=2,
        full_attention_interval=4,
        context_length=4096,
        default_quant="f16",
    ),
    # Exact Qwen3.5-0.8B text shapes (see docs/botpsy-model.md); the MTP block is left out, as
    # llama.cpp's main pass never runs it.
    "botpsy": Preset(
        name="botpsy",
        n_embd=1024,
        n_layer=24,
        n_ff=3584,
        n_head=8,
        n_head_kv=2,
        head_dim=256,
        rope_dim=64,
        rope_sections=(11, 11, 10, 0),
        ssm_conv_kernel=4,
        ssm_head_dim=128,
        ssm_k_heads=16,
        ssm_v_heads=16,
        full_attention_interval=4,
        context_length=262_144,
        default_quant="q4_k_m",
    ),
}
# the tiny model trained for a 32k context: a profile at the app's default context (16k) with
# every tool in the prompt (about 8k tokens), as the app runs BotPsy
PRESETS["tiny-long"] = replace(PRESETS["tiny"], name="tiny-long", context_length=32768)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor to write: GGUF name, ggml shape (ne0 first), storage type and init."""

    name: str
    ne: tuple[int, ...]
    f32: bool  # F32 (1-D tensors and ssm_conv1d, as llama.cpp requires) else F16
    init: str  # "normal" (std WEIGHT_STD), "ones", "ssm_a", "conv"


def tensor_specs(preset: Preset) -> list[TensorSpec]:
    """The tensors llama.cpp's qwen35 loader requires for ``preset`` (tied output, no MTP)."""
    p = preset
    specs = [
        TensorSpec("token_embd.weight", (p.n_embd, p.n_vocab), False, "normal"),
        TensorSpec("output_norm.weight", (p.n_embd,), True, "ones"),
    ]
    for il in range(p.n_layer):
        b = f"blk.{il}."
        specs += [
            TensorSpec(b + "attn_norm.weight", (p.n_embd,), True, "ones"),
            TensorSpec(b + "post_attention_norm.weight", (p.n_embd,), True, "ones"),
        ]
        if p.is_recurrent(il):
            specs += [
                TensorSpec(b + "attn_qkv.weight", (p.n_embd, p.ssm_conv_channels), False, "normal"),
                TensorSpec(b + "attn_gate.weight", (p.n_embd, p.ssm_inner), False, "normal"),
                TensorSpec(
                    b + "ssm_conv1d.weight", (p.ssm_conv_kernel, p.ssm_conv_channels), True, "conv"
                ),
                TensorSpec(b + "ssm_dt.bias", (p.ssm_v_heads,), True, "ones"),
                TensorSpec(b + "ssm_a", (p.ssm_v_heads,), True, "ssm_a"),
                TensorSpec(b + "ssm_beta.weight", (p.n_embd, p.ssm_v_heads), False, "normal"),
                TensorSpec(b + "ssm_alpha.weight", (p.n_embd, p.ssm_v_heads), False, "normal"),
                TensorSpec(b + "ssm_norm.weight", (p.ssm_head_dim,), True, "ones"),
                TensorSpec(b + "ssm_out.weight", (p.ssm_inner, p.n_embd), False, "normal"),
            ]
        else:
            q_out = p.head_dim * p.n_head
            kv_out = p.head_dim * p.n_head_kv
            specs += [
                TensorSpec(b + "attn_q.weight", (p.n_embd, 2 * q_out), False, "normal"),  # q+gate
                TensorSpec(b + "attn_k.weight", (p.n_embd, kv_out), False, "normal"),
                TensorSpec(b + "attn_v.weight", (p.n_embd, kv_out), False, "normal"),
                TensorSpec(b + "attn_output.weight", (q_out, p.n_embd), False, "normal"),
                TensorSpec(b + "attn_q_norm.weight", (p.head_dim,), True, "ones"),
                TensorSpec(b + "attn_k_norm.weight", (p.head_dim,), True, "ones"),
            ]
        specs += [
            TensorSpec(b + "ffn_gate.weight", (p.n_embd, p.n_ff), False, "normal"),
            TensorSpec(b + "ffn_up.weight", (p.n_embd, p.n_ff), False, "normal"),
            TensorSpec(b + "ffn_down.weight", (p.n_ff, p.n_embd), False, "normal"),
        ]
    return specs


def _make_tensor(spec: TensorSpec, seed: int) -> np.ndarray:
    """Deterministic values for one tensor (numpy shape is the ggml shape reversed)."""
    rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
    shape = tuple(reversed(spec.ne))
    if spec.init == "ones":
        data = 1.0 + 0.01 * rng.standard_normal(shape, dtype=np.float32)
    elif spec.init == "ssm_a":  # -exp(A_log), A in [1, 16) as in the HF initialisation
        data = -rng.uniform(1.0, 16.0, shape).astype(np.float32)
    elif spec.init == "conv":
        data = 0.1 * rng.standard_normal(shape, dtype=np.float32)
    else:
        data = rng.standard_normal(shape, dtype=np.float32)
        data *= WEIGHT_STD
    return data.astype(np.float32 if spec.f32 else np.float16, copy=False)


def installed_llama_cpp_version() -> str:
    """Version of the installed llama-cpp-python (without loading it), else the pinned one."""
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return LLAMA_CPP_FALLBACK_VERSION


def pip_download(requirement: str, dest: Path | str, *, sdist: bool) -> None:
    """``pip download --no-deps`` one distribution into dest: its sdist (never built) or a wheel."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary" if sdist else "--only-binary",
            ":all:",
            requirement,
            "-d",
            str(dest),
        ],
        check=True,
    )


@contextlib.contextmanager
def staging_path(target: Path) -> Iterator[Path]:
    """A private temporary file next to target, moved onto it (atomically) on success.

    Concurrent builders each stage their own file; os.replace makes the last one win whole, and
    a reader never sees a partial file.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    staged = Path(name)
    try:
        yield staged
        staged.chmod(0o644)  # mkstemp files are private; these are ordinary files
        try:
            os.replace(staged, target)
        except PermissionError:  # Windows: target already there and open in another process
            if not target.is_file():
                raise
    finally:
        staged.unlink(missing_ok=True)


def _sdist_root(cache_dir: Path | str) -> Path:
    """Where the assets taken from the installed version's sdist are kept under cache_dir."""
    return Path(cache_dir).expanduser() / f"llama_cpp_python-{installed_llama_cpp_version()}"


def _find_sdist(cache_dir: Path, version: str) -> Path | None:
    for name in (f"llama_cpp_python-{version}.tar.gz", f"llama-cpp-python-{version}.tar.gz"):
        if (cache_dir / name).is_file():
            return cache_dir / name
    return None


def _download_sdist(cache_dir: Path, version: str) -> Path:
    """pip-download the sdist into cache_dir (via a private temp dir, so racing is harmless)."""
    with tempfile.TemporaryDirectory(dir=cache_dir, prefix=".download-") as tmp:
        pip_download(f"llama-cpp-python=={version}", tmp, sdist=True)
        found = _find_sdist(Path(tmp), version)
        if found is None:
            raise RuntimeError(f"pip download produced no llama-cpp-python {version} sdist")
        target = cache_dir / found.name
        os.replace(found, target)
    return target


def _extract_member(archive: tarfile.TarFile, suffix: str, target: Path) -> None:
    """Copy the one archive member whose path is ``<sdist root>/<suffix>`` to target, atomically."""
    for member in archive.getmembers():
        root, _, rest = member.name.partition("/")
        if rest == suffix and member.isfile() and root:
            source = archive.extractfile(member)
            if source is None:
                break
            with source, staging_path(target) as staged, staged.open("wb") as out:
                while chunk := source.read(1 << 20):
                    out.write(chunk)
            return
    raise RuntimeError(f"{suffix} not found in {archive.name!r}")


def ensure_sdist_assets(cache_dir: Path | str) -> tuple[Path, Path]:
    """Return (vocab GGUF, Qwen3.5 template) from the llama-cpp-python sdist, fetching it if needed.

    Files are kept at their sdist paths under ``cache_dir/llama_cpp_python-<version>/``; the
    sdist itself comes from PyPI with ``pip download`` when neither it nor the files are cached.
    """
    cache_dir = Path(cache_dir).expanduser()
    root = _sdist_root(cache_dir)
    vocab, template = root / VOCAB_MEMBER, root / TEMPLATE_MEMBER
    if vocab.is_file() and template.is_file():
        return vocab, template
    cache_dir.mkdir(parents=True, exist_ok=True)
    version = installed_llama_cpp_version()
    sdist = _find_sdist(cache_dir, version) or _download_sdist(cache_dir, version)
    with tarfile.open(sdist, "r:gz") as archive:
        _extract_member(archive, VOCAB_MEMBER, vocab)
        _extract_member(archive, TEMPLATE_MEMBER, template)
    return vocab, template


_GGUF_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
GGUF_UINT32, GGUF_INT32, GGUF_BOOL, GGUF_STRING, GGUF_ARRAY = 4, 5, 7, 8, 9
_GGUF_ALIGNMENT = 32


@dataclass(frozen=True)
class GGUFHeader:
    """What a GGUF file declares: key/values and tensor infos (name -> (ggml shape, ggml type)).

    types: each key's GGUF value type, as (type,) or, for arrays, (GGUF_ARRAY, item type).
    """

    fields: dict[str, Any]
    tensors: dict[str, tuple[tuple[int, ...], int]]
    types: dict[str, tuple[int, ...]]


def read_gguf_header(path: Path | str) -> GGUFHeader:
    """Parse a GGUF header: strings as bytes, numeric arrays as numpy arrays, no tensor data.

    A small reader of its own: gguf.GGUFReader takes 10-20 s on a Qwen-sized vocabulary, and
    botpsy_desktop.llm.models.gguf_info skips the token arrays this module needs.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        magic, _version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
        if magic != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        pos = 24

        def value(kind: int) -> Any:
            nonlocal pos
            if kind == GGUF_STRING:
                (length,) = struct.unpack_from("<Q", data, pos)
                pos += 8 + length
                return data[pos - length : pos]
            if kind == GGUF_ARRAY:
                item_kind, count = struct.unpack_from("<IQ", data, pos)
                pos += 12
                if item_kind in (GGUF_STRING, GGUF_ARRAY):
                    return [value(item_kind) for _ in range(count)]
                dtype = np.dtype(_GGUF_SCALARS[item_kind])
                items = np.frombuffer(data, dtype, count, pos).copy()
                pos += count * dtype.itemsize
                return items
            fmt = _GGUF_SCALARS[kind]
            (item,) = struct.unpack_from(fmt, data, pos)
            pos += struct.calcsize(fmt)
            return item

        fields: dict[str, Any] = {}
        types: dict[str, tuple[int, ...]] = {}
        for _ in range(n_kv):
            key = value(GGUF_STRING).decode()
            (kind,) = struct.unpack_from("<I", data, pos)
            pos += 4
            types[key] = (kind,)
            if kind == GGUF_ARRAY:  # and the item type that follows
                types[key] += struct.unpack_from("<I", data, pos)
            fields[key] = value(kind)
        tensors: dict[str, tuple[tuple[int, ...], int]] = {}
        for _ in range(n_tensors):
            name = value(GGUF_STRING).decode()
            (n_dims,) = struct.unpack_from("<I", data, pos)
            ne = struct.unpack_from(f"<{n_dims}Q", data, pos + 4)
            (ggml_type,) = struct.unpack_from("<I", data, pos + 4 + 8 * n_dims)
            pos += 4 + 8 * n_dims + 4 + 8  # dims, type, data offset
            tensors[name] = (tuple(ne), ggml_type)
    return GGUFHeader(fields, tensors, types)


def write_gguf_metadata(
    path: Path, fields: dict[str, Any], types: dict[str, tuple[int, ...]]
) -> None:
    """Write a tensor-free (vocab-only) GGUF v3 of fields, typed as in GGUFHeader.types."""
    out = bytearray(struct.pack("<4sIQQ", b"GGUF", 3, 0, len(fields)))

    def put(kind: int, item: Any) -> None:
        if kind == GGUF_STRING:
            raw = item.encode() if isinstance(item, str) else bytes(item)
            out.extend(struct.pack("<Q", len(raw)) + raw)
        else:
            out.extend(struct.pack(_GGUF_SCALARS[kind], item))

    for key, item in fields.items():
        kind, *item_kind = types[key]
        put(GGUF_STRING, key)
        out.extend(struct.pack("<I", kind))
        if kind != GGUF_ARRAY:
            put(kind, item)
        elif item_kind == [GGUF_STRING]:
            out.extend(struct.pack("<IQ", GGUF_STRING, len(item)))
            for text in item:
                put(GGUF_STRING, text)
        elif item_kind[0] in _GGUF_SCALARS:
            out.extend(struct.pack("<IQ", item_kind[0], len(item)))
            out.extend(np.asarray(item, _GGUF_SCALARS[item_kind[0]]).tobytes())
        else:
            raise ValueError(f"{key}: nested GGUF arrays are not supported")
    out.extend(b"\0" * (-len(out) % _GGUF_ALIGNMENT))
    path.write_bytes(bytes(out))


def _botpsy_token_table(source: Path, fields: dict[str, Any]) -> tuple[list[bytes], list[int]]:
    """Tokens and token types of the BotPsy-shaped vocab (see QWEN35_N_VOCAB) from the sdist's."""
    model = fields["tokenizer.ggml.model"].decode()
    if model != "gpt2":
        raise ValueError(f"{source}: expected a gpt2 (BPE) tokenizer, got {model!r}")
    source_tokens: list[bytes] = fields["tokenizer.ggml.tokens"]
    source_types = fields["tokenizer.ggml.token_type"].tolist()
    n_bpe = 0
    while n_bpe < len(source_tokens) and source_types[n_bpe] == TOKEN_NORMAL:
        n_bpe += 1
    if n_bpe > QWEN35_FIRST_SPECIAL_ID or TOKEN_NORMAL in source_types[n_bpe:]:
        raise ValueError(f"{source}: unexpected layout of normal tokens")

    tokens = source_tokens[:n_bpe]
    seen = set(tokens)
    i = 0
    while len(tokens) < QWEN35_FIRST_SPECIAL_ID:  # stand-ins for Qwen3.5's newer BPE tokens
        candidate = tokens[(i * 7919) % n_bpe] + tokens[(i * 104_729 + 13) % n_bpe]
        i += 1
        if candidate not in seen:
            seen.add(candidate)
            tokens.append(candidate)
    types = [TOKEN_NORMAL] * QWEN35_FIRST_SPECIAL_ID
    for text, control in QWEN35_SPECIAL_TOKENS:
        tokens.append(text.encode())
        types.append(TOKEN_CONTROL if control else TOKEN_USER_DEFINED)
    tokens += [b"[PAD%d]" % i for i in range(len(tokens), QWEN35_N_VOCAB)]
    types += [TOKEN_UNUSED] * (QWEN35_N_VOCAB - len(types))
    if len(set(tokens)) != QWEN35_N_VOCAB:
        raise ValueError("token strings are not unique")
    return tokens, types


def botpsy_vocab(cache_dir: Path | str) -> Path:
    """The vocab-only GGUF shaped like BotPsy's (see QWEN35_N_VOCAB), built once and cached.

    Everything but the token table, the special ids and the name (merges, pre-tokenizer, the
    sdist vocab's own chat template) is the sdist vocab's. Kept beside the sdist assets that
    ensure_sdist_assets keeps in cache_dir; build_model takes its tokenizer from this file.
    """
    target = _sdist_root(cache_dir) / f"botpsy-shaped-vocab-v{BOTPSY_VOCAB_FORMAT}.gguf"
    if target.is_file():
        return target
    source, _ = ensure_sdist_assets(cache_dir)
    header = read_gguf_header(source)
    fields, types = header.fields, header.types
    tokens, token_types = _botpsy_token_table(source, fields)
    ids = {text: QWEN35_FIRST_SPECIAL_ID + i for i, (text, _) in enumerate(QWEN35_SPECIAL_TOKENS)}
    updates: dict[str, tuple[tuple[int, ...], Any]] = {
        "general.name": ((GGUF_STRING,), b"botpsy-shaped-vocab"),
        "tokenizer.ggml.tokens": ((GGUF_ARRAY, GGUF_STRING), tokens),
        "tokenizer.ggml.token_type": ((GGUF_ARRAY, GGUF_INT32), token_types),
        "tokenizer.ggml.eos_token_id": ((GGUF_UINT32,), ids["<|im_end|>"]),
        "tokenizer.ggml.padding_token_id": ((GGUF_UINT32,), ids["<|endoftext|>"]),
        "tokenizer.ggml.bos_token_id": ((GGUF_UINT32,), ids["<|endoftext|>"]),
        "tokenizer.ggml.add_bos_token": ((GGUF_BOOL,), False),
    }
    for key, (kind, item) in updates.items():
        types[key], fields[key] = kind, item
    with staging_path(target) as staged:
        write_gguf_metadata(staged, fields, types)
    return target


@dataclass(frozen=True)
class Vocab:
    """Tokenizer arrays ready for the GGUF writer."""

    tokens: list[bytes]
    token_types: list[int]
    merges: list[bytes]
    pre: str
    bos_id: int
    eos_id: int
    pad_id: int


def load_vocab(vocab_path: Path) -> Vocab:
    """The tokenizer of a vocab GGUF (as botpsy_vocab writes) for the model writer."""
    fields = read_gguf_header(vocab_path).fields
    return Vocab(
        tokens=fields["tokenizer.ggml.tokens"],
        token_types=fields["tokenizer.ggml.token_type"].tolist(),
        merges=fields["tokenizer.ggml.merges"],
        pre=fields["tokenizer.ggml.pre"].decode(),
        bos_id=fields["tokenizer.ggml.bos_token_id"],
        eos_id=fields["tokenizer.ggml.eos_token_id"],
        pad_id=fields["tokenizer.ggml.padding_token_id"],
    )


def _write_f16_gguf(preset: Preset, vocab: Vocab, template: str, out_path: Path, seed: int) -> None:
    """Stream a GGUF with F16 matrices (F32 where llama.cpp needs it) to out_path."""
    import gguf

    writer = gguf.GGUFWriter(out_path, ARCH)
    p = preset
    writer.add_name(f"botpsy-synthetic-{p.name}")
    writer.add_description(
        "Random weights with Qwen3.5 (qwen35) shapes for tests and benchmarks; not a real model."
    )
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_context_length(p.context_length)
    writer.add_embedding_length(p.n_embd)
    writer.add_block_count(p.n_layer)
    writer.add_feed_forward_length(p.n_ff)
    writer.add_head_count(p.n_head)
    writer.add_head_count_kv(p.n_head_kv)
    writer.add_key_length(p.head_dim)
    writer.add_value_length(p.head_dim)
    writer.add_layer_norm_rms_eps(p.rms_eps)
    writer.add_rope_freq_base(p.rope_freq_base)
    writer.add_rope_dimension_count(p.rope_dim)
    writer.add_rope_dimension_sections(list(p.rope_sections))
    writer.add_ssm_conv_kernel(p.ssm_conv_kernel)
    writer.add_ssm_inner_size(p.ssm_inner)
    writer.add_ssm_state_size(p.ssm_head_dim)
    writer.add_ssm_time_step_rank(p.ssm_v_heads)
    writer.add_ssm_group_count(p.ssm_k_heads)
    writer.add_full_attention_interval(p.full_attention_interval)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(vocab.pre)
    writer.add_token_list(vocab.tokens)
    writer.add_token_types(vocab.token_types)
    writer.add_token_merges(vocab.merges)
    writer.add_bos_token_id(vocab.bos_id)
    writer.add_eos_token_id(vocab.eos_id)
    writer.add_pad_token_id(vocab.pad_id)
    writer.add_add_bos_token(False)
    writer.add_chat_template(template)

    specs = tensor_specs(p)
    for spec in specs:
        dtype = np.dtype(np.float32 if spec.f32 else np.float16)
        shape = tuple(reversed(spec.ne))
        writer.add_tensor_info(spec.name, shape, dtype, int(np.prod(shape)) * dtype.itemsize)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for spec in specs:  # one tensor in memory at a time (token_embd is the largest)
            writer.write_tensor_data(_make_tensor(spec, seed))
    finally:
        writer.close()


def _quantize(src: Path, dst: Path, ftype: int) -> None:
    import llama_cpp

    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = 0  # llama.cpp picks the hardware concurrency
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed with code {rc}")


def build_model(
    preset: str,
    out_path: Path | str,
    quant: str | None = None,
    cache_dir: Path | str | None = None,
    seed: int = 0,
) -> Path:
    """Write a synthetic qwen35 GGUF for ``preset`` to out_path (atomically) and return the path.

    quant: "f16", "q8_0" or "q4_k_m" (default: the preset's). Quantized outputs are written as
    F16 first, then converted with ``llama_cpp.llama_model_quantize``.
    """
    spec = PRESETS[preset]
    spec.validate()
    quant = quant or spec.default_quant
    if quant not in QUANT_FTYPES:
        raise ValueError(f"unknown quant {quant!r}; choose from {sorted(QUANT_FTYPES)}")
    out_path = Path(out_path).expanduser().resolve()
    cache = Path(DEFAULT_CACHE_DIR if cache_dir is None else cache_dir)
    vocab = load_vocab(botpsy_vocab(cache))
    if len(vocab.tokens) != spec.n_vocab:
        raise ValueError(f"preset {preset!r}: n_vocab {spec.n_vocab} != {len(vocab.tokens)}")
    _, template_path = ensure_sdist_assets(cache)
    template = template_path.read_text(encoding="utf-8")

    with staging_path(out_path) as staged:
        if quant == "f16":
            _write_f16_gguf(spec, vocab, template, staged, seed)
        else:
            with tempfile.TemporaryDirectory(dir=out_path.parent, prefix=".f16-") as tmp:
                f16_path = Path(tmp) / "f16.gguf"
                _write_f16_gguf(spec, vocab, template, f16_path, seed)
                _quantize(f16_path, staged, QUANT_FTYPES[quant])
    return out_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", choices=sorted(PRESETS), required=True)
    parser.add_argument(
        "--quant",
        choices=sorted(QUANT_FTYPES),
        default=None,
        help="weight type (default: f16 for tiny, q4_k_m for botpsy)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output file (default: ./botpsy-synthetic-<preset>-<quant>.gguf)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE_DIR,
        help=f"cache for the llama-cpp-python sdist assets ({DEFAULT_CACHE_DIR})",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    quant = args.quant or PRESETS[args.preset].default_quant
    out = args.out or Path(f"botpsy-synthetic-{args.preset}-{quant}.gguf")
    started = time.perf_counter()
    path = build_model(args.preset, out, quant, args.cache_dir, args.seed)
    size = path.stat().st_size
    print(f"{path}\t{size} bytes ({size / 2**20:.1f} MiB)")
    print(f"built in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
