"""The bench's side inside the engine worker: a raw llama.cpp context beside the app's engine.

``botpsy bench`` (llm/bench/measure.py) runs the app's path through the worker as the app does;
what it compares that with, llama.cpp driven through its C API with no Python per token, runs here
in the same process on the same loaded model, one request of the bench at a time
(``worker_op``, reached through the worker's ``bench`` call).
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import llama_cpp
import numpy as np
import numpy.typing as npt

from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.bench.common import (
    REQUESTS,
    OwnCpu,
    RawStep,
    median,
    peak_rss_bytes,
    rss_bytes,
)
from botpsy_desktop.llm.cache.prefix_cache import PARTIAL_ONLY, SEQ
from botpsy_desktop.llm.engines.engine import LlamaBackend, llama_cpp_version, system_info
from botpsy_desktop.llm.language.grammar_check import GrammarMatcher
from botpsy_desktop.llm.types import Completion, TextPiece


def filler_tokens(engine: LlamaBackend, n: int) -> list[int]:
    base = engine.tokenize(" ".join(REQUESTS) + " ")
    return (base * (n // len(base) + 1))[:n]


class RawContext:
    """A second context on the same loaded model, driven only through llama.cpp's C API.

    The ceiling the app is compared with: batches go straight to ``llama_decode``, tokens are
    sampled with the same sampler chain as the app (``llama_sampler_sample``), no Python per
    token beyond the call itself.
    """

    def __init__(self, engine: LlamaBackend, n_ctx: int, threads: int) -> None:
        # the app's own context settings (flash attention, KV types, batch sizes), another size
        params = llama_cpp.llama_context_params.from_buffer_copy(engine._llama.context_params)
        params.n_ctx = n_ctx
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self.ctx = llama_cpp.llama_init_from_model(engine._llama.model, params)
        if not self.ctx:
            raise ModelError(f"llama.cpp could not create a {n_ctx}-token context for the bench.")
        self.n_batch = int(params.n_batch)
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        self.sampler = engine._sampler()
        self.n_vocab = int(engine._n_vocab)
        self.pos = 0

    def _decode(self, tokens: Sequence[int]) -> None:
        batch = self.batch
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = self.pos + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = SEQ
            batch.logits[i] = False
        batch.logits[len(tokens) - 1] = True
        rc = llama_cpp.llama_decode(self.ctx, batch)
        if rc != 0:
            raise ModelError(f"llama_decode returned {rc} in the bench's raw context.")
        self.pos += len(tokens)

    def prefill(self, tokens: Sequence[int]) -> float:
        """Evaluate ``tokens`` after what the context holds; seconds taken."""
        started = time.perf_counter()
        for i in range(0, len(tokens), self.n_batch):
            self._decode(tokens[i : i + self.n_batch])
        return time.perf_counter() - started

    def generate(self, n: int, *, sample: bool = True) -> float:
        """Sample and evaluate ``n`` tokens one by one; seconds taken (``sample``=False feeds a
        fixed token: llama_decode alone)."""
        sampler = self.sampler.sampler
        started = time.perf_counter()
        for _ in range(n):
            token = llama_cpp.llama_sampler_sample(sampler, self.ctx, -1) if sample else 198
            self._decode([token])
        return time.perf_counter() - started

    def greedy(self, n: int, top: int = 5) -> tuple[list[int], list[list[tuple[int, float]]]]:
        """``n`` tokens at temperature 0 (the most likely each time, whatever the app's sampling
        settings) after what the context holds, as token ids, and at each step the ``top`` most
        likely tokens with their logits: what two devices must agree on. Right after a prefill
        (its last token's logits are the context's), not after a ``restore``, which brings back
        the state but not the logits."""
        sampler = llama_cpp.llama_sampler_init_greedy()
        try:
            tokens: list[int] = []
            tops: list[list[tuple[int, float]]] = []
            for _ in range(n):
                logits = np.ctypeslib.as_array(
                    llama_cpp.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,)
                )
                best = np.argsort(-logits, kind="stable")[:top]
                tops.append([(int(i), float(logits[i])) for i in best])
                token = int(llama_cpp.llama_sampler_sample(sampler, self.ctx, -1))
                tokens.append(token)
                self._decode([token])
        finally:
            llama_cpp.llama_sampler_free(sampler)
        return tokens, tops

    def save(self) -> tuple[npt.NDArray[np.uint8], int]:
        size = int(llama_cpp.llama_state_seq_get_size_ext(self.ctx, SEQ, PARTIAL_ONLY))
        buf = np.empty(size, dtype=np.uint8)
        ptr = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        llama_cpp.llama_state_seq_get_data_ext(self.ctx, ptr, size, SEQ, PARTIAL_ONLY)
        return buf, self.pos

    def restore(self, saved: tuple[npt.NDArray[np.uint8], int]) -> None:
        buf, pos = saved
        ptr = buf.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
        if llama_cpp.llama_state_seq_set_data_ext(self.ctx, ptr, buf.nbytes, SEQ, PARTIAL_ONLY) != (
            buf.nbytes
        ) or not llama_cpp.llama_memory_seq_rm(self.memory, SEQ, pos, -1):
            raise ModelError("The bench could not restore its raw context's state.")
        self.pos = pos

    def clear(self) -> None:
        llama_cpp.llama_memory_clear(self.memory, True)
        self.pos = 0

    def close(self) -> None:
        self.sampler.close()  # type: ignore[no-untyped-call]
        llama_cpp.llama_batch_free(self.batch)
        llama_cpp.llama_free(self.ctx)


def grammar_check_us(
    engine: LlamaBackend, tools: Sequence[Mapping[str, Any]], calls: Sequence[str]
) -> float:
    """Microseconds per token to check and accept the tokens of calls the grammar produced."""
    grammar = engine._grammar_for(tools)
    if grammar is None:
        return math.nan
    per_token: list[float] = []
    for text in calls:
        if not text.startswith("<tool_call>"):
            continue
        body = text.removeprefix("<tool_call>")
        end = body.find("</tool_call>")
        tokens = engine.tokenize(body[: end + len("</tool_call>")] if end >= 0 else body)
        with GrammarMatcher(engine._vocab, grammar) as matcher:
            accepted = 0
            started = time.perf_counter()
            for token in tokens:  # what the engine does per token: check, then accept (checked)
                if not matcher.accepts(token):
                    break
                matcher.accept(token)
                accepted += 1
            if accepted:
                per_token.append((time.perf_counter() - started) / accepted * 1e6)
    return median(per_token)


def stream_items(
    engine: LlamaBackend, n: int, cancel: threading.Event | None = None
) -> Iterator[TextPiece]:
    """``n`` pieces streamed as the engine streams its own (the worker's ``bench_stream``): what
    the transport costs per token, with no model work in between."""
    for _ in range(n):
        if cancel is not None and cancel.is_set():
            return
        yield TextPiece(" x")


def complete_interleaved(
    engine: LlamaBackend,
    handle: int,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    cancel: threading.Event | None = None,
    **options: Any,
) -> Iterator[Any]:
    """The engine's ``complete`` with one decode step of raw context ``handle`` after each
    piece of text (the worker's ``bench_complete``), reported as a ``RawStep``: the raw step's
    time, and the app's time for the piece before it, from the piece before that (the engine's
    token, passing each piece on to the app, and this step's report; not the raw step)."""
    raw = _contexts[handle]
    last = math.nan
    for item in engine.complete(messages, tools, cancel=cancel, **options):
        now = time.perf_counter()
        yield item
        if isinstance(item, TextPiece) and item.text:
            app = now - last
            spent = raw.generate(1)
            last = now + spent
            yield RawStep(spent, app)


class _NativeTime:
    """Counts the CPU time this thread spends inside llama.cpp's decode and sampler calls
    while installed (the work raw llama.cpp does too); the rest of the thread's CPU time over
    a generation is the app's own Python per token.

    ``pace_s``: a one-token decode that took less is made to last that long, sleeping after it,
    as a GPU's decode keeps the thread waiting: the app's own work at a GPU's pace, on a model
    small enough to decode faster than that here. The sleep counts as the decode's (a GPU's
    wait, and the thread's wake-up after it, happen inside ``llama_decode``): a sleep and its
    wake-up cost this thread 30-110 us of CPU time on a shared 2-vCPU machine, which is not the
    app's."""

    def __init__(self, pace_s: float = 0.0) -> None:
        self.seconds = 0.0
        self.decodes = 0
        self.padded = 0  # decodes faster than the pace, made to last it
        self.pace_s = pace_s
        self._saved: dict[tuple[Any, str], Any] = {}

    _MODULES = (llama_cpp, llama_cpp.llama_cpp)  # the package re-exports the binding's names

    def _wrap(self, name: str) -> None:
        native = getattr(llama_cpp.llama_cpp, name)
        is_decode = name == "llama_decode"

        def timed(*args: Any) -> Any:
            started = time.thread_time()
            wall = time.perf_counter()
            try:
                return native(*args)
            finally:
                if is_decode and self.pace_s > 0 and args[1].n_tokens == 1:
                    # the wait for a GPU is inside its decode call: counted with it
                    left = self.pace_s - (time.perf_counter() - wall)
                    if left > 0:
                        time.sleep(left)
                        self.padded += 1
                self.seconds += time.thread_time() - started
                self.decodes += is_decode

        for module in self._MODULES:
            self._saved[(module, name)] = getattr(module, name)
            setattr(module, name, timed)

    def __enter__(self) -> _NativeTime:
        for name in ("llama_decode", "llama_sampler_sample"):
            self._wrap(name)
        return self

    def __exit__(self, *exc: object) -> None:
        for (module, name), native in self._saved.items():
            setattr(module, name, native)


def complete_own_cpu(
    engine: LlamaBackend,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    cancel: threading.Event | None = None,
    pace_s: float = 0.0,
    **options: Any,
) -> Iterator[Any]:
    """The engine's ``complete`` (the worker's ``bench_own``), then an ``OwnCpu`` item: this
    thread's CPU time from the first piece of text to the end, less the time inside llama.cpp's
    decode and sampling calls, the tokens decoded meanwhile and the wall time they took. The
    thread also sends the items to the app (the worker sends between two steps of this
    generator), so that counts. ``pace_s``: one-token decodes last at least that (_NativeTime)."""
    native = _NativeTime(pace_s)
    started = math.nan
    wall = math.nan
    decodes = padded = 0
    native_at_start = 0.0
    with native:
        for item in engine.complete(messages, tools, cancel=cancel, **options):
            if isinstance(item, Completion):  # the app's loop stops at it: report before
                if not math.isnan(started):
                    spent = time.thread_time() - started - (native.seconds - native_at_start)
                    yield OwnCpu(
                        spent,
                        native.decodes - decodes,
                        time.perf_counter() - wall,
                        native.padded - padded,
                    )
            elif math.isnan(started) and isinstance(item, TextPiece) and item.text:
                started, wall = time.thread_time(), time.perf_counter()
                decodes, native_at_start = native.decodes, native.seconds
                padded = native.padded
            yield item


STREAMS: dict[str, Callable[..., Iterator[Any]]] = {
    "bench_stream": stream_items,
    "bench_complete": complete_interleaved,
    "bench_own": complete_own_cpu,
}
"""The worker's streaming bench methods."""

_contexts: dict[int, RawContext] = {}
_saved: dict[int, tuple[npt.NDArray[np.uint8], int]] = {}
_handles = iter(range(1, 1 << 30))


def worker_op(engine: LlamaBackend, op: str, *args: Any) -> Any:
    """One step of the bench, run in the worker (see the module's doc)."""
    if op == "noop":
        return None
    if op == "info":
        return {"llama_cpp_python": llama_cpp_version(), "system_info": system_info()}
    if op == "memory":
        return {"rss": rss_bytes(), "peak": peak_rss_bytes()}
    if op == "prefix_tokens":
        system, tools = args
        return len(engine.tokenize(engine.prefix_text(system, tools)))
    if op == "grammar_check_us":
        return grammar_check_us(engine, *args)
    if op == "open":
        n_ctx, threads = args
        handle = next(_handles)
        _contexts[handle] = RawContext(engine, n_ctx, threads)
        return handle
    raw = _contexts[args[0]]
    rest = args[1:]
    if op == "close":
        _contexts.pop(args[0]).close()
        return None
    if op == "prefill":
        (tokens,) = rest
        return raw.prefill(tokens)
    if op == "prefill_filler":
        (n,) = rest
        return raw.prefill(filler_tokens(engine, n))
    if op == "prefill_prompt":  # the request's prompt as the app renders it; its token count
        messages, tools = rest
        prompt = engine.renderer.render(messages, tools).text
        tokens = engine.tokenize(prompt)
        return len(tokens), raw.prefill(tokens)
    if op == "greedy":  # n tokens at temperature 0 after what the context holds: their ids
        (n,) = rest
        return raw.greedy(n)
    if op == "generate":
        n, sample = rest
        return raw.generate(n, sample=sample)
    if op == "save":
        handle = next(_handles)
        _saved[handle] = raw.save()
        return handle
    if op == "restore":
        (saved,) = rest
        raw.restore(_saved[saved])
        return None
    if op == "clear":
        raw.clear()
        return None
    raise ModelError(f"The bench has no step {op!r}.")
