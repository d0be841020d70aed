"""`botpsy bench` on a BotPsy-shaped random-weight model (built once), or on any GGUF.

    python tools/bench.py                                  # synthetic BotPsy Q4_K_M, 2 threads
    python tools/bench.py --quant q8_0 --depths 1024,4096,16384
    python tools/bench.py --model FILE.gguf --threads 4 --json
    python tools/bench.py --remote [--model FILE.gguf]     # through a llama-server on 127.0.0.1
    python tools/bench.py --device [cpu,auto]              # the CPU and the GPU side by side

Every other option is `botpsy bench`'s (`botpsy bench --help`). Prints a table and JSON: raw
llama.cpp prefill and decode through the low-level API against the app's agent path, time to
first token cold and warm, tokens re-evaluated per request, a three-step request against its
new-token arithmetic, peak RSS and RSS growth; with `--device`, the CPU and the GPU backend the
app would choose, one after the other in one run (llm/bench/device.py). It runs with a
temporary profile (`--home`), so nothing of yours is read or changed. docs/PERFORMANCE.md has
the figures for this machine class.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from synthetic_models import synthetic_botpsy  # noqa: E402

from botpsy_desktop import cli  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, add_help=False)
    ap.add_argument("--quant", choices=("q4_k_m", "q8_0"), default="q4_k_m")
    ap.add_argument("--help", "-h", action="store_true")
    ap.add_argument("--remote", action="store_true", help="tools/bench_remote.py's measurements")
    known, rest = ap.parse_known_args(argv)
    if known.remote:
        import bench_remote

        return int(bench_remote.main([*rest, *(["--help"] if known.help else [])]))
    if known.help:
        print(__doc__)
        return cli.main(["bench", "--help"])
    if not any(a == "--model" or a.startswith("--model=") for a in rest):
        rest = ["--model", str(synthetic_botpsy(known.quant)), *rest]
    with tempfile.TemporaryDirectory(prefix="botpsy-bench-home-") as home:
        return cli.main(["--home", home, "bench", *rest])


if __name__ == "__main__":
    sys.exit(main())
