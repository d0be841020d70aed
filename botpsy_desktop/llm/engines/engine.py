"""The llama.cpp backend: load a GGUF safely, render with its own template, stream one turn."""

from __future__ import annotations

import codecs
import ctypes
import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import llama_cpp
import numpy as np
import numpy.typing as npt
from llama_cpp import _internals as internals
from llama_cpp._ggml import libggml

from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.backend import Message
from botpsy_desktop.llm.cache.prefix_cache import (
    PARTIAL_ONLY,
    SEQ,
    Checkpoint,
    StateCache,
    common_prefix,
)
from botpsy_desktop.llm.cache.prefix_store import PrefixStore, file_identity, prefix_key
from botpsy_desktop.llm.language.grammar import (
    CALL_NAME_SO_FAR,
    tools_reached_for,
)
from botpsy_desktop.llm.language.grammar_check import GrammarMatcher
from botpsy_desktop.llm.language.prompt import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, PromptRenderer
from botpsy_desktop.llm.models import cpu_layout, gpu_device
from botpsy_desktop.llm.models.gguf_info import GGUFInfo, check_fits, read_gguf_info
from botpsy_desktop.llm.request import Request, ShapedEngine, ToolCallGrammars
from botpsy_desktop.llm.types import Completion, GenerationStats, PromptProgress, TextPiece

if TYPE_CHECKING:  # the engine worker reads its settings as plain data (worker.py: load)
    from botpsy_desktop.core.config import ModelSettings

_TEXT_STOPS = ("<|im_end|>", "<|endoftext|>")
PREFIX, TURN = "prefix", "turn"  # checkpoint labels: system prompt + tools; end of a user turn
TOOLS = "tools"  # the end of the tool list (where a set that grows adds its new tools)
BOUND = "bound"  # the end of an earlier tool in the list (another set's list may end there)
HEAD = "head"  # the start of a request's user turn (where the warmed conversation ended)
_SENTINEL_TOOL = {
    "type": "function",
    "function": {"name": "_", "description": "", "parameters": {"type": "object"}},
}  # a tool added to a list to see where the list can grow (never sent to the model)
Cut = tuple[int, str]  # (character offset in the prompt, label): where to save a checkpoint
WARM_BATCH = 128  # tokens per llama_decode while warming up on a CPU

log = logging.getLogger(__name__)


def llama_cpp_version() -> str:
    return str(getattr(llama_cpp, "__version__", "unknown"))


def system_info() -> str:
    """llama.cpp's build and CPU feature line (AVX2, AVX-512, ...)."""
    return bytes(llama_cpp.llama_print_system_info()).decode("utf-8", "replace").strip()


def llama_lib() -> Path | None:
    """llama-cpp-python's folder of native libraries (where GPU backend modules may be)."""
    folder = Path(llama_cpp.__file__).parent / "lib"
    return folder if folder.is_dir() else None


def supports_gpu_offload() -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


