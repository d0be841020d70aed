"""`botpsy bench --device`: the same model on the CPU and on the GPU backend side by side in one
run: raw llama.cpp against the app through its worker on each device, prefill, decode, time to
first token cold and warm, and whether the devices write the same tokens at temperature 0.

Each device gets an engine worker of its own (``model.device`` cpu, auto or vulkan; where the
GPU backend is, ``model.gpu_backend_dir``), one after the other, with the same options. A
software device (Mesa's lavapipe, "llvmpipe": Vulkan on the CPU) proves the path and the tokens;
its speed says nothing of a GPU's, and the table says so.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.llm.backend import Message
from botpsy_desktop.llm.bench.common import REQUESTS, MiB, median, ratio
from botpsy_desktop.llm.bench.measure import (
    AgentHarness,
    BenchOptions,
    RawContext,
    ScriptedBackend,
    _cpu_name,
)
from botpsy_desktop.llm.engines.engine_process import EngineProcess

DEVICES = ("cpu", "auto", "vulkan")
"""What ``--device`` names: ``model.device`` values (auto: the GPU the app would choose)."""

SOFTWARE = ("llvmpipe", "lavapipe", "softpipe", "swiftshader", "basic render driver")
"""Words in a device's name that mark a software renderer (the CPU behind a GPU's API)."""


def is_software(description: str) -> bool:
    low = description.lower()
    return any(word in low for word in SOFTWARE)


def _one_device(
    device: str,
    model: Path,
    harness: AgentHarness,
    o: BenchOptions,
    log: Callable[[str], None],
) -> dict[str, Any]:
    settings = ModelSettings(
        n_ctx=o.n_ctx,
        n_threads=o.threads,
        n_threads_batch=o.threads,
        seed=o.seed,
        max_tokens=max(o.decode_tokens, 64),
        device=device,
        gpu_backend_dir=o.gpu_backend_dir,
    )
    started = time.perf_counter()
    engine = EngineProcess(settings, model)
    row: dict[str, Any] = {"setting": device, "load_s": round(time.perf_counter() - started, 2)}
    try:
        placed = engine.device
        on_gpu = placed.get("device", "cpu") != "cpu"
        name = str(placed.get("description") or placed.get("device")) if on_gpu else "CPU"
        row.update(
            name=name,
            on_gpu=on_gpu,
            software=on_gpu and is_software(name),
            layers=f"{placed.get('layers', 0)} of {placed.get('of_layers', 0)}",
            reason=placed.get("reason", ""),
        )
        system: list[Message] = [{"role": "system", "content": harness.system_prompt}]
        tools = harness.tools
        request: list[Message] = [*system, {"role": "user", "content": REQUESTS[0]}]

        # time to first token: a cold engine (the whole prompt) against a warm one, in pairs
        answer = ScriptedBackend(engine, answer_tokens=2)
        cold: list[float] = []
        warm: list[float] = []
        evaluated: list[int] = []
        for r in range(o.repeats):
            log(f"{name}: time to first token, pair {r + 1}/{o.repeats}")
            engine.reset()
            run = harness.run(answer, REQUESTS[0], None)
            cold.append(answer.first_text_s[-1])
            evaluated.append(run.turns[0].evaluated_tokens if run.turns else 0)
            harness.run(answer, REQUESTS[1], None)
            warm.append(answer.first_text_s[-1])
        row["ttft_cold_s"] = round(median(cold), 3)
        row["ttft_warm_s"] = round(median(warm), 3)
        row["ttft_warm_over_cold"] = round(ratio(median(warm), median(cold)), 4)
        row["cold_prompt_tokens"] = int(median(evaluated))
        row["app_prefill_tps"] = round(ratio(median(evaluated), median(cold)), 1)

        raw = RawContext(engine, o.n_ctx, o.threads)
        try:
            pp = min(o.prefill_tokens, settings.n_batch)
            prefill: list[float] = []
            for r in range(o.repeats):
                log(f"{name}: raw prefill pp{pp}, {r + 1}/{o.repeats}")
                raw.clear()
                prefill.append(pp / raw.prefill(pp))
            row["raw_prefill_tokens"] = pp
            row["raw_prefill_tps"] = round(median(prefill), 1)

            # the request's prompt once; the tokens at temperature 0 right after it (from its
            # logits); then decode, raw and app token by token at that depth (measure.py)
            raw.clear()
            n_prompt, seconds = raw.prefill_prompt(request, tools)
            row["raw_prompt_prefill_tps"] = round(n_prompt / seconds, 1)
            at_prompt = raw.save()
            log(f"{name}: {o.decode_tokens} tokens at temperature 0")
            row["greedy_tokens"], row["greedy_top5"] = raw.greedy(o.decode_tokens)
            free = ScriptedBackend(engine, answer_tokens=o.decode_tokens, raw=raw)
            for r in range(o.repeats):
                log(f"{name}: decode {o.decode_tokens} tokens, raw and app, {r + 1}/{o.repeats}")
                raw.restore(at_prompt)
                harness.run(free, REQUESTS[0], None)
            raw_tps = 1 / median(free.between_s) if free.between_s else math.nan
            app_tps = 1 / median(free.token_s) if free.token_s else math.nan
            row["raw_decode_tps"] = round(raw_tps, 2)
            row["app_decode_tps"] = round(app_tps, 2)
            row["app_over_raw_decode"] = round(ratio(app_tps, raw_tps), 3)
            row["decode_tokens_timed"] = len(free.token_s)
        finally:
            raw.close()
        memory = engine.call("bench", "memory")
        row["worker_peak_rss_mib"] = round(int(memory["peak"]) / MiB, 1)
    finally:
        engine.close()
    return row


def run_device_bench(
    model: Path,
    harness: AgentHarness,
    options: BenchOptions,
    *,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Each of ``options.devices`` in turn, with the same options; the results as a dict."""
    o = options
    result: dict[str, Any] = {
        "model": model.name,
        "model_size_mib": round(model.stat().st_size / MiB, 1),
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "threads": o.threads,
        "n_ctx": o.n_ctx,
        "repeats": o.repeats,
        "tools": len(harness.tools),
        "load_average_start": [round(x, 2) for x in os.getloadavg()],
        "devices": [_one_device(d, model, harness, o, log) for d in o.devices],
    }
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    rows = result["devices"]
    first = rows[0]["greedy_tokens"] if rows else []
    result["same_tokens_at_temperature_0"] = all(r["greedy_tokens"] == first for r in rows)
    for r in rows[1:]:
        diverged = [
            i for i, (a, b) in enumerate(zip(first, r["greedy_tokens"], strict=False)) if a != b
        ]
        r["first_token_unlike_first_device"] = diverged[0] if diverged else None
        r.update(_logits_against(rows[0]["greedy_top5"], r["greedy_top5"]))
    targets: dict[str, dict[str, Any]] = {
        "same_tokens_at_temperature_0": {
            "value": result["same_tokens_at_temperature_0"],
            "target": "== true",
            "ok": result["same_tokens_at_temperature_0"],
        }
    }
    for r in rows:
        value = r.get("app_over_raw_decode")
        finite = isinstance(value, float) and math.isfinite(value)
        targets[f"{r['setting']}.app_over_raw_decode"] = {
            "value": value,
            "target": ">= 0.95",
            # a software device's speed is not a GPU's: shown, not judged
            "ok": None if r.get("software") or not finite else value >= 0.95,
        }
    result["targets"] = targets
    return result


