"""Speed and memory of a GGUF model: raw llama.cpp, the engine and the agent path, side by side.

The app's path runs as the app runs it: the engine in its worker process
(llm/engines/engine_process.py), driven from here through the agent loop. Raw llama.cpp, the ceiling
it is compared with, runs in that same worker beside the engine, on the same loaded model
(llm/bench/raw.py). This module imports no llama.cpp, so the memory measured here is the app's own.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.backend import Backend, BackendWrapper, Message
from botpsy_desktop.llm.bench.common import (
    REQUESTS,
    MiB,
    OwnCpu,
    RawStep,
    median,
    peak_rss_bytes,
    ratio,
    rss_bytes,
    shared_file_bytes,
)
from botpsy_desktop.llm.engines.engine_process import EngineProcess
from botpsy_desktop.llm.types import Completion, GenerationStats, PromptProgress, TextPiece


@dataclass
class AgentRun:
    """One user request through the agent loop, as the bench's harness reports it."""

    conversation_id: str
    wall_s: float
    turns: list[GenerationStats] = field(default_factory=list)
    answered: bool = False


class AgentHarness(Protocol):
    """The app's agent path, provided by the caller (the llm layer cannot import the agent)."""

    @property
    def system_prompt(self) -> str: ...

    @property
    def tools(self) -> list[dict[str, Any]]: ...

    def run(self, backend: Backend, text: str, conversation_id: str | None) -> AgentRun:
        """Handle one request (approvals denied) and report its turns."""
        ...

    def warm(self, backend: Backend, conversation_id: str | None) -> None:
        """What the app does when idle: warm the prefix, or the conversation's history."""
        ...


@dataclass
class BenchOptions:
    threads: int = 2
    n_ctx: int = 16384
    repeats: int = 3
    decode_tokens: int = 64
    requests: int = 100
    follow_ups: int = 4
    depths: tuple[int, ...] = ()
    thread_counts: tuple[int, ...] = ()
    seed: int = 7
    gpu_pace_ms: float = 4.0
    """The app's own CPU per token is measured again with one-token decodes lasting at least
    this (a GPU's pace for BotPsy-0.8B: 3-5 ms); 0: not."""
    new_process_only: bool = False
    """Only the prefix and the new-process rows (cold against prefix on disk)."""
    memory_only: bool = False
    """Only the memory rows (``requests`` requests through a worker with a prefix store)."""
    devices: tuple[str, ...] = ()
    """``model.device`` values to compare side by side (llm/bench/device.py); empty: the
    whole bench on the CPU."""
    prefill_tokens: int = 512
    """Raw prefill from an empty context (pp512), at most ``n_batch``."""
    gpu_backend_dir: str | None = None
    """Where the GPU backend module is (``model.gpu_backend_dir``), for ``devices``."""


def _assistant_turns_since_user(messages: Sequence[Message]) -> int:
    n = 0
    for message in reversed(messages):
        role = message.get("role")
        if role == "user":
            return n
        n += role == "assistant"
    return n


