"""One request in a fresh process, for the bench's "new process, prefix on disk" rows.

    python -m botpsy_desktop.llm.bench.child SPEC.json

SPEC: {"model", "settings" (ModelSettings fields), "store", "bound_mb", "system", "tools",
"request"}. Loads the model in an engine worker (as the app does) with a prefix store in
``store``, runs one request through it and prints one line of JSON: load and first-token times,
what was restored or evaluated, the time to finish writing a new prefix state, and peak memory
(this process's and its worker's).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.llm.types import Completion, PromptProgress


def _peak_rss_kib() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run(spec: dict[str, Any]) -> dict[str, Any]:
    from botpsy_desktop.llm.engines.engine_process import EngineProcess

    settings = ModelSettings.model_validate(spec["settings"])
    store = Path(spec["store"])
    started = time.perf_counter()
    engine = EngineProcess(
        settings, spec["model"], prefix_cache_dir=store, prefix_cache_mb=int(spec["bound_mb"])
    )
    load_s = time.perf_counter() - started
    try:
        messages = [
            {"role": "system", "content": spec["system"]},
            {"role": "user", "content": spec["request"]},
        ]
        done: Completion | None = None
        first = None
        started = time.perf_counter()
        for item in engine.complete(messages, spec["tools"], enable_thinking=False, max_tokens=2):
            # the first text (or the end), not a progress report of the prompt's evaluation
            if first is None and not isinstance(item, PromptProgress):
                first = time.perf_counter() - started
            if isinstance(item, Completion):
                done = item
        request_s = time.perf_counter() - started
        if done is None:
            raise RuntimeError("the request produced no completion")
        started = time.perf_counter()
        engine.flush_prefix_writes()
        write_wait_s = time.perf_counter() - started
        state = engine.state()
        memory = engine.call("bench", "memory")
        files = sorted((store / "prefix-states").glob("*.prefix"))
        st = done.stats
        own = _peak_rss_kib()
        return {
            "load_s": round(load_s, 3),
            "ttft_s": round(first or 0.0, 4),
            "request_s": round(request_s, 3),
            "prompt_tokens": st.prompt_tokens,
            "reused_tokens": st.reused_tokens,
            "evaluated_tokens": st.evaluated_tokens,
            "disk_restores": state["disk_restores"],
            "disk_saves": state["disk_saves"],
            "disk_read_verify_s": round(state["last_disk_read_s"], 4),
            "disk_restore_s": round(state["last_disk_restore_s"], 4),
            "write_wait_after_request_s": round(write_wait_s, 3),
            "file_bytes": sum(f.stat().st_size for f in files),
            "files": len(files),
            "peak_rss_kib": (own or 0) + int(memory["peak"]) // 1024,
        }
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text(encoding="utf-8"))
    print(json.dumps(run(spec)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