def _logits_against(
    base: Sequence[Sequence[tuple[int, float]]], other: Sequence[Sequence[tuple[int, float]]]
) -> dict[str, Any]:
    """How close a device's logits are to the first device's over the greedy steps: the steps
    whose five most likely tokens are the same, in the same order, and the largest difference
    of a logit both list (in logit units)."""
    same = 0
    diff = 0.0
    for a, b in zip(base, other, strict=False):
        same += [i for i, _ in a] == [i for i, _ in b]
        theirs = dict(b)
        for token, logit in a:
            if token in theirs:
                diff = max(diff, abs(logit - theirs[token]))
    return {"top5_same_steps": same, "max_logit_diff": round(diff, 5)}


def format_device_table(result: Mapping[str, Any]) -> str:
    """The devices side by side, one column each; software devices marked."""
    rows: Sequence[Mapping[str, Any]] = result["devices"]

    def label(r: Mapping[str, Any]) -> str:
        return f"{r['name']} (software)" if r.get("software") else str(r["name"])

    lines: list[tuple[str, list[str]]] = [
        ("model.device", [str(r["setting"]) for r in rows]),
        ("runs on", [label(r) for r in rows]),
        ("layers offloaded", [r["layers"] if r.get("on_gpu") else "-" for r in rows]),
        (
            "raw prefill",
            [f"{r['raw_prefill_tps']} tok/s (pp{r['raw_prefill_tokens']})" for r in rows],
        ),
        ("raw prefill, request prompt", [f"{r['raw_prompt_prefill_tps']} tok/s" for r in rows]),
        (
            "app prefill, cold request",
            [f"{r['app_prefill_tps']} tok/s ({r['cold_prompt_tokens']} tokens)" for r in rows],
        ),
        (
            "time to first token cold / warm",
            [f"{r['ttft_cold_s']} / {r['ttft_warm_s']} s" for r in rows],
        ),
        (
            "raw decode / app decode",
            [f"{r['raw_decode_tps']} / {r['app_decode_tps']} tok/s" for r in rows],
        ),
        ("app / raw decode (>= 0.95)", [str(r["app_over_raw_decode"]) for r in rows]),
        (
            f"{len(rows[0]['greedy_tokens']) if rows else 0} tokens at temperature 0",
            [
                "same" if r["greedy_tokens"] == rows[0]["greedy_tokens"] else "DIFFERENT"
                for r in rows
            ],
        ),
        (
            "steps with the same top 5 / largest logit difference",
            ["-"]
            + [
                f"{r['top5_same_steps']} of {len(r['greedy_top5'])} / {r['max_logit_diff']}"
                for r in rows[1:]
            ],
        ),
        ("worker peak RSS", [f"{r['worker_peak_rss_mib']} MiB" for r in rows]),
    ]
    width = max(len(name) for name, _ in lines) + 2
    cols = [max(len(v[i]) for _, v in lines) + 2 for i in range(len(rows))]
    out = [
        f"model {result['model']} ({result['model_size_mib']} MiB), {result['tools']} tools, "
        f"{result['threads']} threads, {result['n_ctx']}-token context, cpu {result['cpu']} "
        f"x{result['cpu_count']}, load average {result['load_average_start']} / "
        f"{result['load_average_end']}"
    ]
    for name, values in lines:
        out.append(
            name.ljust(width) + "".join(v.ljust(c) for v, c in zip(values, cols, strict=True))
        )
    for r in rows:
        if not r.get("on_gpu") and r["setting"] != "cpu":
            out.append(f"{r['setting']}: no GPU was used: {r['reason']}")
        if r.get("software"):
            out.append(
                f"{r['name']} is a software device (the CPU behind the GPU API): its figures "
                "prove the path and the tokens, not a GPU's speed."
            )
    out.append(
        "same tokens at temperature 0 on every device: "
        + ("yes" if result["same_tokens_at_temperature_0"] else "NO")
    )
    return "\n".join(out)