class ScriptedBackend(BackendWrapper[EngineProcess]):
    """The app's engine with a fixed policy, for a random-weight model that cannot choose.

    In each request the first ``calls`` model turns must call a tool (``<tool_call>`` is forced
    and the call constrained by the tool-call grammar, as for a real call); the next turn writes
    up to ``answer_tokens`` freely. Everything else (rendering, checkpoints, sampling, parsing,
    gate, tools, store) is the real path. Records, per turn, the wall time from the loop's call
    to the first streamed text.

    ``raw``, if set, is a raw context in the engine's worker that takes one decode step of its
    own after each streamed piece, in the worker: raw and app tokens then alternate one by one
    under the same machine load, and ``token_s`` / ``between_s`` collect the per-token times of
    each, measured in the worker (``RawStep``; the app's includes sending each piece to this
    process, not the inserted raw step). ``received_s`` has the app's per-token times as this
    process receives the pieces (the same on average; scheduling makes single ones vary).
    """

    def __init__(
        self,
        engine: EngineProcess,
        *,
        calls: int = 0,
        call_tokens: int = 48,
        answer_tokens: int = 32,
        raw: RawContext | None = None,
        own_cpu: bool = False,
        pace_s: float = 0.0,
    ) -> None:
        super().__init__(engine)
        self.raw = raw
        self.own_cpu = own_cpu
        self.pace_s = pace_s  # own_cpu: one-token decodes last at least this (llm/bench/raw.py)
        self.worker_cpu: list[OwnCpu] = []  # own_cpu: the worker's, per turn
        self.app_cpu: list[float] = []  # own_cpu: this process's, first piece to the end
        self.app_pieces: list[int] = []  # own_cpu: the pieces of text received meanwhile
        self.token_s: list[float] = []
        self.between_s: list[float] = []
        self.received_s: list[float] = []
        self.calls = calls
        self.call_tokens = call_tokens
        self.answer_tokens = answer_tokens
        self.first_text_s: list[float] = []
        self.texts: list[str] = []  # each turn's raw output

    @property
    def engine(self) -> EngineProcess:
        return self.inner

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        may_call: Collection[str] | None = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        force = _assistant_turns_since_user(messages) < self.calls
        started = time.perf_counter()
        first = math.nan
        last = math.nan  # when the previous piece came, less the raw step run since
        max_tokens = self.call_tokens if force else self.answer_tokens
        items: Iterator[Any]
        if self.own_cpu:
            own_args: tuple[Any, ...] = ([dict(m) for m in messages], list(tools))
            own_options = {
                "enable_thinking": enable_thinking,
                "force_tool_call": force,
                "max_tokens": max_tokens,
                "may_call": may_call,
                "pace_s": self.pace_s,
            }
            items = self.engine.stream("bench_own", own_args, own_options, cancel)
        elif self.raw is None:
            items = self.engine.complete(
                messages,
                tools,
                enable_thinking=enable_thinking,
                cancel=cancel,
                force_tool_call=force,
                max_tokens=max_tokens,
                may_call=may_call,
            )
        else:
            args = (self.raw.handle, [dict(m) for m in messages], list(tools))
            options = {
                "enable_thinking": enable_thinking,
                "force_tool_call": force,
                "max_tokens": max_tokens,
            }
            items = self.engine.stream("bench_complete", args, options, cancel)
        cpu_from = math.nan
        pieces = 0
        try:
            for item in items:
                if isinstance(item, OwnCpu):
                    self.worker_cpu.append(item)
                    continue
                if self.own_cpu and isinstance(item, Completion) and not math.isnan(cpu_from):
                    # the worker's OwnCpu came just before: count to here, for the same tokens
                    self.app_cpu.append(time.process_time() - cpu_from)
                    self.app_pieces.append(pieces)
                if isinstance(item, TextPiece) and item.text:
                    if math.isnan(cpu_from):
                        cpu_from = time.process_time()
                    else:
                        pieces += 1  # one message each (the worker may join a few tokens')
                if isinstance(item, RawStep):  # the raw step taken after the piece before
                    self.between_s.append(item.seconds)
                    if not math.isnan(item.app_seconds):
                        self.token_s.append(item.app_seconds)
                    last += item.seconds
                    continue
                if math.isnan(first) and (
                    isinstance(item, Completion) or (isinstance(item, TextPiece) and item.text)
                ):
                    first = time.perf_counter() - started
                if isinstance(item, Completion):
                    self.texts.append(item.text)
                elif self.raw is not None and isinstance(item, TextPiece) and item.text:
                    now = time.perf_counter()
                    if not math.isnan(last):
                        self.received_s.append(now - last)
                    last = now
                yield item
        finally:  # the loop stops iterating at the Completion
            self.first_text_s.append(first)

    def warm(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool = False,
        cancel: threading.Event | None = None,
        keep: str | None = None,
        most: int | None = None,
    ) -> GenerationStats:
        return self.engine.warm(
            messages, tools, enable_thinking=enable_thinking, cancel=cancel, keep=keep, most=most
        )


class RawContext:
    """A second context on the engine's loaded model, in its worker, driven only through
    llama.cpp's C API (llm/bench/raw.py): the ceiling the app is compared with. Batches go
    straight to ``llama_decode``, tokens are sampled with the app's sampler chain, no Python per
    token beyond the call itself. Each method returns the seconds measured in the worker."""

    def __init__(self, engine: EngineProcess, n_ctx: int, threads: int) -> None:
        self.engine = engine
        self.handle = int(engine.call("bench", "open", n_ctx, threads))

    def _op(self, op: str, *args: Any) -> Any:
        return self.engine.call("bench", op, self.handle, *args)

    def prefill(self, n: int) -> float:
        """Evaluate ``n`` tokens of filler text after what the context holds; seconds taken."""
        return float(self._op("prefill_filler", n))

    def prefill_prompt(
        self, messages: Sequence[Message], tools: Sequence[Any]
    ) -> tuple[int, float]:
        """Evaluate the prompt the app renders for ``messages``: its tokens, seconds taken."""
        n, seconds = self._op("prefill_prompt", [dict(m) for m in messages], list(tools))
        return int(n), float(seconds)

    def generate(self, n: int, *, sample: bool = True) -> float:
        """Sample and evaluate ``n`` tokens one by one; seconds taken (``sample``=False feeds a
        fixed token: llama_decode alone)."""
        return float(self._op("generate", n, sample))

    def greedy(self, n: int) -> tuple[list[int], list[list[tuple[int, float]]]]:
        """``n`` tokens at temperature 0 after what the context holds, as token ids, and the five
        most likely tokens with their logits at each step; right after a prefill (a restore
        brings back the state, not the last token's logits)."""
        tokens, tops = self._op("greedy", n)
        return [int(t) for t in tokens], [[(int(i), float(x)) for i, x in step] for step in tops]

    def save(self) -> int:
        return int(self._op("save"))

    def restore(self, saved: int) -> None:
        self._op("restore", saved)

    def clear(self) -> None:
        self._op("clear")

    def close(self) -> None:
        self._op("close")


