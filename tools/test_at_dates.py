"""Run the clock-sensitive tests at the dates and in the time zones that break naive date code,
each under libfaketime, and say which date failed.

    python tools/test_at_dates.py              # every date below (CI runs this)
    python tools/test_at_dates.py --list       # the dates, nothing run
    python tools/test_at_dates.py --only dst   # the dates whose label contains "dst"
    python tools/test_at_dates.py -- -x -k routines   # extra arguments go to pytest

The tests are those marked ``clock`` (tests/conftest.py), less those that run a model (``-m
"clock and not model"``: they add minutes at every date and read no date). They pin their own
clocks where they can (the app's injected ``now``); libfaketime moves
everything else, the CLI processes, the daemon and the servers the tests start included, so a
test that still read the machine's date would show it here. The shift is an offset from the real
time (``FAKETIME=+N`` seconds), the same in every process, and the clock goes on running from
the chosen moment; the monotonic clock is left alone (timeouts and sleeps stay real).

libfaketime comes from PyPI's ``libfaketime`` package (a test extra), which builds a current
libfaketime: Debian 12's 0.9.10 makes Python 3.11's ``time.sleep`` fail with EINVAL when the
monotonic clock is left alone, and hangs every timed wait when it is faked.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Moment:
    label: str
    zone: str
    local: str
    """Wall-clock time in ``zone``, ``YYYY-MM-DD HH:MM``."""

    def epoch(self) -> float:
        naive = datetime.strptime(self.local, "%Y-%m-%d %H:%M")
        return naive.replace(tzinfo=ZoneInfo(self.zone)).timestamp()


MOMENTS = (
    Moment("a Friday evening (tomorrow is Saturday)", "Europe/Paris", "2026-12-04 21:30"),
    Moment(
        "a Saturday evening, the night the EU dst ends (03:00 -> 02:00)",
        "Europe/Paris",
        "2026-10-24 23:30",
    ),
    Moment(
        "the last day of a month, a Saturday, the night the US dst ends",
        "America/New_York",
        "2026-10-31 23:30",
    ),
    Moment("29 February, late evening", "America/Los_Angeles", "2028-02-29 22:00"),
    Moment("31 December 23:59", "Europe/Paris", "2026-12-31 23:59"),
    Moment("far from UTC (UTC+14, a day ahead of UTC)", "Pacific/Kiritimati", "2026-12-05 00:30"),
    Moment(
        "a Saturday evening, the night the EU dst starts (02:00 -> 03:00)",
        "Europe/Paris",
        "2027-03-27 23:30",
    ),
    Moment("the night the US dst starts (02:00 -> 03:00)", "America/New_York", "2027-03-13 23:30"),
)


NOT_UNDER_FAKETIME = ("tests/ui", "tests/cli/test_caldav_bounds.py")
"""Clock tests left out of these runs, for now: the window's tests (Qt crashed with a
segmentation fault under libfaketime, not yet understood) and the CalDAV expansion bound (it
failed under libfaketime on a loaded machine, not yet understood); the plain suite runs them."""


def faketime_environment() -> dict[str, str]:
    """LD_PRELOAD and friends for libfaketime, from PyPI's libfaketime package."""
    try:
        import libfaketime
    except ImportError:
        sys.exit(
            "test_at_dates: the libfaketime package is missing; install the test extra "
            '(pip install -e ".[test]")'
        )
    _, env = libfaketime.get_reload_information()
    env = dict(env)
    env["DONT_FAKE_MONOTONIC"] = "1"  # this libfaketime's name for it
    env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"  # and the older one's
    return env


def run(moment: Moment, pytest_args: list[str]) -> tuple[int, float]:
    env = dict(os.environ)
    env.update(faketime_environment())
    offset = round(moment.epoch() - time.time())
    env["FAKETIME"] = f"{offset:+d}"
    env["TZ"] = moment.zone
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "clock and not model",
        "-q",
        "-p",
        "no:cacheprovider",
        *(f"--ignore={path}" for path in NOT_UNDER_FAKETIME),
    ]
    started = time.monotonic()
    done = subprocess.run([*command, *pytest_args], cwd=ROOT, env=env, check=False)
    return done.returncode, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print the dates and stop")
    parser.add_argument("--only", default="", help="run the dates whose label holds this text")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no further date once this many seconds have passed (0: no limit); the "
        "dates left out are named, and the run still fails if any date that ran failed",
    )
    parser.add_argument(
        "--rotate",
        action="store_true",
        help="start at a different date each day (with --budget-s, CI runs every date over a "
        "few days instead of the first ones every time)",
    )
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = parser.parse_args(argv)
    chosen = [m for m in MOMENTS if args.only.lower() in m.label.lower()]
    if args.rotate and chosen:
        first = datetime.now().date().toordinal() % len(chosen)
        chosen = chosen[first:] + chosen[:first]
    if args.list or not chosen:
        for m in MOMENTS:
            print(f"{m.local} {m.zone:<20} {m.label}")
        return 0 if chosen else 2
    results = []
    skipped: list[Moment] = []
    started = time.monotonic()
    for moment in chosen:
        if args.budget_s and time.monotonic() - started > args.budget_s:
            skipped.append(moment)
            continue
        print(f"== {moment.label}: {moment.local} {moment.zone}", flush=True)
        code, took = run(moment, args.pytest_args)
        results.append((moment, code, took))
    print("\nclock-sensitive tests at each date:")
    for moment, code, took in results:
        status = "ok  " if code == 0 else "FAIL"
        print(f"  {status} {moment.local} {moment.zone:<20} {moment.label} ({took:.0f} s)")
    for moment in skipped:
        print(f"  NOT RUN {moment.local} {moment.zone:<20} {moment.label} (past --budget-s)")
    failed = [m for m, code, _ in results if code != 0]
    print(f"dates: {len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
