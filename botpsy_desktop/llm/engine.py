"""The llama.cpp backend: load a GGUF safely, render with its own template, stream one turn."""

from __future__ import annotations

import codecs
import ctypes
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals as internals

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.backend import Message
from botpsy_desktop.llm.gguf_info import GGUFInfo, check_fits, read_gguf_info
from botpsy_desktop.llm.grammar import build_tool_call_grammar, grammar_key
from botpsy_desktop.llm.grammar_check import GrammarMatcher
from botpsy_desktop.llm.prompt import PromptRenderer
from botpsy_desktop.llm.types import Completion, GenerationStats, TextPiece

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_TEXT_STOPS = ("<|im_end|>", "<|endoftext|>")


def llama_cpp_version() -> str:
    return str(getattr(llama_cpp, "__version__", "unknown"))


def system_info() -> str:
    """llama.cpp's build and CPU feature line (AVX2, AVX-512, ...)."""
    return bytes(llama_cpp.llama_print_system_info()).decode("utf-8", "replace").strip()


def supports_gpu_offload() -> bool:
    return bool(llama_cpp.llama_supports_gpu_offload())


class LlamaBackend:
    """Owns one llama.cpp model and context. Not thread-safe: one worker thread drives it.

    Generation is our own loop over llama.cpp's sampler: free sampling for thinking and prose;
    once ``<tool_call>`` appears outside thinking, a grammar built from the tool schemas constrains
    the call (checked per sampled token, the full vocabulary is filtered only when the freely
    sampled token is rejected), then sampling is free again.
    """

    def __init__(self, settings: ModelSettings, path: str | os.PathLike[str] | None = None) -> None:
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
        try:
            self._llama = llama_cpp.Llama(
                model_path=str(self.info.path),
                n_ctx=n_ctx,
                n_batch=settings.n_batch,
                n_ubatch=settings.n_batch,
                n_threads=settings.n_threads,
                n_threads_batch=settings.n_threads_batch,
                n_gpu_layers=settings.n_gpu_layers,
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
        self._candidates = internals.LlamaTokenDataArray(n_vocab=self._n_vocab)
        self._top = _TokenDataArray(min(128, self._n_vocab))
        self._grammars: dict[str, str] = {}
        self._evaluated_text = ""  # the text whose tokens the context holds (for continuation)

    # -- small helpers -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return f"llama.cpp:{self.info.path.name}"

    @property
    def n_ctx(self) -> int:
        return int(self._llama.n_ctx())

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

    def _grammar_for(self, tools: Sequence[Mapping[str, Any]]) -> str | None:
        if not tools or not self.settings.constrain_tool_calls:
            return None
        if self.renderer.call_format != "xml":
            return None  # the grammar describes Qwen3-Coder XML calls only
        close_token = len(self.tokenize(TOOL_CALL_CLOSE)) == 1
        key = grammar_key(tools, close_token=close_token, param_order="any")
        if key not in self._grammars:
            self._grammars[key] = build_tool_call_grammar(
                tools, close_token=close_token, param_order="any"
            )
        return self._grammars[key]

    # -- evaluation ----------------------------------------------------------------------
    def _prepare(self, tokens: list[int]) -> tuple[int, int]:
        """Bring the context to hold ``tokens`` except what must be evaluated.

        Returns (reused, start): tokens[start:] still need evaluating. A hybrid/recurrent model
        can only continue its exact evaluated sequence; other models can cut back to a prefix.
        """
        llm = self._llama
        evaluated = llm.input_ids[: llm.n_tokens].tolist()
        common = 0
        for a, b in zip(evaluated, tokens, strict=False):
            if a != b:
                break
            common += 1
        if common == len(tokens):
            common -= 1  # at least one token must be evaluated to get fresh logits
        if common > 0 and common == llm.n_tokens:
            return common, common
        if common > 0 and not self.hybrid and llm._ctx.kv_cache_seq_rm(-1, common, -1):
            llm.n_tokens = common
            return common, common
        llm.reset()
        return 0, 0

    def _tokenize_continuing(self, prompt: str) -> list[int]:
        """Tokens of ``prompt``, keeping the evaluated tokens when the prompt extends their text.

        Generated tokens (especially under a grammar) are often not how the tokenizer would split
        the same text; re-tokenizing the whole conversation would then differ from the state and
        force a full re-evaluation. Appending only the new text's tokens keeps the state usable.
        """
        done = self._evaluated_text
        n = int(self._llama.n_tokens)
        if done and n > 0 and len(prompt) > len(done) and prompt.startswith(done):
            head = self._llama.input_ids[:n].tolist()
            return [int(t) for t in head] + self.tokenize(prompt[len(done) :])
        return self.tokenize(prompt)

    def _eval(self, tokens: list[int], cancel: threading.Event) -> bool:
        step = max(int(self._llama.n_batch), 1)
        for i in range(0, len(tokens), step):
            if cancel.is_set():
                return False
            self._llama.eval(tokens[i : i + step])
        return True

    # -- the Backend interface ----------------------------------------------------------
    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
    ) -> Iterator[TextPiece | Completion]:
        rendered = self.renderer.render(messages, tools, enable_thinking=enable_thinking)
        yield from self.generate(
            rendered.text,
            started_in_thinking=rendered.started_in_thinking,
            grammar=self._grammar_for(tools),
            cancel=cancel,
        )

    def generate(
        self,
        prompt: str,
        *,
        started_in_thinking: bool = False,
        grammar: str | None = None,
        cancel: threading.Event | None = None,
        max_tokens: int | None = None,
        force_tool_call: bool = False,
    ) -> Iterator[TextPiece | Completion]:
        """Stream a completion of a rendered prompt; constrain tool calls with ``grammar``.

        ``force_tool_call`` makes the turn start with ``<tool_call>`` (the prompt is extended by
        it and the call is constrained from its first token): the model must call a tool.
        """
        if self._closed:
            raise ModelError("The model was closed.", "Load it again.")
        cancel = cancel or threading.Event()
        stats = GenerationStats()
        t_start = time.perf_counter()
        if force_tool_call:
            if grammar is None or started_in_thinking:
                raise ModelError(
                    "A forced tool call needs the tool-call grammar and no open thinking block."
                )
            prompt += TOOL_CALL_OPEN
        tokens = self._tokenize_continuing(prompt)
        stats.prompt_tokens = len(tokens)
        room = self.n_ctx - len(tokens)
        if room < 1:
            raise ModelError(
                f"The conversation ({len(tokens)} tokens) does not fit the model's context "
                f"of {self.n_ctx} tokens.",
                "Start a new conversation or raise model.n_ctx in the settings.",
            )
        limit = min(max_tokens or self.settings.max_tokens, room)
        reused, start = self._prepare(tokens)
        stats.reused_tokens = reused
        stats.evaluated_tokens = len(tokens) - start
        self._evaluated_text = ""
        if not self._eval(tokens[start:], cancel):
            self._llama.reset()
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
        try:
            for produced in range(limit):
                if cancel.is_set():
                    finish = "cancelled"
                    break
                if matcher is not None:
                    token, resampled = self._sample_constrained(sampler, matcher)
                    stats.constrained_tokens += 1
                    stats.grammar_resamples += resampled
                else:
                    token = sampler.sample(self._llama._ctx, -1)
                if produced == 0:
                    t_first = time.perf_counter()
                    stats.time_to_first_token_s = t_first - t_start
                if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    finish = "stop"
                    break
                stats.completion_tokens += 1
                piece = decoder.decode(self._piece(token))
                if piece:
                    text += piece
                    if any(text.endswith(s) for s in _TEXT_STOPS):
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
                            stats.completion_tokens -= 1
                            finish = "stop"
                            break
                    yield TextPiece(piece, started_in_thinking)
                # follow the structure: thinking, then free text and tool calls
                if think_open and "</think>" in text[-len(piece) - 9 :]:
                    think_open = False
                elif not think_open and not in_call and text.endswith("<think>"):
                    think_open = True
                if matcher is not None:
                    matcher.accept(token)
                    if text.endswith(TOOL_CALL_CLOSE):
                        matcher.close()
                        matcher = None
                        in_call = False
                        calls_end = len(text)
                elif not think_open and text.endswith(TOOL_CALL_OPEN):
                    in_call = True
                    if grammar is not None:
                        matcher = GrammarMatcher(self._vocab, grammar)
                elif in_call and text.endswith(TOOL_CALL_CLOSE):
                    in_call = False
                    calls_end = len(text)
                self._llama.eval([token])
                evaluated_bytes.append(self._piece(token))
        finally:
            if matcher is not None:
                matcher.close()
            sampler.close()
        if finish != "cancelled":
            generated = b"".join(evaluated_bytes).decode("utf-8", errors="replace")
            self._evaluated_text = prompt + generated
        tail = decoder.decode(b"", final=True)
        if tail:
            text += tail
            yield TextPiece(tail, started_in_thinking)
        stats.decode_s = time.perf_counter() - t_first if t_first else 0.0
        yield Completion(text, finish, stats, started_in_thinking)  # type: ignore[arg-type]

    def _sample_constrained(
        self, sampler: internals.LlamaSampler, matcher: GrammarMatcher
    ) -> tuple[int, bool]:
        token = int(sampler.sample(self._llama._ctx, -1))
        if matcher.accepts(token):
            return token, False
        # The free choice breaks the grammar. First filter only the most likely tokens (cheap);
        # if none of them fits, filter the whole vocabulary. Then sample again.
        logits_p = llama_cpp.llama_get_logits_ith(self._llama._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(logits_p, shape=(self._n_vocab,))
        top = self._top
        k = len(top.data)
        ids = np.argpartition(logits, -k)[-k:]
        top.data["id"] = ids
        top.data["logit"] = logits[ids]
        top.data["p"] = 0.0
        top.reset()
        top_p = ctypes.byref(top.array)
        matcher.apply(top_p)
        if np.isfinite(top.data["logit"]).any():
            llama_cpp.llama_sampler_apply(sampler.sampler, top_p)
            selected = int(top.array.selected)
            if selected < 0:
                selected = int(np.argmax(top.data["logit"][: top.array.size]))
            return int(top.data["id"][selected]), True
        cand = self._candidates
        cand.copy_logits(logits)
        arr_p = ctypes.byref(cand.candidates)
        matcher.apply(arr_p)
        llama_cpp.llama_sampler_apply(sampler.sampler, arr_p)
        selected = int(cand.candidates.selected)
        if selected < 0:
            selected = int(np.argmax(cand.candidates_data.logit[: cand.candidates.size]))
        return int(cand.candidates_data.id[selected]), True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._llama.close()


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


def load_backend(settings: ModelSettings, path: str | Path | None = None) -> LlamaBackend:
    return LlamaBackend(settings, path)