# -- the bench ------------------------------------------------------------------------------
def run_bench(
    model: Path,
    harness: AgentHarness,
    options: BenchOptions,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Measure everything in one process, side by side; return the results as a dict."""
    o = options
    result: dict[str, Any] = {
        "model": model.name,
        "model_size_mib": round(model.stat().st_size / MiB, 1),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "threads": o.threads,
        "n_ctx": o.n_ctx,
        "repeats": o.repeats,
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "new_process_only": o.new_process_only,
    }
    settings = ModelSettings(
        n_ctx=o.n_ctx,
        n_threads=o.threads,
        n_threads_batch=o.threads,
        seed=o.seed,
        max_tokens=max(o.decode_tokens, 64),
    )
    if o.memory_only:
        result["tools"] = len(harness.tools)
        _memory(settings, model, harness, o, result, log)
        result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        result["targets"] = _targets(result)
        return result
    started = time.perf_counter()
    engine = EngineProcess(settings, model)
    result["load_s"] = round(time.perf_counter() - started, 2)
    try:
        result.update(engine.call("bench", "info"))
        result["weight_layout"] = engine.layout
        _transport(engine, o, result)
        _measure(engine, harness, o, result, log)
    finally:
        engine.close()
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    result["targets"] = _targets(result)
    return result


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _transport(engine: EngineProcess, o: BenchOptions, result: dict[str, Any]) -> None:
    """What the worker's connection costs: per streamed token (pickled, sent, read, unpickled;
    pieces yielded back to back, as here, share messages: worker.py ``PieceSender``) and per
    call there and back."""
    n = 2000
    per_item: list[float] = []
    for _ in range(max(o.repeats, 3)):
        started = time.perf_counter()
        text = "".join(item.text for item in engine.stream("bench_stream", (n,), {}, None))
        per_item.append((time.perf_counter() - started) / max(len(text) // 2, 1))
    calls: list[float] = []
    for _ in range(200):
        started = time.perf_counter()
        engine.call("bench", "noop")
        calls.append(time.perf_counter() - started)
    result["transport_us_per_token"] = round(median(per_item) * 1e6, 1)
    result["transport_us_per_call"] = round(median(calls) * 1e6, 1)


def _measure(
    engine: EngineProcess,
    harness: AgentHarness,
    o: BenchOptions,
    result: dict[str, Any],
    log: Callable[[str], None],
) -> None:
    system: list[Message] = [{"role": "system", "content": harness.system_prompt}]
    tools = harness.tools
    prefix_tokens = int(engine.call("bench", "prefix_tokens", system, tools))
    result["tools"] = len(tools)
    result["prefix_tokens"] = prefix_tokens
    if prefix_tokens + 256 > engine.n_ctx:
        raise ModelError(
            f"The system prompt and {len(tools)} tool schemas take {prefix_tokens} tokens, "
            f"more than the {engine.n_ctx}-token context allows with room for a request.",
            "Raise --n-ctx, or bench fewer tools with --tools.",
        )

    if o.new_process_only:
        _new_process(engine, harness, o, result, log)
        return

    # 1. time to first token: a cold engine (the whole prefix) against a warm one, in pairs
    answer = ScriptedBackend(engine, answer_tokens=2)
    cold: list[float] = []
    warm: list[float] = []
    for r in range(o.repeats):
        log(f"time to first token, pair {r + 1}/{o.repeats} (cold: {prefix_tokens} tokens)")
        engine.reset()
        harness.run(answer, REQUESTS[0], None)
        cold.append(answer.first_text_s[-1])
        harness.run(answer, REQUESTS[1], None)
        warm.append(answer.first_text_s[-1])
    result["ttft_cold_s"] = round(median(cold), 3)
    result["ttft_warm_s"] = round(median(warm), 3)
    result["ttft_warm_over_cold"] = round(ratio(median(warm), median(cold)), 4)
    result["ttft_cold_all_s"] = [round(x, 3) for x in cold]
    result["ttft_warm_all_s"] = [round(x, 3) for x in warm]

    # 1b. a new process: the prefix evaluated (cold) against the prefix restored from disk
    _new_process(engine, harness, o, result, log)

    # what the window does: warm the prefix after loading, then the first request
    engine.reset()
    started = time.perf_counter()
    harness.warm(answer, None)
    result["startup_warmup_s"] = round(time.perf_counter() - started, 2)
    harness.run(answer, REQUESTS[2], None)
    result["ttft_first_request_after_warmup_s"] = round(answer.first_text_s[-1], 3)

    # 2. what each request evaluates, over follow-ups in one conversation
    for mode in ("with_warm", "without_warm"):
        conversation: str | None = None
        rows: list[dict[str, int]] = []
        for i in range(o.follow_ups):
            run = harness.run(answer, REQUESTS[(i + 3) % len(REQUESTS)], conversation)
            conversation = run.conversation_id
            first = run.turns[0]
            rows.append(
                {
                    "prompt": first.prompt_tokens,
                    "reused": first.reused_tokens,
                    "evaluated": first.evaluated_tokens,
                    "prefix_reevaluated": max(0, prefix_tokens - first.reused_tokens),
                }
            )
            if mode == "with_warm":
                harness.warm(answer, conversation)
        result[f"follow_ups_{mode}"] = rows
    after_first = [r["prefix_reevaluated"] for r in result["follow_ups_with_warm"]]
    after_first += [r["prefix_reevaluated"] for r in result["follow_ups_without_warm"]]
    result["prefix_tokens_reevaluated_after_first_max"] = max(after_first)

    # 3. memory over many requests, in a worker of its own as the app runs it (a prefix store)
    _memory(engine.settings, engine.info.path, harness, o, result, log)

    # 4. raw llama.cpp against the app, interleaved, at the depth of a real request
    raw = RawContext(engine, o.n_ctx, o.threads)
    try:
        _raw_and_app(engine, harness, raw, o, result, system, log)
        if o.depths:
            _depths(engine, o, result, log)
        if o.thread_counts:
            _thread_sweep(engine, o, result, log)
    finally:
        raw.close()


def _memory(
    settings: ModelSettings,
    model: Path,
    harness: AgentHarness,
    o: BenchOptions,
    result: dict[str, Any],
    log: Callable[[str], None],
) -> None:
    """Peak memory over ``o.requests`` requests (a new conversation every ten, each warmed
    after its answer, as the window does) through an engine worker made as the app makes it:
    with a prefix store on disk (a temporary folder, the default ``model.prefix_cache_mb``),
    so that the engine keeps on disk what the app keeps there. Its own worker, started here:
    the main worker's prefix store is off, so that its cold figures are cold."""
    log(f"memory over {o.requests} requests (an engine worker with a prefix store)")
    rss_start = rss_bytes()
    with tempfile.TemporaryDirectory(prefix="botpsy-bench-memory-") as tmp:
        engine = EngineProcess(
            settings, model, prefix_cache_dir=Path(tmp), prefix_cache_mb=settings.prefix_cache_mb
        )
        try:
            _memory_run(engine, harness, o, result, rss_start)
        finally:
            engine.close()


