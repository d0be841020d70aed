"""Find the Qwen tokenizer shipped in the llama-cpp-python sdist; build a BotPsy-shaped vocab."""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
_SDIST_STEM = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
_VOCAB_MEMBER = f"{_SDIST_STEM}/vendor/llama.cpp/models/ggml-vocab-qwen35.gguf"
_SDIST_CACHE = Path.home() / ".cache" / "botpsy-sdist"
_REPO_ROOT = Path(__file__).resolve().parents[2]

# Qwen3.5 layout: 248,044 BPE tokens, then the added tokens in Qwen3's order (so `<|endoftext|>`
# is 248044, `<|im_end|>` 248046, `<think>` 248068, as the model notes say), padded to 248,320.
BOTPSY_N_VOCAB = 248_320
BOTPSY_N_BPE = 248_044
BOTPSY_ADDED_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
_BOTPSY_VOCAB_NAME = "botpsy-shaped-vocab-v2.gguf"


def cache_dir() -> Path:
    """$BOTPSY_TEST_CACHE, else ~/.cache/botpsy-desktop-tests; refuses a path inside the repo."""
    configured = os.environ.get("BOTPSY_TEST_CACHE")
    path = Path(configured) if configured else Path.home() / ".cache" / "botpsy-desktop-tests"
    path = path.expanduser().resolve()
    if path == _REPO_ROOT or _REPO_ROOT in path.parents:
        raise RuntimeError(f"test cache {path} is inside the repository; point it elsewhere")
    path.mkdir(parents=True, exist_ok=True)
    return path


def qwen35_vocab_path() -> Path:
    """The real Qwen BPE tokenizer `ggml-vocab-qwen35.gguf` from the llama-cpp-python sdist.

    It is the Qwen2-era 151,936-entry table (151,643 BPE tokens, 3 control tokens, padding): it has
    no `<tool_call>`/`<think>` tokens; see `botpsy_vocab_path` for a vocab that has them.
    Looks in the test cache, then in an already extracted or downloaded sdist under
    ~/.cache/botpsy-sdist, and only then downloads the sdist with pip (no build) into the cache.
    """
    target = cache_dir() / "ggml-vocab-qwen35.gguf"
    if target.is_file():
        return target
    extracted = _SDIST_CACHE / _VOCAB_MEMBER
    if extracted.is_file():
        return extracted
    for archive in (_SDIST_CACHE / f"{_SDIST_STEM}.tar.gz", cache_dir() / f"{_SDIST_STEM}.tar.gz"):
        if archive.is_file():
            _extract_member(archive, target)
            return target
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
            "-d",
            str(cache_dir()),
        ],
        check=True,
        capture_output=True,
    )
    _extract_member(cache_dir() / f"{_SDIST_STEM}.tar.gz", target)
    return target


def _extract_member(archive: Path, target: Path) -> None:
    with tarfile.open(archive, "r:gz") as tar:
        source = tar.extractfile(_VOCAB_MEMBER)
        if source is None:
            raise FileNotFoundError(f"{_VOCAB_MEMBER} not in {archive}")
        with source, _atomic_path(target) as tmp:
            tmp.write_bytes(source.read())


@contextlib.contextmanager
def _atomic_path(target: Path) -> Iterator[Path]:
    """Yield a temporary path next to `target`; rename it onto `target` only on success."""
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=target.name, suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        tmp.chmod(0o644)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


# GGUF metadata value types (the file format's numbering) and token types (llama_token_type).
_GGUF_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
_GGUF_STRING, _GGUF_ARRAY, _GGUF_UINT32, _GGUF_INT32, _GGUF_BOOL = 8, 9, 4, 5, 7
_NORMAL, _CONTROL, _USER_DEFINED, _UNUSED = 1, 3, 4, 5
_GGUF_ALIGNMENT = 32


def _read_gguf_metadata(path: Path) -> dict[str, tuple[int, Any]]:
    """Key -> (value type, value) of a tensor-free GGUF; arrays are (element type, list)."""
    data = path.read_bytes()
    if data[:4] != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    _version, _n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    pos = 24

    def read(kind: int) -> Any:
        nonlocal pos
        if kind == _GGUF_STRING:
            (size,) = struct.unpack_from("<Q", data, pos)
            pos += 8 + size
            return data[pos - size : pos].decode("utf-8")
        if kind == _GGUF_ARRAY:
            sub, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            return sub, [read(sub) for _ in range(count)]
        fmt = "<" + _GGUF_SCALARS[kind]
        (value,) = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return value

    metadata: dict[str, tuple[int, Any]] = {}
    for _ in range(n_kv):
        key = read(_GGUF_STRING)
        (kind,) = struct.unpack_from("<I", data, pos)
        pos += 4
        metadata[key] = (kind, read(kind))
    return metadata