class LlamaBackend(ShapedEngine):
    """Owns one llama.cpp model and context. Not thread-safe: one worker thread drives it.

    Generation is our own loop over llama.cpp's sampler: free sampling for thinking and prose;
    once ``<tool_call>`` appears outside thinking, a grammar built from the tool schemas constrains
    the call (checked per sampled token, the full vocabulary is filtered only when the freely
    sampled token is rejected), then sampling is free again.

    Prompt evaluation is incremental. Within a request, each turn continues from the state after
    the last generated token. A hybrid model (BotPsy/Qwen3.5) cannot cut its memory back, so the
    engine saves checkpoints of its recurrent state (``prefix_cache.StateCache``): after the
    system prompt and tool schemas (the prefix, evaluated once per model and tool set) and after
    each request's user turn. A new request restores the longest checkpoint its prompt starts
    with and evaluates only what follows. ``warm`` evaluates ahead of time what the next request
    will start with (the prefix at load; a conversation's history re-rendered, as the template
    strips thinking from earlier turns), so a follow-up message evaluates only itself.
    """

    def __init__(
        self,
        settings: ModelSettings,
        path: str | os.PathLike[str] | None = None,
        *,
        prefix_store: PrefixStore | None = None,
        model_sha256: str | None = None,
        layout: cpu_layout.LayoutSetting | None = None,
        device: gpu_device.DeviceSetting | None = None,
    ) -> None:
        """``prefix_store`` keeps prefix states on disk for later processes (see
        ``prefix_store``); ``model_sha256`` is the file's checked SHA-256 when the model
        registry knows it (else the file is identified by size, time and header); ``layout``
        overrides ``settings.cpu_layout`` (how the weights are laid out on a CPU), ``device``
        ``settings.device`` (where the model runs: ``gpu_device``)."""
        model_path = path if path is not None else settings.path
        if not model_path:
            raise ModelError(
                "No model is configured.",
                "Pass --model PATH to a GGUF file, or set model.path in the config.",
            )
        self.settings = settings
        self.info: GGUFInfo = read_gguf_info(model_path)
        # never ask for more context than the model was trained for
        n_ctx = min(settings.n_ctx, self.info.context_length or settings.n_ctx)
        self.memory_estimate = check_fits(self.info, n_ctx)
        # Without flash attention (decode 12% slower with it on CPUs here) the attention
        # scratch grows with n_ubatch x the tokens in the context, and it becomes resident as a
        # conversation grows. 64 prefills within 3% of 128 or 512 on a CPU (interleaved, BotPsy
        # Q4_K_M, 2 threads) with half the scratch of 128 (61 MiB reserved at 16k instead of
        # 123): about 30 MiB less resident at a 5.4k-token prompt, about 60 at 16k.
        self.placement = gpu_device.place(
            device or settings.device,
            why=(
                "moved there after a GPU backend crash in this model's first decode "
                "(`botpsy doctor`)"
                if device == "cpu" and settings.device != "cpu"
                else ""
            ),
            libggml=libggml,
            folders=gpu_device.backend_folders(settings.gpu_backend_dir, llama_lib()),
            need=self.memory_estimate,
            n_layers=self.info.arch_int("block_count"),
            max_layers=settings.n_gpu_layers,
        )
        """Where the model runs (``gpu_device``): a GPU device and its layers, or the CPU."""
        self.n_gpu_layers = self.placement.n_gpu_layers
        if self.placement.device is None:
            log.info("the model runs on the CPU: %s", self.placement.reason)
        else:
            log.info(
                "the model runs on %s (%s): %s",
                self.placement.device.description,
                self.placement.device.name,
                self.placement.reason,
            )
        n_ubatch = settings.n_batch if self.n_gpu_layers else min(settings.n_batch, 64)
        # On a CPU a batch is as large as a micro-batch too: llama.cpp splits a larger one into
        # micro-batches anyway (the same arithmetic, prefill within noise), but holds buffers
        # for the whole batch, and they grow with the tokens in context: 6 MiB more resident
        # at a 5.4k-token prompt with batches of 512 (docs/PERFORMANCE.md).
        n_batch = settings.n_batch if self.n_gpu_layers else n_ubatch
        features = cpu_layout.cpu_features(system_info())
        chosen = cpu_layout.choose_layout(layout or settings.cpu_layout, features)
        self.layout = cpu_layout.layout_params(chosen, self.info.tensors, features, libggml)
        """The weight layout the model is loaded with (``cpu_layout``)."""
        try:
            with cpu_layout.default_model_params(llama_cpp.llama_cpp, self.layout, self.placement):
                self._llama = llama_cpp.Llama(
                    model_path=str(self.info.path),
                    n_ctx=n_ctx,
                    n_batch=n_batch,
                    n_ubatch=n_ubatch,
                    n_threads=settings.n_threads,
                    n_threads_batch=settings.n_threads_batch,
                    n_gpu_layers=self.n_gpu_layers,
                    # On a CPU llama.cpp repacks most weights into its own buffers; with mmap the
                    # file's pages stay mapped too and resident memory counts the weights twice
                    # (about +200 MB for BotPsy Q4_K_M). Read the file instead.
                    use_mmap=self.n_gpu_layers != 0,
                    seed=settings.seed if settings.seed >= 0 else llama_cpp.LLAMA_DEFAULT_SEED,
                    verbose=False,
                )
        except (ValueError, RuntimeError, OSError) as exc:
            raise ModelError(
                f"llama.cpp could not load {self.info.path.name} ({self.info.architecture}, "
                f"{self.info.file_type}): {exc}.",
                "The file may be damaged or need a newer llama.cpp; run `botpsy doctor`.",
            ) from exc
        self._closed = False
        self._vocab = llama_cpp.llama_model_get_vocab(self._llama.model)
        self._piece_buf = ctypes.create_string_buffer(256)
        # a one-token batch for the decode loop (``_eval_one``): only token and position change
        self._one = llama_cpp.llama_batch_init(1, 0, 1)
        self._one.n_tokens = 1
        self._one.n_seq_id[0] = 1
        self._one.seq_id[0][0] = 0
        self._one.logits[0] = True
        self._one_token, self._one_pos = self._one.token, self._one.pos  # read once, not per token
        self._tokens: dict[int, tuple[bytes, str | None, bool]] = {}
        """Per token the decode loop met: its bytes, its text when they are whole UTF-8 on
        their own, whether it ends generation (``_token_facts``)."""
        self._n_vocab = int(self._llama.n_vocab())
        self.hybrid = bool(
            llama_cpp.llama_model_is_hybrid(self._llama.model)
            or llama_cpp.llama_model_is_recurrent(self._llama.model)
        )
        meta: dict[str, str] = dict(self._llama.metadata)
        template = meta.get("tokenizer.chat_template") or self.info.chat_template
        self.renderer = PromptRenderer(
            template,
            bos_token=self._token_text(self._llama.token_bos()),
            eos_token=self._token_text(self._llama.token_eos()),
        )
        # the whole vocabulary's candidates, for the rare full grammar pass: llama-cpp-python's
        # Llama makes one at load (248k entries) that only its own sampling would use, and this
        # engine samples with its own loop, so it borrows that one (no second array in memory)
        self._candidates: internals.LlamaTokenDataArray = self._llama._candidates
        self._top = _TokenDataArray(min(128, self._n_vocab))
        self._full_passes: dict[str, int] = {}  # per grammar: rejected choices filtered in full
        self._literal_sets: dict[str, tuple[npt.NDArray[np.intc], _TokenDataArray]] = {}
        self._grammars = ToolCallGrammars(
            settings, lambda: len(self.tokenize(TOOL_CALL_CLOSE)) == 1
        )
        self._free_choice: int | None = None  # the model's own choice at the last constrained step
        self._evaluated_text = ""  # the text whose tokens the context holds (for continuation)
        self.last_prompt_tokens: list[int] = []
        """The prompt tokens the last generation evaluated or reused (the fidelity check)."""
        self._prefix_texts: dict[str, str] = {}
        self._layouts: dict[str, list[Cut]] = {}
        self.states: StateCache | None = None
        if self.hybrid and settings.state_checkpoints > 0:
            ctx = self._llama._ctx.ctx
            # with the disk cache on, the checkpoints' states wait on disk, one in memory
            self.states = StateCache(
                ctx,
                llama_cpp.llama_get_memory(ctx),
                limit=settings.state_checkpoints,
                folder=prefix_store.folder if prefix_store is not None else None,
                room_bytes=prefix_store.bound_bytes if prefix_store is not None else 0,
            )
        self.disk = prefix_store
        self._disk_components: dict[str, Any] = {}
        if prefix_store is not None:
            self._disk_components = self._state_components(template, model_sha256)
        self._disk_known: set[str] = set()  # keys on disk already (written or read here)
        self._disk_writer: threading.Thread | None = None
        self.disk_restores = 0
        self.disk_saves = 0
        self.partial_saves = 0
        self.partial_restores = 0
        """Restores of a tool list's end from its saved recurrent state (a grown set)."""
        self.last_disk_restore_s = 0.0
        self.last_disk_read_s = 0.0

    # -- prefix states on disk -------------------------------------------------------------
    _STATE_PARAMS = (
        "n_batch", "n_ubatch", "n_seq_max", "rope_scaling_type", "pooling_type",
        "attention_type", "flash_attn_type", "flash_attn", "rope_freq_base", "rope_freq_scale",
        "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow",
        "yarn_orig_ctx", "type_k", "type_v", "embeddings", "offload_kqv", "swa_full",
        "kv_unified", "op_offload",
    )  # fmt: skip

    def _state_components(self, template: str | None, model_sha256: str | None) -> dict[str, Any]:
        """Everything but the tokens that determines a prefix state (see ``prefix_key``)."""
        params = self._llama.context_params
        context = {
            name: getattr(params, name)
            for name in self._STATE_PARAMS
            if hasattr(params, name) and isinstance(getattr(params, name), int | float | bool)
        }
        return {
            "model": file_identity(self.info.path, model_sha256),
            "llama_cpp_python": llama_cpp_version(),
            "template_sha256": hashlib.sha256((template or "").encode()).hexdigest(),
            "n_ctx": int(self._llama.n_ctx()),
            "n_ctx_tokens": len(self._llama.input_ids),
            "n_gpu_layers": self.n_gpu_layers,
            "device": self.placement.device.description if self.placement.device else "cpu",
            "context": context,
        }

    def prefix_state_key(self, tokens: Sequence[int] | npt.NDArray[Any]) -> str:
        """The disk key of the state after ``tokens`` with this model and these settings."""
        return prefix_key(self._disk_components, tokens)

    def _restore_prefix(self, tokens: list[int]) -> bool:
        """Restore the state after ``tokens`` from disk; False (sequence cleared) if absent.

        llama.cpp reads the verified file itself, tensor by tensor, so the restore never holds
        the whole state in memory."""
        if self.disk is None or not tokens:
            return False
        started = time.perf_counter()
        key = self.prefix_state_key(tokens)
        entry = self.disk.load(key, tokens)
        if entry is None:
            return False
        ctx = self._llama._ctx.ctx
        memory = llama_cpp.llama_get_memory(ctx)
        n = len(tokens)
        with entry:
            self.reset()
            if self.states is not None:
                self.states.release()
            llama_cpp.llama_memory_seq_rm(memory, SEQ, -1, -1)
            read_tokens = (llama_cpp.llama_token * n)()
            n_read = ctypes.c_size_t(0)
            read = int(
                llama_cpp.llama_state_seq_load_file(
                    ctx, os.fsencode(entry.body_path), SEQ, read_tokens, n, ctypes.byref(n_read)
                )
            )
            problem = None
            if read != entry.body_bytes:
                problem = f"llama.cpp read {read} of {entry.body_bytes} bytes"
            elif n_read.value != n or list(read_tokens) != list(tokens):
                problem = "llama.cpp's part holds other tokens than the prefix"
        if problem is not None:
            llama_cpp.llama_memory_seq_rm(memory, SEQ, -1, -1)
            self.reset()
            self.disk.discard(key, problem)
            return False
        self._llama.input_ids[:n] = tokens
        self._llama.n_tokens = n
        self._disk_known.add(key)
        self.disk_restores += 1
        self.last_disk_read_s = entry.read_s
        self.last_disk_restore_s = time.perf_counter() - started
        log.info(
            "prefix of %d tokens restored from disk in %.3f s (%.1f MiB)",
            n,
            self.last_disk_restore_s,
            entry.file_bytes / 2**20,
        )
        return True

    def _partial_key(self, tokens: Sequence[int] | npt.NDArray[Any]) -> str:
        """The disk key of the recurrent state alone after ``tokens`` (see _save_partial)."""
        return prefix_key({**self._disk_components, "part": "recurrent"}, tokens)

    def _save_partial(self, checkpoint: Checkpoint, base: npt.NDArray[np.intc]) -> None:
        """Keep a checkpoint's recurrent state (PARTIAL_ONLY, about 19 MiB for BotPsy) on disk,
        with the tokens of ``base``, a longer prefix whose full state is on disk: a later
        process restores the base, then this state, and cuts the attention cache back to the
        checkpoint (the same as restoring the checkpoint in memory). A process whose context
        still holds the checkpoint's tokens needs only this state."""
        if self.disk is None or not self.hybrid or self.states is None:
            return
        key = self._partial_key(checkpoint.tokens)
        if key in self._disk_known or self.disk.contains(key):
            self._disk_known.add(key)
            return
        state = self.states.resident_state(checkpoint)
        if state is None:
            return
        meta = {
            **self._disk_components,
            "part": "recurrent",
            "n_tokens": checkpoint.n_tokens,
            "base_tokens": len(base),
            "saved_at": time.time(),
        }
        if self.disk.save(key, base, state, meta) is not None:
            self._disk_known.add(key)
            self.partial_saves += 1

    def _restore_partial(self, tokens: Sequence[int], at: int, held: int) -> bool:
        """Put the context at the state after ``tokens[:at]`` from a recurrent state on disk
        (see _save_partial); ``held``: how many of ``tokens`` the context holds now. False if
        there is none (the context is then as it was, or cleared when a restore failed)."""
        if self.disk is None or not self.hybrid or self.states is None:
            return False
        key = self._partial_key(tokens[:at])
        entry = self.disk.load(key, tokens[:at], at_least=True)
        if entry is None:
            return False
        with entry:
            base = [int(t) for t in entry.tokens]
            state = np.frombuffer(entry.read_body(), dtype=np.uint8)
        if held < at and not self._restore_prefix(base):
            return False  # the base (with the attention cache) is gone: evaluate instead
        if len(state) != self.states.state_size():  # (the size of a sequence that holds tokens)
            self.disk.discard(key, "a recurrent state of another size")
            return False
        ctx = self._llama._ctx.ctx
        ptr = state.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        read = int(llama_cpp.llama_state_seq_set_data_ext(ctx, ptr, len(state), SEQ, PARTIAL_ONLY))
        if read != len(state) or not llama_cpp.llama_memory_seq_rm(
            llama_cpp.llama_get_memory(ctx), SEQ, at, -1
        ):
            self.reset()
            self.disk.discard(key, "llama.cpp refused it")
            return False
        self._llama.n_tokens = at
        self.states.truncate(at)
        self._evaluated_text = ""
        self.partial_restores += 1
        log.info("tool list of %d tokens restored from its saved state", at)
        return True

    def _save_prefix(self, tokens: npt.NDArray[np.intc], *, keep: str | None = None) -> None:
        """Write the full state (which must be the state after ``tokens``) to disk, unless it
        is there already: llama.cpp writes it into a temporary file now, tensor by tensor (no
        copy of the whole state in memory); a background thread checksums and seals it.
        ``keep`` names a group (a conversation) of which the disk keeps only the newest."""
        if self.disk is None:
            return
        key = self.prefix_state_key(tokens)
        if key in self._disk_known or self.disk.contains(key):
            self._disk_known.add(key)
            return
        self.flush_prefix_writes()  # one write at a time
        pending = self.disk.begin(key)
        if pending is None:
            return
        n = len(tokens)
        ctx = self._llama._ctx.ctx
        token_array = (llama_cpp.llama_token * n)(*(int(t) for t in tokens))
        if self.states is not None:
            self.states.release()  # on disk: llama.cpp's temporary buffers take its place
        written = int(
            llama_cpp.llama_state_seq_save_file(ctx, os.fsencode(pending.path), SEQ, token_array, n)
        )
        if written <= 0:
            log.warning("llama.cpp could not write the prefix state to %s", pending.path)
            pending.abandon()
            return
        self._disk_known.add(key)
        meta = {**self._disk_components, "n_tokens": n, "saved_at": time.time()}
        token_copy = np.array(tokens, dtype=np.intc)

        def write() -> None:
            if pending.finish(token_copy, meta, group=keep) is not None:
                self.disk_saves += 1

        # not a daemon: a short-lived process (botpsy ask) finishes the write before exiting
        self._disk_writer = threading.Thread(target=write, name="prefix-state-writer")
        self._disk_writer.start()

    def flush_prefix_writes(self) -> None:
        """Wait until prefix states being written to disk are written."""
        writer = self._disk_writer
        if writer is not None:
            writer.join()
            self._disk_writer = None

    # -- small helpers -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"llama.cpp:{self.info.path.name}"

    @property
    def device(self) -> dict[str, Any]:
        """Where the model runs (gpu_device.Placement.describe())."""
        return self.placement.describe()

    @property
    def n_ctx(self) -> int:
        # llama.cpp pads the context (384 becomes 512), but the binding's token buffer holds
        # only what was asked for: evaluating past it fails, so that is the real limit
        return min(int(self._llama.n_ctx()), len(self._llama.input_ids))

    def _token_text(self, token: int) -> str:
        if token < 0:
            return ""
        return self._piece(token).decode("utf-8", "replace")

    def _piece(self, token: int) -> bytes:
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece_buf, 256, 0, True)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, True)
            return bytes(buf.raw[:n])
        return bytes(self._piece_buf.raw[:n])

    TOKEN_FACTS_MAX = 1 << 15
    """How many tokens' facts ``_token_facts`` keeps (a few MiB at most; a trained model's
    answers use far fewer distinct tokens)."""

    def _token_facts(self, token: int) -> tuple[bytes, str | None, bool]:
        """A token's bytes, its text if they are whole UTF-8 on their own, and whether it ends
        generation, from llama.cpp once, then from a table: the decode loop asks per token."""
        raw = self._piece(token)
        try:
            whole: str | None = raw.decode("utf-8")
        except UnicodeDecodeError:
            whole = None
        facts = (raw, whole, bool(llama_cpp.llama_vocab_is_eog(self._vocab, token)))
        if len(self._tokens) >= self.TOKEN_FACTS_MAX:
            self._tokens.clear()
        self._tokens[token] = facts
        return facts

    def _eval_one(self, token: int) -> None:
        """``Llama.eval([token])`` for the decode loop, without its per-call Python: it rebuilt
        the batch field by field and trimmed the memory past the end (empty while generating:
        the prompt's ``eval`` just did). Keeps the binding's token list and count as it does."""
        llm = self._llama
        n = llm.n_tokens
        self._one_token[0] = token
        self._one_pos[0] = n
        rc = llama_cpp.llama_decode(llm._ctx.ctx, self._one)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        llm.input_ids[n] = token
        llm.n_tokens = n + 1

    def tokenize(self, text: str) -> list[int]:
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def _sampler(self) -> internals.LlamaSampler:
        s = self.settings
        sampler = internals.LlamaSampler()
        if s.temperature <= 0:
            sampler.add_greedy()
            return sampler
        if s.top_k > 0:
            sampler.add_top_k(s.top_k)
        sampler.add_top_p(s.top_p, 1)
        if s.min_p > 0:
            sampler.add_min_p(s.min_p, 1)
        sampler.add_temp(s.temperature)
        seed = s.seed if s.seed >= 0 else llama_cpp.LLAMA_DEFAULT_SEED
        sampler.add_dist(seed)
        return sampler

    # -- prompt structure ----------------------------------------------------------------
    def _is_control(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_control(self._vocab, token))

    def _starts_with_control(self, text: str) -> bool:
        """Whether ``text`` starts with a control token such as ``<|im_start|>``.

        Special tokens are split off before BPE runs, so tokenizing a prompt in two pieces cut
        just before one gives exactly the tokens of the whole prompt.
        """
        tokens = self.tokenize(text[:64])
        return bool(tokens) and self._is_control(tokens[0])

    def _before_last_control(self, text: str) -> str:
        """``text`` up to (not including) its last control token, or "" if it has none."""
        window_start = max(0, len(text) - 256)
        while True:
            window = text[window_start:]
            for token in reversed(self.tokenize(window)):
                if self._is_control(token):
                    at = window.rfind(self._token_text(token))
                    if at >= 0:
                        return text[: window_start + at]
            if window_start == 0:
                return ""
            window_start = 0

    def conversation_head(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
    ) -> str:
        """The text the next request on ``messages`` will start with, before its user turn.

        The template renders earlier turns differently once a newer user message exists (Qwen3.5
        drops their thinking), so the conversation is rendered as the next request will see it:
        followed by a user message. Two different placeholder messages show where the user turn
        begins; the head ends just before that turn's first control token.
        """
        return self._before_last_control(
            self._before_user_turn(messages, tools, enable_thinking=enable_thinking)
        )

    def prefix_text(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
    ) -> str:
        """The fixed beginning of every prompt with this system message and these tools."""
        system = [dict(messages[0])] if messages and messages[0].get("role") == "system" else []
        key = json.dumps([system, list(tools), enable_thinking], sort_keys=True, default=str)
        text = self._prefix_texts.get(key)
        if text is None:
            if len(self._prefix_texts) >= 4:
                self._prefix_texts.clear()
            text = self.conversation_head(system, tools, enable_thinking=enable_thinking)
            self._prefix_texts[key] = text
        return text

    def prefix_cuts(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
    ) -> list[Cut]:
        """Where the prefix's saved states may sit: the end of each tool in the list (BOUND),
        the end of the list (TOOLS) and the end of the prefix (PREFIX).

        A conversation's tool set grows by adding tools at the end of the list
        (agent/selection.py), so the prompt of the grown set shares the old one's tokens up to
        the old list's end: a state saved there spares evaluating the list again. The tools'
        ends are found by rendering the list with one more tool (where the two renders part),
        and kept only where tokenizing the prefix in pieces cut there gives exactly the tokens
        of the whole (they do for the Qwen3.5 template: each cut follows a newline, where the
        tokenizer's pre-split falls anyway), so a prompt's tokens never depend on the cuts.
        """
        prefix = self.prefix_text(messages, tools, enable_thinking=enable_thinking)
        if not prefix:
            return []
        system = [dict(messages[0])] if messages and messages[0].get("role") == "system" else []
        key = json.dumps([system, list(tools), enable_thinking], sort_keys=True, default=str)
        found = self._layouts.get(key)
        if found is None:
            found = []
            if tools and self.hybrid:
                found = self._tool_ends(system, tools, enable_thinking, prefix)
            if len(self._layouts) >= 4:
                self._layouts.clear()
            self._layouts[key] = found
        return [*found, (len(prefix), PREFIX)]

    def _tool_ends(
        self,
        system: list[dict[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        enable_thinking: bool,
        prefix: str,
    ) -> list[Cut]:
        def render(items: Sequence[Mapping[str, Any]]) -> str:
            return self.renderer.render(  # (the template wants a user message)
                [*system, {"role": "user", "content": "a"}],
                items,
                enable_thinking=enable_thinking,
                add_generation_prompt=False,
            ).text

        ends: list[int] = []
        for i in range(1, len(tools) + 1):
            short = render(tools[:i])
            longer = render([*tools[:i], _SENTINEL_TOOL])
            at = next(
                (j for j, (x, y) in enumerate(zip(short, longer, strict=False)) if x != y),
                min(len(short), len(longer)),
            )
            if not prefix.startswith(short[:at]) or (ends and at <= ends[-1]):
                return []  # the template does not list tools one after the other
            ends.append(at)
        if not ends or ends[-1] >= len(prefix):
            return []
        pieces: list[int] = []
        start = 0
        for at in [*ends, len(prefix)]:
            pieces += self.tokenize(prefix[start:at])
            start = at
        if pieces != self.tokenize(prefix):
            log.info("tool list states off: tokens cut at a tool's end differ from the whole")
            return []
        return [(at, BOUND) for at in ends[:-1]] + [(ends[-1], TOOLS)]

    def _cuts(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        enable_thinking: bool,
        prompt: str,
    ) -> list[Cut]:
        """Where to checkpoint (or look for a saved state) while evaluating ``prompt``: the
        prefix's places (``prefix_cuts``), the start of the request's user turn (where the
        conversation's warmed state on disk ends) and its end, when this is a request's first
        model turn."""
        if self.states is None and self.disk is None:
            return []
        cuts: list[Cut] = []
        prefix = self.prefix_text(messages, tools, enable_thinking=enable_thinking)
        if prefix and len(prefix) < len(prompt) and prompt.startswith(prefix):
            cuts += self.prefix_cuts(messages, tools, enable_thinking=enable_thinking)
        last_user = bool(messages) and messages[-1].get("role") == "user"
        if self.disk is not None and last_user and len(messages) > 2 and cuts:
            head = self.conversation_head(messages[:-1], tools, enable_thinking=enable_thinking)
            if len(prefix) < len(head) < len(prompt) and prompt.startswith(head):
                cuts.append((len(head), HEAD))
        if self.states is not None and last_user:
            head = self.renderer.render(
                messages, tools, enable_thinking=enable_thinking, add_generation_prompt=False
            ).text
            if (
                len(prefix) < len(head) < len(prompt)
                and prompt.startswith(head)
                and self._starts_with_control(prompt[len(head) :])
            ):
                cuts.append((len(head), TURN))
        return cuts

    # -- evaluation ----------------------------------------------------------------------
    def _tokenize_continuing(
        self, prompt: str, cuts: Sequence[Cut] = ()
    ) -> tuple[list[int], list[tuple[int, str, str]]]:
        """Tokens of ``prompt``, reusing known tokens of its beginning; and where the cuts fall.

        Generated tokens (especially under a grammar) are often not how the tokenizer would split
        the same text; re-tokenizing the whole conversation would then differ from the state and
        force a re-evaluation. So when the prompt extends the evaluated text (or a checkpoint's
        text), those tokens are kept and only the new text is tokenized, in pieces split at the
        cuts. Returns the tokens and, per cut beyond the reused part, (token position, label,
        text up to the cut).
        """
        head_text, head_tokens = "", np.zeros(0, dtype=np.intc)
        done = self._evaluated_text
        n = int(self._llama.n_tokens)
        if done and n > 0 and prompt.startswith(done):
            head_text, head_tokens = done, self._llama.input_ids[:n]
        if self.states is not None:
            for checkpoint in self.states.checkpoints:
                text = checkpoint.text
                if text and len(text) > len(head_text) and prompt.startswith(text):
                    head_text, head_tokens = text, checkpoint.tokens
        tokens = [int(t) for t in head_tokens.tolist()]
        marks: list[tuple[int, str, str]] = []
        at = len(head_text)
        for offset, label in sorted(cuts):
            if at < offset <= len(prompt):
                tokens += self.tokenize(prompt[at:offset])
                at = offset
                marks.append((len(tokens), label, prompt[:offset]))
        if at < len(prompt):
            tokens += self.tokenize(prompt[at:])
        return tokens, marks

    def _prepare(
        self,
        tokens: list[int],
        *,
        need_logits: bool = True,
        prefix_at: int = 0,
        marks: Sequence[tuple[int, str, str]] = (),
    ) -> int:
        """Bring the context to hold a prefix of ``tokens``; return its length.

        tokens[start:] still need evaluating (at least one when ``need_logits``, to get fresh
        logits). The evaluated sequence is continued when the prompt extends it; otherwise it is
        cut back: any model to the shared prefix when it can, a hybrid/recurrent model to the
        longest checkpoint the prompt starts with, or to nothing. A state on disk is restored
        instead when it reaches further: at a mark (``marks``: the conversation warmed up to
        the request's user turn, the prefix, or the end of a tool list, the recurrent state
        alone) or at ``prefix_at`` (the system prompt and tools).
        """
        llm = self._llama
        n = int(llm.n_tokens)
        common = common_prefix(llm.input_ids[:n], np.asarray(tokens, dtype=np.intc))
        if need_logits and common == len(tokens):
            common -= 1
        if self.disk is not None:
            reach = self._reach(common, n)
            places = [(pos, label) for pos, label, _ in marks]
            if prefix_at and not places:
                places = [(prefix_at, PREFIX)]
            for pos, label in sorted(places, reverse=True):
                if not reach < pos <= len(tokens) - int(need_logits):
                    continue
                if label in (HEAD, PREFIX) and self._restore_prefix(tokens[:pos]):
                    return pos
                if label in (TOOLS, BOUND) and self._restore_partial(tokens, pos, common):
                    return pos
                n = int(llm.n_tokens)  # a failed restore may have cleared the context
                common = min(common, n)
        if common == n:
            return n
        if not self.hybrid:
            if common > 0 and llm._ctx.kv_cache_seq_rm(-1, common, -1):
                llm.n_tokens = common
                return common
            llm.reset()
            return 0
        if self.states is not None:
            checkpoint = self.states.best(common)
            if checkpoint is not None and self.states.restore(checkpoint):
                llm.n_tokens = checkpoint.n_tokens
                self.states.truncate(checkpoint.n_tokens)
                return checkpoint.n_tokens
        self.reset()
        return 0

    def _reach(self, common: int, n: int) -> int:
        """How many leading tokens of a prompt the context can give without the disk, when it
        shares ``common`` of them with the ``n`` it holds."""
        if common == n or not self.hybrid:
            return common
        if self.states is None:
            return 0
        checkpoint = self.states.best(common)
        return checkpoint.n_tokens if checkpoint is not None else 0

    def _eval(
        self,
        tokens: list[int],
        start: int,
        marks: Sequence[tuple[int, str, str]],
        cancel: threading.Event,
        step: int | None = None,
    ) -> bool:
        """Evaluate tokens[start:] ``step`` (default n_batch) at a time, checkpointing at marks.

        Cancelling stops between batches; the context then holds the tokens evaluated so far.
        """
        steps = self._eval_steps(tokens, start, marks, cancel, step)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return bool(done.value)

    def _eval_steps(
        self,
        tokens: list[int],
        start: int,
        marks: Sequence[tuple[int, str, str]],
        cancel: threading.Event,
        step: int | None = None,
    ) -> Generator[int, None, bool]:
        """``_eval`` one batch at a time: yields the tokens evaluated so far after each batch
        (the caller reports progress), returns whether all were evaluated."""
        llm = self._llama
        at_mark = {
            pos: (label, text)
            for pos, label, text in marks
            if start <= pos <= len(tokens) and label in (PREFIX, TURN, TOOLS)
        }  # the places where a state is saved (the others are only looked up on disk)
        step = max(step or int(llm.n_batch), 1)
        i = start
        while True:
            if i in at_mark and i > 0:
                label, text = at_mark.pop(i)
                # the tool list's end is kept only until the prefix's end, for the disk
                keep = label in (PREFIX, TURN) or (label == TOOLS and self.disk is not None)
                if label == PREFIX and self.states is not None:
                    # the tool list's end, with this as its base (first: its state is the one
                    # in memory when the others wait on disk)
                    for c in self.states.checkpoints:
                        if c.label == TOOLS and c.n_tokens < i:
                            self._save_partial(c, llm.input_ids[:i])
                            self.states.forget(c)
                if self.states is not None and keep:
                    self.states.save(llm.input_ids[:i], label, text=text, pinned=label == PREFIX)
                if label == PREFIX:
                    self._save_prefix(llm.input_ids[:i])
            if i >= len(tokens):
                return True
            if cancel.is_set():
                return False
            end = min([i + step, len(tokens), *(p for p in at_mark if p > i)])
            llm.eval(tokens[i:end])
            i = end
            yield i

    def reset(self) -> None:
        """Forget everything evaluated: the context's memory and every checkpoint."""
        self._llama.reset()
        self._evaluated_text = ""
        if self.states is not None:
            self.states.clear()

    # -- the Backend interface ----------------------------------------------------------
    def carry(
        self, request: Request, cancel: threading.Event | None
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        """Generate one shaped request (``complete``): a call the model begins to a tool of
        the prompt outside ``may_call`` is reported in the Completion's ``stats.wanted_tools``."""
        refused: list[str] = []
        for item in self.generate(
            request.prompt,
            cancel=cancel,
            cuts=self._cuts(
                request.messages, request.tools, request.enable_thinking, request.prompt
            ),
            refused=refused.append if request.may_call is not None else None,
            **request.options(),
        ):
            if isinstance(item, Completion) and refused:
                wanted = (
                    name
                    for piece in refused
                    for name in tools_reached_for(piece, request.tools, request.may_call)
                )
                item.stats.wanted_tools = tuple(dict.fromkeys(wanted))
            yield item

    def count_tokens(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> int:
        """How many tokens ``complete`` would evaluate for this prompt: rendered and tokenized
        exactly as it would be (reusing the tokens the context already holds of its start)."""
        if self._closed:
            raise ModelError("The model was closed.", "Load it again.")
        rendered = self.renderer.render(messages, tools, enable_thinking=enable_thinking)
        tokens, _ = self._tokenize_continuing(rendered.text)
        return len(tokens)

    def prompt_tokens(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> list[int]:
        """The prompt tokens ``complete`` would evaluate or reuse, without evaluating them (the
        prompt-path fidelity check)."""
        if self._closed:
            raise ModelError("The model was closed.", "Load it again.")
        rendered = self.renderer.render(messages, tools, enable_thinking=enable_thinking)
        cuts = self._cuts(messages, tools, enable_thinking, rendered.text)
        return self._tokenize_continuing(rendered.text, cuts)[0]

    def warm(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
        cancel: threading.Event | None = None,
        progress: Callable[[PromptProgress], None] | None = None,
        keep: str | None = None,
        most: int | None = None,
    ) -> GenerationStats:
        """Evaluate now what the next request on ``messages`` will start with.

        With only a system message: the prefix (system prompt and tool schemas), checkpointed
        for every later request; call it after loading the model. After a request: the
        conversation as its next request will render it, so that request evaluates only its
        own user message. Runs on the thread that owns the model; ``cancel`` stops it between
        batches, keeping what was evaluated (a request that follows continues from there).
        Returns the prompt-side stats (tokens reused and evaluated, seconds); ``progress`` is
        told how far it has come after each batch. ``keep`` (a conversation's id) also keeps
        the warmed conversation's state on disk, the newest one per ``keep``, so that a new
        process (the next `botpsy ask --conversation`, the window opened again) starts there.
        ``most``: evaluate nothing, and leave the context as it is, when more than this many
        tokens would need evaluating after what the context (or a checkpoint in memory) holds
        (a process about to end keeps only what costs it next to nothing; the stats then say
        0 tokens reused and evaluated).
        """
        if self._closed:
            raise ModelError("The model was closed.", "Load it again.")
        stats = GenerationStats()
        t_start = time.perf_counter()
        head = self.conversation_head(messages, tools, enable_thinking=enable_thinking)
        if not head:
            return stats
        cuts: list[Cut] = []
        if self.states is not None or self.disk is not None:
            prefix = self.prefix_text(messages, tools, enable_thinking=enable_thinking)
            if prefix and head.startswith(prefix):
                cuts += self.prefix_cuts(messages, tools, enable_thinking=enable_thinking)
        tokens, marks = self._tokenize_continuing(head, cuts)
        stats.prompt_tokens = len(tokens)
        if len(tokens) >= self.n_ctx:
            return stats  # the request will say it does not fit; nothing to prepare
        if most is not None:
            # judged before the context is touched: what it holds (or a checkpoint in memory)
            # must leave at most ``most`` tokens to evaluate; else it is left as it is
            n = int(self._llama.n_tokens)
            held = common_prefix(self._llama.input_ids[:n], np.asarray(tokens, dtype=np.intc))
            if len(tokens) - self._reach(held, n) > most:
                return stats
        start = self._prepare(tokens, need_logits=False, marks=marks)
        stats.reused_tokens = start
        stats.evaluated_tokens = len(tokens) - start
        self._evaluated_text = ""
        # smaller batches on a CPU (as fast there) so that a request arriving stops it sooner
        step = int(self._llama.n_batch)
        if not self.n_gpu_layers:
            step = min(step, WARM_BATCH)
        steps = self._eval_steps(tokens, start, marks, cancel or threading.Event(), step)
        t_eval = time.perf_counter()
        total = len(tokens) - start
        if progress is not None and total > 0:
            progress(PromptProgress(0, total, 0.0))
        while True:
            try:
                at = next(steps)
            except StopIteration as finished:
                if finished.value:
                    self._evaluated_text = head
                    if keep and len(messages) > 1 and int(self._llama.n_tokens) == len(tokens):
                        self._save_prefix(self._llama.input_ids[: len(tokens)], keep=keep)
                break
            if progress is not None:
                progress(PromptProgress(at - start, total, time.perf_counter() - t_eval))
        stats.prefill_s = time.perf_counter() - t_start
        return stats

    def generate(
        self,
        prompt: str,
        *,
        started_in_thinking: bool = False,
        grammar: str | None = None,
        cancel: threading.Event | None = None,
        max_tokens: int | None = None,
        force_tool_call: bool = False,
        cuts: Sequence[Cut] = (),
        refused: Callable[[str], None] | None = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        """Stream a completion of a rendered prompt; constrain tool calls with ``grammar``.

        ``refused`` hears the start of a tool name the model chose and the grammar did not
        allow (the name written so far and the refused token's text).

        ``force_tool_call`` makes the turn start with ``<tool_call>`` (the prompt is extended by
        it and the call is constrained from its first token): the model must call a tool.
        ``cuts`` are (character offset, label) places in the prompt where to save a checkpoint
        of the state (see ``complete``); offsets must fall just before a control token.
        """
        if self._closed:
            raise ModelError("The model was closed.", "Load it again.")
        cancel = cancel or threading.Event()
        stats = GenerationStats()
        t_start = time.perf_counter()
        prompt = self._prompt_to_generate(prompt, grammar, started_in_thinking, force_tool_call)
        tokens, marks = self._tokenize_continuing(prompt, cuts)
        self.last_prompt_tokens = list(tokens)
        stats.prompt_tokens = len(tokens)
        room = self._room_after(
            len(tokens),
            self.n_ctx,
            f"the model's context of {self.n_ctx} tokens",
            "Start a new conversation or raise model.n_ctx in the settings.",
        )
        limit = min(max_tokens or self.settings.max_tokens, room)
        start = self._prepare(tokens, marks=marks)
        stats.reused_tokens = start
        stats.evaluated_tokens = len(tokens) - start
        self._evaluated_text = ""
        # Stop is noticed and progress reported between batches (n_batch tokens each);
        # PromptProgress only for a prompt of several batches
        step = max(int(self._llama.n_batch), 1)
        total = len(tokens) - start
        report = total > step
        t_eval = time.perf_counter()
        if report:
            yield PromptProgress(0, total, 0.0)
        steps = self._eval_steps(tokens, start, marks, cancel, step)
        evaluated = False
        while True:
            try:
                at = next(steps)
            except StopIteration as finished:
                evaluated = bool(finished.value)
                break
            if report:
                yield PromptProgress(at - start, total, time.perf_counter() - t_eval)
        if not evaluated:
            # the context keeps what was evaluated: a retry continues from there
            stats.prefill_s = time.perf_counter() - t_start
            yield Completion("", "cancelled", stats, started_in_thinking)
            return
        stats.prefill_s = time.perf_counter() - t_start

        sampler = self._sampler()
        evaluated_bytes: list[bytes] = []
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = ""
        in_call = False
        calls_end: int | None = None  # where the last complete tool call ended in ``text``
        think_open = started_in_thinking
        matcher: GrammarMatcher | None = None
        if force_tool_call and grammar is not None:
            text, in_call, think_open = TOOL_CALL_OPEN, True, False
            matcher = GrammarMatcher(self._vocab, grammar)
            yield TextPiece(TOOL_CALL_OPEN, started_in_thinking)
        finish: str = "length"
        t_first = 0.0
        completed = 0  # tokens generated, the stopping one excepted
        partial = False  # the decoder holds the start of a character split across tokens
        facts = self._tokens
        llm = self._llama
        ctx = llm._ctx
        try:
            for produced in range(limit):
                if cancel.is_set():
                    finish = "cancelled"
                    break
                if matcher is not None:
                    token, resampled = self._sample_constrained(sampler, matcher, grammar or "")
                    stats.constrained_tokens += 1
                    stats.grammar_resamples += resampled
                    if resampled and refused is not None and self._free_choice is not None:
                        so_far = CALL_NAME_SO_FAR.search(text[-200:])
                        if so_far is not None:
                            free = self._piece(self._free_choice).decode("utf-8", "replace")
                            refused(so_far.group(1) + free.strip())
                else:
                    token = llama_cpp.llama_sampler_sample(sampler.sampler, ctx.ctx, -1)
                if produced == 0:
                    t_first = time.perf_counter()
                    stats.time_to_first_token_s = t_first - t_start
                known = facts.get(token)
                if known is None:
                    known = self._token_facts(token)
                raw, whole, eog = known
                if eog:
                    finish = "stop"
                    break
                completed += 1
                if whole is not None and not partial:
                    piece = whole  # the token's text on its own: most tokens
                else:
                    piece = decoder.decode(raw)
                    partial = bool(decoder.getstate()[0])
                tagged = ">" in piece  # every tag the loop follows ends with ">"
                if piece:
                    text += piece
                    if tagged and text.endswith(_TEXT_STOPS):
                        for s in _TEXT_STOPS:
                            if text.endswith(s):
                                text = text[: -len(s)]
                        finish = "stop"
                        break
                    if calls_end is not None and not in_call:
                        # after tool calls only another call may follow ("NO suffix")
                        tail = text[calls_end:].lstrip()
                        if tail and not (
                            tail.startswith(TOOL_CALL_OPEN) or TOOL_CALL_OPEN.startswith(tail)
                        ):
                            text = text[:calls_end]
                            completed -= 1
                            finish = "stop"
                            break
                    yield TextPiece(piece, started_in_thinking)
                # follow the structure: thinking, then free text and tool calls
                if tagged:
                    if think_open and "</think>" in text[-len(piece) - 9 :]:
                        think_open = False
                    elif not think_open and not in_call and text.endswith("<think>"):
                        think_open = True
                if matcher is not None:
                    matcher.accept(token)
                    if tagged and text.endswith(TOOL_CALL_CLOSE):
                        matcher.close()
                        matcher = None
                        in_call = False
                        calls_end = len(text)
                elif tagged:
                    if not think_open and text.endswith(TOOL_CALL_OPEN):
                        in_call = True
                        if grammar is not None:
                            matcher = GrammarMatcher(self._vocab, grammar)
                    elif in_call and text.endswith(TOOL_CALL_CLOSE):
                        in_call = False
                        calls_end = len(text)
                self._eval_one(token)
                evaluated_bytes.append(raw)
        finally:
            if matcher is not None:
                matcher.close()
            sampler.close()
        stats.completion_tokens += completed
        # every generated token but a stopping one was evaluated: the context holds this text
        generated = b"".join(evaluated_bytes).decode("utf-8", errors="replace")
        self._evaluated_text = prompt + generated
        tail = decoder.decode(b"", final=True)
        if tail:
            text += tail
            yield TextPiece(tail, started_in_thinking)
        stats.decode_s = time.perf_counter() - t_first if t_first else 0.0
        yield Completion(text, finish, stats, started_in_thinking)  # type: ignore[arg-type]

    def _sample_constrained(
        self, sampler: internals.LlamaSampler, matcher: GrammarMatcher, grammar: str
    ) -> tuple[int, bool]:
        token = int(sampler.sample(self._llama._ctx, -1))
        self._free_choice = token  # what the model chose, for ``refused``
        if matcher.accepts(token):
            return token, False
        # The free choice breaks the grammar: sample again among the tokens it allows, looking
        # first at the most likely tokens (cheap), then at the tokens that spell the grammar's
        # fixed text (names, tags, enum values, numbers), and only then at the whole vocabulary.
        logits_p = llama_cpp.llama_get_logits_ith(self._llama._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(logits_p, shape=(self._n_vocab,))
        k = len(self._top.data)
        chosen = self._sample_among(
            sampler, matcher, self._top, np.argpartition(logits, -k)[-k:], logits
        )
        if chosen is not None:
            return chosen, True
        literal = self._literal_candidates(grammar)
        if literal is not None:
            chosen = self._sample_among(sampler, matcher, literal[1], literal[0], logits)
            if chosen is not None:
                return chosen, True
        cand = self._candidates
        cand.copy_logits(logits)
        arr_p = ctypes.byref(cand.candidates)
        matcher.apply(arr_p)
        llama_cpp.llama_sampler_apply(sampler.sampler, arr_p)
        selected = int(cand.candidates.selected)
        if selected < 0:
            selected = int(np.argmax(cand.candidates_data.logit[: cand.candidates.size]))
        self._full_passes[grammar] = self._full_passes.get(grammar, 0) + 1
        return int(cand.candidates_data.id[selected]), True

    def _sample_among(
        self,
        sampler: internals.LlamaSampler,
        matcher: GrammarMatcher,
        buf: _TokenDataArray,
        ids: npt.NDArray[np.integer[Any]],
        logits: npt.NDArray[np.float32],
    ) -> int | None:
        """Sample among ``ids`` the grammar allows; None if it allows none of them."""
        buf.data["id"] = ids
        buf.data["logit"] = logits[ids]
        buf.data["p"] = 0.0
        buf.reset()
        array_p = ctypes.byref(buf.array)
        matcher.apply(array_p)
        if not np.isfinite(buf.data["logit"]).any():
            return None
        llama_cpp.llama_sampler_apply(sampler.sampler, array_p)
        selected = int(buf.array.selected)
        if selected < 0:
            selected = int(np.argmax(buf.data["logit"][: buf.array.size]))
        return int(buf.data["id"][selected])

    def _literal_candidates(
        self, grammar: str
    ) -> tuple[npt.NDArray[np.intc], _TokenDataArray] | None:
        """The tokens that can spell the grammar's quoted text or a number, once it is worth it.

        Where the grammar expects fixed text, every token it allows is one of these (a few
        thousand): filtering them instead of the whole vocabulary (248k tokens, ~30 ms) keeps a
        rejected choice cheap. Finding them reads the whole vocabulary once (~0.5 s), so that
        is done only for a grammar that already needed a few full-vocabulary passes.
        """
        found = self._literal_sets.get(grammar)
        if found is not None or self._full_passes.get(grammar, 0) < 3:
            return found
        pieces: set[bytes] = set()
        literals = [_unescape_gbnf(m) for m in re.findall(r'"((?:[^"\\]|\\.)*)"', grammar)]
        for literal in [*literals, TOOL_CALL_CLOSE]:
            data = literal.encode("utf-8")
            for i in range(len(data)):
                for j in range(i + 1, min(len(data), i + 48) + 1):
                    pieces.add(data[i:j])
        ids = np.array(
            [
                t
                for t in range(self._n_vocab)
                if (piece := self._piece(t))
                and (piece in pieces or not piece.strip(b"0123456789-+.eE"))
            ],
            dtype=np.intc,
        )
        if len(ids) == 0:
            return None
        if len(self._literal_sets) >= 4:
            self._literal_sets.clear()
        found = (ids, _TokenDataArray(len(ids)))
        if len(self._literal_sets) >= 16:  # one per grammar (per set a request may call)
            self._literal_sets.clear()
            self._full_passes.clear()
        self._literal_sets[grammar] = found
        return found

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.flush_prefix_writes()
            if self.states is not None:
                self.states.close()  # and their files
            self._llama.close()
            llama_cpp.llama_batch_free(self._one)


def _prefix_at(marks: Sequence[tuple[int, str, str]]) -> int:
    """The token position of the prefix mark, or 0 when there is none."""
    return next((pos for pos, label, _ in marks if label == PREFIX), 0)


class _TokenDataArray:
    """A small llama_token_data_array over a numpy buffer (ids, logits, probabilities)."""

    _DTYPE = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)

    def __init__(self, size: int) -> None:
        self.data = np.zeros(size, dtype=self._DTYPE)
        self.array = llama_cpp.llama_token_data_array(
            data=self.data.ctypes.data_as(llama_cpp.llama_token_data_p),
            size=size,
            selected=-1,
            sorted=False,
        )

    def reset(self) -> None:
        # samplers may shrink `size` and sort in place; restore before each use
        self.array.size = len(self.data)
        self.array.selected = -1
        self.array.sorted = False


def _unescape_gbnf(text: str) -> str:
    """The characters a GBNF string literal stands for (the escapes the grammar builder writes)."""

    def one(m: re.Match[str]) -> str:
        code = m.group(1)
        if len(code) == 3:  # xHH
            return chr(int(code[1:], 16))
        return {"n": "\n", "t": "\t", "r": "\r"}.get(code, code)

    return re.sub(r"\\(x[0-9A-Fa-f]{2}|.)", one, text)


def load_backend(settings: ModelSettings, path: str | Path | None = None) -> LlamaBackend:
    return LlamaBackend(settings, path)