def _memory_run(
    engine: EngineProcess,
    harness: AgentHarness,
    o: BenchOptions,
    result: dict[str, Any],
    rss_start: int,
) -> None:
    rss_after: list[int] = []
    conversation = None
    for i in range(o.requests):
        if i % 10 == 0:
            conversation = None  # a new conversation every ten requests
        short = ScriptedBackend(engine, answer_tokens=4)
        run = harness.run(short, REQUESTS[i % len(REQUESTS)], conversation)
        conversation = run.conversation_id
        harness.warm(short, conversation)
        both = rss_bytes() + int(engine.call("bench", "memory")["rss"])
        rss_after.append(both - shared_file_bytes(("self", engine.pid or 0)))
    est = engine.memory_estimate
    # the weights' own bytes: the file less its header (the vocabulary, ~8 MiB for BotPsy),
    # which llama.cpp keeps in tables of its own, an overhead like any other
    weights = est.get("tensor_data", est["weights"])
    expected = weights + est["kv_cache"] + est["recurrent_state"]
    worker = engine.call("bench", "memory")
    app_peak = peak_rss_bytes()
    # The two processes' peaks, added (each at its own moment: an upper bound), less the file
    # pages resident in both (libpython, libc...: one page of memory each, counted by both
    # resident sizes). On a CPU the weights are read, not mapped (engine.py), so all of them
    # are the worker's own anonymous memory, counted once.
    shared = shared_file_bytes(("self", engine.pid or 0))
    peak = app_peak + int(worker["peak"]) - shared
    state = engine.state()
    checkpoints = int(state["checkpoints_nbytes"])
    result["memory"] = {
        "how": "peak RSS of the app's process plus that of its engine worker, less the file "
        "pages resident in both, over the tensors' bytes + KV cache + recurrent state",
        "app_peak_rss_mib": round(app_peak / MiB, 1),
        "worker_peak_rss_mib": round(int(worker["peak"]) / MiB, 1),
        "shared_file_pages_mib": round(shared / MiB, 1),
        "rss_before_load_mib": round(rss_start / MiB, 1),
        "weights_mib": round(est["weights"] / MiB, 1),  # the file
        "tensor_data_mib": round(weights / MiB, 1),  # of which the tensors: the ratio's
        "kv_cache_mib": round(est["kv_cache"] / MiB, 1),
        "recurrent_state_mib": round(est["recurrent_state"] / MiB, 1),
        "checkpoints_mib": round(checkpoints / MiB, 1),
        "checkpoints_on_disk": int(state.get("checkpoints_on_disk", 0)),
        "prefix_cache_mb": engine.spec.prefix_cache_mb,
        "peak_rss_mib": round(peak / MiB, 1),
        "peak_over_weights_kv_state": round(peak / expected, 3),
        # the figure as earlier releases computed it: both peaks added, the file as weights
        "peak_over_weights_kv_state_before": round(
            (app_peak + int(worker["peak"]))
            / (est["weights"] + est["kv_cache"] + est["recurrent_state"]),
            3,
        ),
        "requests": o.requests,
        "rss_after_first_mib": round(rss_after[0] / MiB, 1) if rss_after else None,
        "rss_after_last_mib": round(rss_after[-1] / MiB, 1) if rss_after else None,
        "rss_growth": round(rss_after[-1] / rss_after[0] - 1, 4) if rss_after else None,
    }


