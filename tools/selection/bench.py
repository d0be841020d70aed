"""What tool selection costs at startup and per request: import time, memory, scoring time.

    python tools/selection/bench.py [--runs 5]

Each figure comes from fresh interpreters, measured side by side in one run: the app's
composition root imported alone (the baseline), then the same plus the selection model loaded
and a selector built on the app's tools; the differences are the selection's cost. Then the
time to choose the tools of one request, over the held-out requests.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, resource, sys, time, tempfile
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
t0 = time.perf_counter()
import botpsy_desktop.app
t1 = time.perf_counter()
r1 = rss()
out = {"app_import_s": t1 - t0, "rss_app": r1}
if sys.argv[1] == "select":
    from botpsy_desktop.agent.selection import ToolSelector
    from botpsy_desktop.agent.selection_model import shipped_model
    from botpsy_desktop.app import build_app
    home = tempfile.mkdtemp()
    app = build_app(home)
    r2 = rss()
    t2 = time.perf_counter()
    shipped_model()
    selector = ToolSelector(app.registry)
    t3 = time.perf_counter()
    out.update(load_s=t3 - t2, rss_before=r2, rss_after=rss())
    app.close()
print(json.dumps(out))
"""


def probe(kind: str) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, kind],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    base, sel = [], []
    for _ in range(args.runs):  # interleaved, so load on the machine hits both alike
        base.append(probe("base"))
        sel.append(probe("select"))
    app_import = statistics.median(p["app_import_s"] for p in base)
    load = statistics.median(p["load_s"] for p in sel)
    delta = statistics.median(p["rss_after"] - p["rss_before"] for p in sel)
    rss_app = statistics.median(p["rss_before"] for p in sel)
    print(
        f"app import (baseline): {app_import * 1000:.0f} ms, "
        f"RSS after build_app {rss_app / 2**20:.1f} MiB"
    )
    print(
        f"selection model load + selector: {load * 1000:.1f} ms "
        f"({load / app_import:.3f} of the app's import), RSS +{delta / 2**20:.2f} MiB "
        f"({delta / rss_app:.3f} of the app's RSS)"
    )

    sys.path.insert(0, str(ROOT))
    from botpsy_desktop.agent.selection import ToolSelector
    from botpsy_desktop.eval.sandbox import sandbox_tools
    from botpsy_desktop.eval.selection import heldout_path, load_selection_set

    selector = ToolSelector(sandbox_tools())
    requests = load_selection_set(heldout_path())
    times = []
    for r in requests:
        t = time.perf_counter()
        selector.choose(r.text, r.history)
        times.append(time.perf_counter() - t)
    times.sort()
    print(
        f"choosing one request's tools: median {statistics.median(times) * 1000:.2f} ms, "
        f"p90 {times[int(0.9 * len(times))] * 1000:.2f} ms over {len(times)} held-out requests"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
