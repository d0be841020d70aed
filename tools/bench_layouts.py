"""Prefill and decode speed with each CPU weight layout (llm/models/cpu_layout.py), side by side.

    python tools/bench_layouts.py [--model FILE.gguf] [--rounds 3] [--threads 2]

Each layout runs in its own process, round after round in turn (so a busy machine slows all of
them alike), and a layout that crashes llama.cpp (AMX on CPUs that have it) is reported as such
instead of ending the run. Prints the medians and each layout's ratio to "plain". Without
--model it uses the BotPsy-shaped random-weight Q4_K_M of tools/synthetic_models.py (same
shapes and quantization as the release, so the same speed).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.llm.engines.engine import LlamaBackend
path, layout, threads, n_prompt, n_decode = sys.argv[1:6]
settings = ModelSettings(n_ctx=2048, n_threads=int(threads), n_threads_batch=int(threads),
                         state_checkpoints=0)
backend = LlamaBackend(settings, path, layout=layout)
llm = backend._llama
text = "The quick brown fox jumps over the lazy dog while the assistant files reports. " * 64
tokens = backend.tokenize(text)[: int(n_prompt)]
t = time.perf_counter(); llm.eval(tokens); prefill = time.perf_counter() - t
t = time.perf_counter()
for token in tokens[: int(n_decode)]:
    llm.eval([token])
decode = time.perf_counter() - t
print(json.dumps({"layout": backend.layout.layout, "repacked": backend.layout.repacked,
                  "prefill": len(tokens) / prefill, "decode": int(n_decode) / decode}))
"""


def run_one(model: Path, layout: str, threads: int, n_prompt: int, n_decode: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(model), layout, str(threads), str(n_prompt),
         str(n_decode)],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        how = (
            signal.Signals(-proc.returncode).name
            if proc.returncode < 0
            else f"exit {proc.returncode}"
        )
        return {"layout": layout, "crashed": how}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--decode-tokens", type=int, default=64)
    parser.add_argument("--layouts", default="plain,repack,extra")
    args = parser.parse_args(argv)
    model = args.model
    if model is None:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from synthetic_models import synthetic_botpsy

        model = synthetic_botpsy("q4_k_m")
    from botpsy_desktop.llm.engines.engine import system_info

    print(f"model: {model}\nllama.cpp: {system_info()}", flush=True)
    layouts = args.layouts.split(",")
    rows: dict[str, list[dict]] = {name: [] for name in layouts}
    for r in range(args.rounds):
        for name in layouts:
            row = run_one(model, name, args.threads, args.prompt_tokens, args.decode_tokens)
            rows[name].append(row)
            print(f"round {r + 1} {name}: {json.dumps(row)}", flush=True)
    base = rows.get("plain", [])
    base_ok = [x for x in base if "crashed" not in x]
    base_prefill = statistics.median(x["prefill"] for x in base_ok) if base_ok else None
    base_decode = statistics.median(x["decode"] for x in base_ok) if base_ok else None
    print("\nlayout   repacked  prefill tok/s (x plain)   decode tok/s (x plain)")
    for name in layouts:
        ok = [x for x in rows[name] if "crashed" not in x]
        if not ok:
            print(f"{name:8} crashed every time ({rows[name][0]['crashed']})")
            continue
        prefill = statistics.median(x["prefill"] for x in ok)
        decode = statistics.median(x["decode"] for x in ok)
        pr = f"{prefill / base_prefill:.2f}" if base_prefill else "-"
        dr = f"{decode / base_decode:.2f}" if base_decode else "-"
        print(
            f"{name:8} {ok[0]['repacked']:8}  {prefill:8.1f} ({pr})"
            f"            {decode:8.1f} ({dr})"
            + (
                f"  crashed {len(rows[name]) - len(ok)} of {len(rows[name])}"
                if len(ok) < len(rows[name])
                else ""
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
