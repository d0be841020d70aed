"""Print the claims checker's precision and recall per language (botpsy_desktop/eval/claims):
on the development set and on the held-out set.

    python tools/eval_claims.py [--misses]
"""

from __future__ import annotations

import sys

from botpsy_desktop.eval.claims_eval import CLAIMS_SET, HELD_OUT, load, measure, misses, table


def main(argv: list[str]) -> int:
    for name, path in (("development set", CLAIMS_SET), ("held-out set", HELD_OUT)):
        cases = load(path)
        print(f"== {name}: {path.name}, {len(cases)} answers")
        print("\n".join(table(measure(cases))))
        if "--misses" in argv:
            print("\n".join(misses(cases)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
