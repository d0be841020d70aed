"""Time the policy's argument scanner on large arguments: a 1 MB argument must take linear time.

    python tools/bench_scanner.py

The policy (agent/policy.py) and provenance (agent/provenance.py) run their patterns (web
addresses, e-mail addresses, account numbers) over every argument of every call, also of calls
from `botpsy mcp serve` clients. Each shape below is one that made a backtracking pattern scan
once per character: printed are the seconds for 40 kB and 1 MB side by side, and their ratio
(about 25 is linear; quadratic would be about 625). The old e-mail pattern is timed on 40 kB for
comparison.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402

from botpsy_desktop.agent.policy import Policy  # noqa: E402
from botpsy_desktop.agent.provenance import Provenance  # noqa: E402
from botpsy_desktop.core.tools import Effect, make_tool  # noqa: E402

OLD_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


class NoteArgs(BaseModel):
    """Send a note."""

    to: str
    body: str


def _send(args: NoteArgs) -> str:
    return "sent"


SHAPES = {
    "letters": lambda n: "a" * n,
    "dotted": lambda n: "a." * (n // 2),
    "at-runs": lambda n: "a@" * (n // 2),
    "digits": lambda n: "1 " * (n // 2),
    "url-like": lambda n: "a" * (n // 2) + ":" * (n // 2),
}


def scan(text: str) -> float:
    tool = make_tool(_send, effects={Effect.OUTBOUND}, name="send_note")
    provenance = Provenance(["hello"], [])
    arguments = {"to": text, "body": text}
    started = time.perf_counter()
    Policy().assess(tool, arguments)
    provenance.findings(arguments)
    return time.perf_counter() - started


def main() -> None:
    worst = 0.0
    for name, make in SHAPES.items():
        small, big = scan(make(40_000)), scan(make(1_000_000))
        worst = max(worst, big)
        print(f"{name:9s} 40 kB {small:.4f} s   1 MB {big:.4f} s   ratio {big / small:.0f}")
    started = time.perf_counter()
    OLD_EMAIL.search("a" * 40_000)
    print(f"old e-mail pattern, 40 kB of letters: {time.perf_counter() - started:.2f} s")
    print(f"slowest 1 MB argument (to and body): {worst:.3f} s")


if __name__ == "__main__":
    main()