def _run_child(spec_file: Path) -> dict[str, Any]:
    # the child imports this very package, wherever it was imported from
    root = str(Path(__file__).resolve().parents[3])
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
    proc = subprocess.run(
        [sys.executable, "-m", "botpsy_desktop.llm.bench.child", str(spec_file)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if proc.returncode != 0:
        raise ModelError(f"The bench's request in a new process failed: {proc.stderr[-2000:]}")
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return row


def _new_process(
    engine: EngineProcess,
    harness: AgentHarness,
    o: BenchOptions,
    result: dict[str, Any],
    log: Callable[[str], None],
) -> None:
    """Time to first token of a request in a real second process (``bench_child``): with an
    empty prefix store (the whole prefix evaluated, then its state written) and right after,
    in another process, with that state on disk. In pairs, medians; the engine path (render,
    restore or evaluate, sample), the same for both."""
    cold: list[dict[str, Any]] = []
    disk: list[dict[str, Any]] = []
    after_import: list[dict[str, Any]] = []
    prepare_s: list[float] = []
    with tempfile.TemporaryDirectory(prefix="botpsy-bench-prefix-") as tmp:
        for r in range(o.repeats):
            spec = {
                "model": str(engine.info.path),
                "settings": engine.settings.model_dump(),
                "store": str(Path(tmp) / f"store-{r}"),
                "bound_mb": 8192,
                "system": harness.system_prompt,
                "tools": harness.tools,
                "request": REQUESTS[0],
            }
            spec_file = Path(tmp) / f"spec-{r}.json"
            spec_file.write_text(json.dumps(spec), encoding="utf-8")
            log(f"new process, cold then prefix on disk, pair {r + 1}/{o.repeats}")
            cold.append(_run_child(spec_file))
            disk.append(_run_child(spec_file))
            # the first request after installing: the store prepared as `botpsy model import`
            # and `pull` prepare it (App.prepare_model: the window's warm-up in an engine
            # worker of its own, the states kept on disk), then a new process's first request
            log(f"new process, first request after import {r + 1}/{o.repeats}")
            store = Path(tmp) / f"imported-{r}"
            spec_file.write_text(json.dumps({**spec, "store": str(store)}), encoding="utf-8")
            prepared = EngineProcess(
                engine.settings, engine.info.path, prefix_cache_dir=store, prefix_cache_mb=8192
            )
            try:
                started = time.perf_counter()
                harness.warm(prepared, None)
                prepared.flush_prefix_writes()
                prepare_s.append(time.perf_counter() - started)
            finally:
                prepared.close()
            after_import.append(_run_child(spec_file))

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return median([float(row[key]) for row in rows if row.get(key) is not None])

    ttft_cold, ttft_disk = med(cold, "ttft_s"), med(disk, "ttft_s")
    result["new_process"] = {
        "how": "a separate process per request (python -m botpsy_desktop.llm.bench.child) with "
        "its own engine worker, engine path, prefix store in a fresh temporary folder per pair",
        "ttft_cold_s": round(ttft_cold, 3),
        "ttft_disk_s": round(ttft_disk, 4),
        "ttft_disk_over_cold": round(ratio(ttft_disk, ttft_cold), 4),
        "load_s": round(med(cold + disk, "load_s"), 3),
        "prefix_restored": all(row["disk_restores"] == 1 for row in disk),
        "evaluated_tokens_cold": [row["evaluated_tokens"] for row in cold],
        "evaluated_tokens_disk": [row["evaluated_tokens"] for row in disk],
        "file_mib": round(med(cold, "file_bytes") / MiB, 1),
        "write_wait_after_request_s": round(med(cold, "write_wait_after_request_s"), 3),
        "read_verify_s": round(med(disk, "disk_read_verify_s"), 4),
        "restore_s": round(med(disk, "disk_restore_s"), 4),
        "peak_rss_cold_mib": round(med(cold, "peak_rss_kib") / 1024, 1),
        "peak_rss_disk_mib": round(med(disk, "peak_rss_kib") / 1024, 1),
        "ttft_cold_all_s": [row["ttft_s"] for row in cold],
        "ttft_disk_all_s": [row["ttft_s"] for row in disk],
        "prepare_at_import_s": round(median(prepare_s), 2),
        "ttft_first_after_import_s": round(med(after_import, "ttft_s"), 4),
        "ttft_first_after_import_over_later": round(
            ratio(med(after_import, "ttft_s"), ttft_disk), 3
        ),
        "evaluated_tokens_first_after_import": [r["evaluated_tokens"] for r in after_import],
        "ttft_first_after_import_all_s": [row["ttft_s"] for row in after_import],
    }


def _raw_and_app(
    engine: EngineProcess,
    harness: AgentHarness,
    raw: RawContext,
    o: BenchOptions,
    result: dict[str, Any],
    system: list[Message],
    log: Callable[[str], None],
) -> None:
    tools = harness.tools
    pp_tokens = min(o.prefill_tokens, engine.settings.n_batch)
    pp: list[float] = []
    for r in range(o.repeats):
        log(f"raw prefill pp{pp_tokens}, {r + 1}/{o.repeats}")
        raw.clear()
        pp.append(pp_tokens / raw.prefill(pp_tokens))
    result["raw_prefill_tps"] = round(median(pp), 2)
    result["raw_prefill_tokens"] = pp_tokens

    # the raw context at the depth the app decodes at: system + tools + a user turn
    log("raw prefill of the request prompt (once)")
    raw.clear()
    n_prompt, depth_s = raw.prefill_prompt(
        [*system, {"role": "user", "content": REQUESTS[0]}], tools
    )
    result["raw_prompt_prefill_tps"] = round(n_prompt / depth_s, 2)
    at_prompt = raw.save()

    n = o.decode_tokens

    free = ScriptedBackend(engine, answer_tokens=n, raw=raw)
    constrained = ScriptedBackend(engine, calls=1, call_tokens=n, answer_tokens=1, raw=raw)
    separate: dict[str, list[float]] = {"raw": [], "raw_no_sampling": []}
    resample_share: list[float] = []
    for r in range(o.repeats):
        log(f"decode {n} tokens, raw and app token by token (free, in a tool call), {r + 1}")
        raw.restore(at_prompt)
        separate["raw"].append(n / raw.generate(n))
        raw.restore(at_prompt)
        separate["raw_no_sampling"].append(n / raw.generate(n, sample=False))
        raw.restore(at_prompt)
        harness.run(free, REQUESTS[0], None)
        raw.restore(at_prompt)
        call = harness.run(constrained, REQUESTS[0], None).turns[0]
        resample_share.append(call.grammar_resamples / max(call.constrained_tokens, 1))
    raw_tps = 1 / median(free.between_s)
    app_tps = 1 / median(free.token_s)
    result["app_decode_received_tps"] = round(1 / median(free.received_s), 2)
    app_call_tps = 1 / median(constrained.token_s)
    result["decode_tokens"] = n
    result["raw_decode_tps"] = round(raw_tps, 2)
    result["raw_decode_separate_tps"] = round(median(separate["raw"]), 2)
    result["raw_decode_no_sampling_tps"] = round(median(separate["raw_no_sampling"]), 2)
    result["app_decode_tps"] = round(app_tps, 2)
    result["app_constrained_decode_tps"] = round(app_call_tps, 2)
    result["app_over_raw_decode"] = round(ratio(app_tps, raw_tps), 3)
    result["app_constrained_over_raw_decode"] = round(
        ratio(app_call_tps, 1 / median(constrained.between_s)), 3
    )
    result["grammar_resample_share"] = round(median(resample_share), 3)
    # A trained model's free choice inside a call is almost always valid: then the grammar only
    # costs one single-token check and an accept per token. Time that on the calls made above.
    check_us = float(engine.call("bench", "grammar_check_us", list(tools), constrained.texts))
    result["grammar_check_us_per_valid_token"] = round(check_us, 1)
    app_ms = 1000 / app_tps
    result["projected_valid_call_over_raw_decode"] = round(
        ratio(1000 / (app_ms + check_us / 1000), raw_tps), 3
    )

    _own_cpu(engine, harness, o, result, log)

    # 5. a three-step request (tool call, tool call, answer) against its new-token arithmetic:
    # each turn's new prompt tokens at raw prefill speed plus its generated tokens at raw decode
    # speed, both timed on the raw context right after the request (same depth, same token
    # counts), so a change in machine load between the two halves distorts the ratio less
    three = ScriptedBackend(engine, calls=2, call_tokens=32, answer_tokens=16)
    walls: list[float] = []
    sums: list[float] = []
    turns_seen: list[int] = []
    for r in range(o.repeats):
        log(f"three-step request {r + 1}/{o.repeats}")
        run = harness.run(three, REQUESTS[1], None)
        walls.append(run.wall_s)
        turns_seen.append(len(run.turns))
        arithmetic = 0.0
        for turn in run.turns:
            raw.restore(at_prompt)
            arithmetic += raw.prefill(turn.evaluated_tokens)
            arithmetic += raw.generate(turn.completion_tokens) if turn.completion_tokens else 0.0
        sums.append(arithmetic)
    result["three_step_turns"] = turns_seen
    result["three_step_wall_s"] = round(median(walls), 3)
    result["three_step_arithmetic_s"] = round(median(sums), 3)
    result["three_step_over_arithmetic"] = round(
        median([w / s for w, s in zip(walls, sums, strict=True)]), 3
    )


def _own_cpu(
    engine: EngineProcess,
    harness: AgentHarness,
    o: BenchOptions,
    result: dict[str, Any],
    log: Callable[[str], None],
) -> None:
    """The app's own CPU time per token, in milliseconds: in the worker, its thread's CPU time
    outside llama.cpp's decode and sampling calls (raw llama.cpp makes those too); in this
    process, all its CPU time while the pieces stream (receiving, parsing, the agent loop).
    CPU time, not wall time: what the app adds to each token whatever else loads the machine,
    and what it would add at GPU speed, where a token takes a few milliseconds.

    Measured at the pace this machine decodes, and again with each one-token decode made to
    last at least ``o.gpu_pace_ms`` (sleeping, no CPU) as a GPU's would: the worker sends the
    pieces of tokens that come that fast a few to a message (worker.py ``PieceSender``), so
    the cost per token differs. A decode slower than the pace here is left as it is: the
    achieved pace is reported (``ms_per_token``)."""
    n = o.decode_tokens
    pace_s = o.gpu_pace_ms / 1000
    free = ScriptedBackend(engine, answer_tokens=n, own_cpu=True)
    call = ScriptedBackend(engine, calls=1, call_tokens=n, answer_tokens=1, own_cpu=True)
    paced = ScriptedBackend(engine, answer_tokens=n, own_cpu=True, pace_s=pace_s)
    for r in range(o.repeats):
        log(f"the app's own CPU per token, free and in a tool call, {r + 1}/{o.repeats}")
        harness.run(free, REQUESTS[0], None)
        harness.run(call, REQUESTS[0], None)
        if pace_s > 0:
            harness.run(paced, REQUESTS[0], None)

    def per_token(b: ScriptedBackend) -> dict[str, float]:
        # turns of at least half the tokens asked: not the one-token answer after a call
        rows = [
            (w.seconds, a, w.tokens, m)
            for w, a, m in zip(b.worker_cpu, b.app_cpu, b.app_pieces, strict=True)
            if w.tokens >= n // 2
        ]
        worker = median([w / t for w, _, t, _ in rows]) * 1000 if rows else math.nan
        app = median([a / t for _, a, t, _ in rows]) * 1000 if rows else math.nan
        per_message = median([t / max(m, 1) for _, _, t, m in rows]) if rows else math.nan
        turns = [w for w in b.worker_cpu if w.tokens >= n // 2]
        return {
            "worker": round(worker, 4),
            "app": round(app, 4),
            "total": round(worker + app, 4),
            "tokens_per_message": round(per_message, 2),
            "ms_per_token": round(median([w.wall_seconds / w.tokens for w in turns]) * 1000, 2),
            # the decodes faster than the pace (padded to it): near 1, the figure is at that
            # pace; near 0, this machine decodes slower and the figure is at its own pace
            "padded_share": round(median([w.padded / w.tokens for w in turns]), 2),
        }

    result["own_cpu_ms_per_token"] = per_token(free)
    result["own_cpu_ms_per_token_in_call"] = per_token(call)
    if pace_s > 0:
        at_pace = per_token(paced)
        result["own_cpu_ms_per_token_at_gpu_pace"] = {
            **at_pace,
            "pace_ms": o.gpu_pace_ms,
            # the target's figure, where most decodes were fast enough to be paced
            "total_if_paced": at_pace["total"] if at_pace["padded_share"] >= 0.5 else None,
        }


def _depths(
    engine: EngineProcess, o: BenchOptions, result: dict[str, Any], log: Callable[[str], None]
) -> None:
    rows = []
    deep = RawContext(engine, max(o.depths) + 128, o.threads)
    try:
        for depth in o.depths:
            log(f"raw prefill and decode at {depth} tokens of context")
            deep.clear()
            prefill_s = deep.prefill(depth)
            decode_s = deep.generate(32)
            rows.append(
                {
                    "context": depth,
                    "prefill_tps": round(depth / prefill_s, 2),
                    "decode_tps": round(32 / decode_s, 2),
                }
            )
    finally:
        deep.close()
    result["depths"] = rows


def _thread_sweep(
    engine: EngineProcess, o: BenchOptions, result: dict[str, Any], log: Callable[[str], None]
) -> None:
    """Raw prefill (512 tokens) and decode (32) per thread count, interleaved, medians."""
    contexts = {n: RawContext(engine, 1024, n) for n in o.thread_counts}
    pp: dict[int, list[float]] = {n: [] for n in contexts}
    tg: dict[int, list[float]] = {n: [] for n in contexts}
    tokens = 512
    try:
        for r in range(o.repeats):
            log(f"threads {', '.join(map(str, contexts))}: raw prefill and decode, {r + 1}")
            for n, raw in contexts.items():
                raw.clear()
                pp[n].append(tokens / raw.prefill(tokens))
                tg[n].append(32 / raw.generate(32))
    finally:
        for raw in contexts.values():
            raw.close()
    result["threads_sweep"] = [
        {
            "threads": n,
            "prefill_tps": round(median(pp[n]), 2),
            "decode_tps": round(median(tg[n]), 2),
        }
        for n in contexts
    ]


TARGETS: list[tuple[str, str, str, float]] = [
    # (key, description, comparison, bound)
    ("ttft_warm_over_cold", "warm / cold time to first token", "<=", 0.10),
    ("new_process.ttft_disk_over_cold", "new process: prefix on disk / cold", "<=", 0.02),
    ("prefix_tokens_reevaluated_after_first_max", "prefix tokens re-evaluated", "<=", 0),
    ("app_over_raw_decode", "app / raw decode", ">=", 0.95),
    ("app_constrained_over_raw_decode", "app in a tool call / raw decode", ">=", 0.90),
    ("own_cpu_ms_per_token.total", "app's own CPU per token (ms)", "<=", 0.15),
    ("own_cpu_ms_per_token_at_gpu_pace.total_if_paced", "same, at a GPU's pace (ms)", "<=", 0.15),
    ("projected_valid_call_over_raw_decode", "same, for a model writing valid calls", ">=", 0.90),
    ("three_step_over_arithmetic", "3-step request / new-token arithmetic", "<=", 1.15),
    ("memory.peak_over_weights_kv_state", "peak RSS / (weights+KV+state)", "<=", 1.3),
    ("memory.rss_growth", "RSS growth over the requests", "<", 0.05),
]


def _lookup(result: Mapping[str, Any], key: str) -> Any:
    value: Any = result
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def _targets(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, _, op, bound in TARGETS:
        value = _lookup(result, key)
        ok = None
        if isinstance(value, int | float) and math.isfinite(value):
            ok = {"<=": value <= bound, ">=": value >= bound, "<": value < bound}[op]
        out[key] = {"value": value, "target": f"{op} {bound:g}", "ok": ok}
    return out


def format_table(result: Mapping[str, Any]) -> str:
    """The results as a plain-text table (the JSON has everything, this the headline)."""
    mem = result.get("memory", {})
    newp = result.get("new_process", {})
    paced = result.get("own_cpu_ms_per_token_at_gpu_pace", {})
    weights = mem.get("tensor_data_mib", mem.get("weights_mib", 0))
    expected = weights + mem.get("kv_cache_mib", 0) + mem.get("recurrent_state_mib", 0)
    rows: list[tuple[str, str]] = [
        ("model", f"{result['model']} ({result['model_size_mib']} MiB)"),
        ("threads / context", f"{result['threads']} / {result['n_ctx']}"),
        ("cpu", f"{result['cpu']} x{result['cpu_count']}"),
        (
            "load average start / end",
            f"{result['load_average_start']} / {result['load_average_end']}",
        ),
        (
            "engine worker: transport per streamed token / per call",
            f"{result.get('transport_us_per_token')} us / {result.get('transport_us_per_call')} us "
            f"(weight layout {result.get('weight_layout') or 'default'})",
        ),
        (
            "prefix (system + tools)",
            f"{result.get('prefix_tokens')} tokens, {result.get('tools')} tools",
        ),
        (
            "raw prefill",
            f"{result.get('raw_prefill_tps')} tok/s (pp{result.get('raw_prefill_tokens')})",
        ),
        ("raw prefill, whole request prompt", f"{result.get('raw_prompt_prefill_tps')} tok/s"),
        (
            "raw decode alone (sampling / llama_decode only)",
            f"{result.get('raw_decode_separate_tps')} / "
            f"{result.get('raw_decode_no_sampling_tps')} tok/s",
        ),
        (
            "decode token by token: raw / app agent path",
            f"{result.get('raw_decode_tps')} / {result.get('app_decode_tps')} tok/s",
        ),
        (
            "app's own CPU per token: worker + app = total (free / in a tool call)",
            "{} + {} = {} ms / {} + {} = {} ms".format(
                *(
                    result.get(k, {}).get(part)
                    for k in ("own_cpu_ms_per_token", "own_cpu_ms_per_token_in_call")
                    for part in ("worker", "app", "total")
                )
            ),
        ),
        (
            "same, at a GPU's pace: one-token decodes padded to "
            f"{paced.get('pace_ms')} ms ({paced.get('padded_share')} of them)",
            f"{paced.get('worker')} + {paced.get('app')} = {paced.get('total')} ms, "
            f"{paced.get('tokens_per_message')} tokens a message, "
            f"{paced.get('ms_per_token')} ms a token",
        ),
        (
            "app decode inside a tool call",
            f"{result.get('app_constrained_decode_tps')} tok/s "
            f"(grammar rejected {result.get('grammar_resample_share')} of free choices)",
        ),
        (
            "grammar check per valid token",
            f"{result.get('grammar_check_us_per_valid_token')} us "
            f"(projected valid-call decode / raw: "
            f"{result.get('projected_valid_call_over_raw_decode')})",
        ),
        (
            "time to first token cold / warm",
            f"{result.get('ttft_cold_s')} s / {result.get('ttft_warm_s')} s",
        ),
        (
            "new process: time to first token cold / prefix on disk",
            f"{newp.get('ttft_cold_s')} s / {newp.get('ttft_disk_s')} s",
        ),
        (
            "prefix state on disk: size, read+check, whole restore",
            f"{newp.get('file_mib')} MiB, {newp.get('read_verify_s')} s, "
            f"{newp.get('restore_s')} s (written in the background, "
            f"{newp.get('write_wait_after_request_s')} s left after the request)",
        ),
        (
            "new process: first request after import / a later request",
            f"{newp.get('ttft_first_after_import_s')} s / {newp.get('ttft_disk_s')} s "
            f"(prepared at import in {newp.get('prepare_at_import_s')} s)",
        ),
        (
            "new process: peak RSS cold / prefix on disk",
            f"{newp.get('peak_rss_cold_mib')} / {newp.get('peak_rss_disk_mib')} MiB",
        ),
        (
            "warm-up at start, then first request",
            f"{result.get('startup_warmup_s')} s, then "
            f"{result.get('ttft_first_request_after_warmup_s')} s",
        ),
        (
            "follow-up evaluated tokens (warm / none)",
            f"{[r['evaluated'] for r in result.get('follow_ups_with_warm', [])]} / "
            f"{[r['evaluated'] for r in result.get('follow_ups_without_warm', [])]}",
        ),
        (
            "3-step request wall / arithmetic",
            f"{result.get('three_step_wall_s')} s / {result.get('three_step_arithmetic_s')} s",
        ),
        (
            "peak RSS (app + worker - shared) / weights+KV+state",
            f"{mem.get('peak_rss_mib')} MiB ({mem.get('app_peak_rss_mib')} + "
            f"{mem.get('worker_peak_rss_mib')} - {mem.get('shared_file_pages_mib')}) / "
            f"{expected:.1f} MiB",
        ),
        (
            f"RSS after 1 / {mem.get('requests')} requests",
            f"{mem.get('rss_after_first_mib')} / {mem.get('rss_after_last_mib')} MiB",
        ),
    ]
    for depth in result.get("depths", []):
        rows.append(
            (
                f"raw at {depth['context']} context",
                f"prefill {depth['prefill_tps']} tok/s, decode {depth['decode_tps']} tok/s",
            )
        )
    for row in result.get("threads_sweep", []):
        rows.append(
            (
                f"raw with {row['threads']} thread(s)",
                f"prefill {row['prefill_tps']} tok/s, decode {row['decode_tps']} tok/s",
            )
        )
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines.append("")
    lines.append("targets:")
    only_new = bool(result.get("new_process_only"))
    for key, label, _, _ in TARGETS:
        if only_new and not key.startswith("new_process"):
            continue
        t = result["targets"][key]
        mark = {True: "ok  ", False: "MISS", None: "n/a "}[t["ok"]]
        lines.append(f"  [{mark}] {label:<40} {t['value']} (target {t['target']})")
    return "\n".join(lines)
