"""Soak bench: many requests through the whole app on a small model; memory and files per request.

    python tools/soak.py                         # 100 requests on the tiny test model
    python tools/soak.py --requests 500 --model FILE.gguf --json

It builds the app exactly as `botpsy` does (``build_app`` on a temporary profile, the real tool
registry, llama.cpp, no replay), sends the requests in one conversation (so the context budget
trims it as it grows), warms the next request the way the window does, and after each request
reads the process's resident memory (VmRSS) and open file descriptors from /proc/self. It prints
the first, last and largest values and the growth from first to last, or all of it as JSON.
Tools that would change something are denied; network tools point at a closed local port.
Not a timed test: a smoke test runs it with 5 requests so it keeps working.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from botpsy_desktop.agent.events import (  # noqa: E402
    Answer,
    ApprovalNeeded,
    ContextTrimmed,
    Error,
    TurnFinished,
)
from botpsy_desktop.app import build_app  # noqa: E402

CLOSED_PORT = "http://127.0.0.1:9"  # the discard port: nothing listens, refused at once


def tiny_long_context_gguf() -> Path:
    """The tiny test model (tests/helpers/models.py) declaring a 16384-token context.

    The `tiny` preset declares 4096 tokens, fewer than the schemas of all the app's tools
    (about 7200), and the engine never asks for more than a model declares. This variant
    differs only in that number; it is built once into the test model cache.
    """
    import dataclasses
    import hashlib

    from tests.helpers.models import fixture_cache_dir, synthetic_model_module, tools_cache_dir

    module = synthetic_model_module()
    presets = module.PRESETS
    presets.setdefault(
        "tiny-16k", dataclasses.replace(presets["tiny"], name="tiny-16k", context_length=16384)
    )
    digest = hashlib.sha256(Path(module.__file__).read_bytes())
    digest.update(module.installed_llama_cpp_version().encode())
    target = fixture_cache_dir() / f"tiny16k-qwen35-{digest.hexdigest()[:16]}.gguf"
    if not target.is_file():
        module.build_model("tiny-16k", target, "f16", tools_cache_dir(), 0)
    return Path(target)


def rss_kib() -> int:
    """Resident memory of this process in KiB (VmRSS in /proc/self/status)."""
    for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/status has no VmRSS line")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _profile(home: Path, n_ctx: int, max_tokens: int, threads: int | None) -> None:
    for folder in ("files", "music"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    (home / "files" / "notes.txt").write_text("milk, eggs, flour\n", encoding="utf-8")
    config = {
        "model": {
            "n_ctx": n_ctx,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": 1,
            "n_threads": threads,
            "n_threads_batch": threads,
        },
        "agent": {"max_steps": 2, "tool_timeout_s": 5},
        "files": {"roots": [str(home / "files")]},
        "music": {"folders": [str(home / "music")], "player": "none"},
        "weather": {
            "geocoding_url": f"{CLOSED_PORT}/v1/search",
            "forecast_url": f"{CLOSED_PORT}/v1/forecast",
            "timeout_s": 2,
        },
    }
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")


def _summary(values: list[int]) -> dict[str, float | int]:
    first, last = values[0], values[-1]
    return {
        "first": first,
        "last": last,
        "max": max(values),
        "growth_percent": round((last - first) / first * 100, 2) if first else 0.0,
    }


def run_soak(
    requests: int,
    model: Path,
    *,
    n_ctx: int = 16384,
    max_tokens: int = 16,
    threads: int | None = 2,
) -> dict[str, Any]:
    """Send ``requests`` requests through the app; per-request RSS (KiB) and open fds."""
    with tempfile.TemporaryDirectory(prefix="botpsy-soak-") as tmp:
        home = Path(tmp)
        _profile(home, n_ctx, max_tokens, threads)
        app = build_app(home)
        samples: list[dict[str, Any]] = []
        started = time.perf_counter()
        try:
            backend = app.backend(model=str(model))
            try:
                app.warm(backend)  # the system prompt and tools, as the window does at load
                conversation: str | None = None
                for i in range(requests):
                    session = app.session(backend, conversation)
                    conversation = session.conversation_id
                    t0 = time.perf_counter()
                    outcome, trimmed, prompt = "none", 0, 0
                    for event in session.run(f"Request {i}: what is on my list? Be brief."):
                        if isinstance(event, ApprovalNeeded):
                            event.request.deny(by="soak")
                        elif isinstance(event, TurnFinished):
                            prompt = event.stats.prompt_tokens
                        elif isinstance(event, ContextTrimmed):
                            trimmed = event.dropped_turns
                        elif isinstance(event, Answer):
                            outcome = "answer"
                        elif isinstance(event, Error):
                            outcome = event.kind
                    app.warm(backend, conversation)  # the follow-up, as the window does
                    samples.append(
                        {
                            "request": i + 1,
                            "rss_kib": rss_kib(),
                            "open_fds": open_fds(),
                            "seconds": round(time.perf_counter() - t0, 3),
                            "outcome": outcome,
                            "prompt_tokens": prompt,
                            "dropped_turns": trimmed,
                        }
                    )
            finally:
                backend.close()
        finally:
            app.close()
    outcomes: dict[str, int] = {}
    for s in samples:
        outcomes[s["outcome"]] = outcomes.get(s["outcome"], 0) + 1
    return {
        "requests": requests,
        "model": model.name,
        "n_ctx": n_ctx,
        "max_tokens": max_tokens,
        "wall_s": round(time.perf_counter() - started, 2),
        "rss_kib": _summary([s["rss_kib"] for s in samples]),
        "open_fds": _summary([s["open_fds"] for s in samples]),
        "outcomes": outcomes,
        "max_dropped_turns": max((s["dropped_turns"] for s in samples), default=0),
        "samples": samples,
    }


def _print(result: dict[str, Any]) -> None:
    rss, fds = result["rss_kib"], result["open_fds"]
    print(
        f"{result['requests']} requests on {result['model']} (n_ctx {result['n_ctx']}, "
        f"max_tokens {result['max_tokens']}) in {result['wall_s']} s; outcomes "
        f"{result['outcomes']}; up to {result['max_dropped_turns']} old turns left out"
    )
    print(
        f"RSS (MiB): first {rss['first'] / 1024:.1f}, last {rss['last'] / 1024:.1f}, "
        f"max {rss['max'] / 1024:.1f}, growth {rss['growth_percent']:+.2f}%"
    )
    print(
        f"open fds: first {fds['first']}, last {fds['last']}, max {fds['max']}, "
        f"growth {fds['growth_percent']:+.2f}%"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100)
    ap.add_argument("--model", type=Path, help="a GGUF (default: the tiny test model, 16k)")
    ap.add_argument("--n-ctx", type=int, default=16384)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = ap.parse_args(argv)
    if args.requests < 1:
        ap.error("--requests must be at least 1")
    model = args.model
    if model is None:
        model = tiny_long_context_gguf()
    result = run_soak(
        args.requests, model, n_ctx=args.n_ctx, max_tokens=args.max_tokens, threads=args.threads
    )
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        _print(result)
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