def _write_gguf_metadata(path: Path, metadata: dict[str, tuple[int, Any]]) -> None:
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, 0, len(metadata)))

    def write(kind: int, value: Any) -> None:
        if kind == _GGUF_STRING:
            raw = value.encode("utf-8")
            out.extend(struct.pack("<Q", len(raw)) + raw)
        elif kind == _GGUF_ARRAY:
            sub, items = value
            out.extend(struct.pack("<IQ", sub, len(items)))
            for item in items:
                write(sub, item)
        else:
            out.extend(struct.pack("<" + _GGUF_SCALARS[kind], value))

    for key, (kind, value) in metadata.items():
        write(_GGUF_STRING, key)
        out.extend(struct.pack("<I", kind))
        write(kind, value)
    out.extend(b"\0" * (-len(out) % _GGUF_ALIGNMENT))
    path.write_bytes(bytes(out))


def botpsy_vocab_path() -> Path:
    """A vocab-only GGUF shaped like BotPsy's: 248,320 entries, Qwen3.5 added tokens at their ids.

    Ids 0-151642 and the merges are the real Qwen BPE tokenizer (so text tokenizes as Qwen does);
    151643-248043 are synthetic NORMAL tokens (concatenations of two real tokens, never produced by
    the merges) that stand in for the newer Qwen3.5 BPE entries, so whole-vocabulary costs are real;
    248044-248069 are the added tokens (`<|...|>` ones CONTROL, `<tool_call>`, `<think>` and their
    closers USER_DEFINED, as llama.cpp's converter types them); the rest is UNUSED padding.
    Built once (about a second) and cached.
    """
    target = cache_dir() / _BOTPSY_VOCAB_NAME
    if target.is_file():
        return target

    metadata = _read_gguf_metadata(qwen35_vocab_path())
    tokens: list[str] = metadata["tokenizer.ggml.tokens"][1][1]
    types: list[int] = metadata["tokenizer.ggml.token_type"][1][1]
    n_real = tokens.index("<|endoftext|>")
    names = tokens[:n_real]
    kinds = types[:n_real]
    seen = set(names)
    i = 0
    while len(names) < BOTPSY_N_BPE:
        candidate = names[(i * 7919) % n_real] + names[(i * 104_729 + 13) % n_real]
        i += 1
        if candidate not in seen:
            seen.add(candidate)
            names.append(candidate)
            kinds.append(_NORMAL)
    for text in BOTPSY_ADDED_TOKENS:
        names.append(text)
        kinds.append(_CONTROL if text.startswith("<|") and text.endswith("|>") else _USER_DEFINED)
    while len(names) < BOTPSY_N_VOCAB:
        names.append(f"[PAD{len(names)}]")
        kinds.append(_UNUSED)

    endoftext = BOTPSY_N_BPE + BOTPSY_ADDED_TOKENS.index("<|endoftext|>")
    metadata["general.name"] = (_GGUF_STRING, "botpsy-shaped-vocab")
    metadata["tokenizer.ggml.tokens"] = (_GGUF_ARRAY, (_GGUF_STRING, names))
    metadata["tokenizer.ggml.token_type"] = (_GGUF_ARRAY, (_GGUF_INT32, kinds))
    metadata["tokenizer.ggml.eos_token_id"] = (
        _GGUF_UINT32,
        BOTPSY_N_BPE + BOTPSY_ADDED_TOKENS.index("<|im_end|>"),
    )
    metadata["tokenizer.ggml.padding_token_id"] = (_GGUF_UINT32, endoftext)
    metadata["tokenizer.ggml.bos_token_id"] = (_GGUF_UINT32, endoftext)
    metadata["tokenizer.ggml.add_bos_token"] = (_GGUF_BOOL, False)
    with _atomic_path(target) as tmp:
        _write_gguf_metadata(tmp, metadata)
    return target
