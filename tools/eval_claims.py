"""Print the claims checker's precision and recall per language (botpsy_desktop/eval/claims).

    python tools/eval_claims.py [--misses]
"""

from __future__ import annotations

import sys

from botpsy_desktop.eval.claims_eval import load, measure, misses, table


def main(argv: list[str]) -> int:
    cases = load()
    print("\n".join(table(measure(cases))))
    if "--misses" in argv:
        print("\n".join(misses(cases)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
