"""One request in a fresh process, for the bench's "new process, prefix on disk" rows.

    python -m botpsy_desktop.llm.bench_child SPEC.json

SPEC: {"model", "settings" (ModelSettings fields), "store", "bound_mb", "system", "tools",
"request"}. Loads the model with a prefix store in ``store``, runs one request through the
engine and prints one line of JSON: load and first-token times, what was restored or
evaluated, the time to finish writing a new prefix state, and peak memory.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.llm.prefix_store import PrefixStore
from botpsy_desktop.llm.types import Completion


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
    from botpsy_desktop.llm.engine import LlamaBackend

    settings = ModelSettings.model_validate(spec["settings"])
    store = PrefixStore(spec["store"], bound_bytes=int(spec["bound_mb"]) * 2**20)
    started = time.perf_counter()
    engine = LlamaBackend(settings, spec["model"], prefix_store=store)
    load_s = time.perf_counter() - started
    try:
        messages = [
            {"role": "system", "content": spec["system"]},
            {"role": "user", "content": spec["request"]},
        ]
        done: Completion | None = None
        started = time.perf_counter()
        for item in engine.complete(messages, spec["tools"], enable_thinking=False, max_tokens=2):
            if isinstance(item, Completion):
                done = item
        request_s = time.perf_counter() - started
        if done is None:
            raise RuntimeError("the request produced no completion")
        started = time.perf_counter()
        engine.flush_prefix_writes()
        write_wait_s = time.perf_counter() - started
        files = sorted(Path(spec["store"]).glob("*.prefix"))
        st = done.stats
        return {
            "load_s": round(load_s, 3),
            "ttft_s": round(st.time_to_first_token_s, 4),
            "request_s": round(request_s, 3),
            "prompt_tokens": st.prompt_tokens,
            "reused_tokens": st.reused_tokens,
            "evaluated_tokens": st.evaluated_tokens,
            "disk_restores": engine.disk_restores,
            "disk_saves": engine.disk_saves,
            "disk_read_verify_s": round(engine.last_disk_read_s, 4),
            "disk_restore_s": round(engine.last_disk_restore_s, 4),
            "write_wait_after_request_s": round(write_wait_s, 3),
            "discarded": store.discarded,
            "file_bytes": sum(f.stat().st_size for f in files),
            "files": len(files),
            "peak_rss_kib": _peak_rss_kib(),
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
