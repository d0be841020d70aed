"""`botpsy eval` from a checkout, on a throwaway profile: tool-calling accuracy of any GGUF.

    python tools/eval.py --model FILE.gguf                    # every shipped case, a table
    python tools/eval.py --model FILE.gguf --json out.json    # and the JSON report
    python tools/eval.py --replay-oracle                      # the cases and scorer: 100%
    python tools/eval.py --compare a.json b.json              # what changed between two runs
    python tools/eval.py --fidelity --model FILE.gguf         # prompt tokens vs the template

Every option is `botpsy eval`'s (`botpsy eval --help`; docs/EVALUATION.md). Each case runs on
its own sandbox profile; this script also gives the command a temporary --home, so nothing of
yours is read or changed (pass --home DIR first to use a profile's model settings).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop import cli  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return cli.main(["eval", "--help"])
    if args[:1] == ["--home"] and len(args) > 1:
        return cli.main(["--home", args[1], "eval", *args[2:]])
    with tempfile.TemporaryDirectory(prefix="botpsy-eval-home-") as home:
        return cli.main(["--home", home, "eval", *args])


if __name__ == "__main__":
    sys.exit(main())
