"""Measure address-book look-ups on a generated book of 20,000 cards (no network, no model).

    PYTHONPATH=. python tools/bench_contacts.py [--cards 20000]

Writes one .vcf file of generated cards into a temporary profile, syncs it through the app
``build_app`` makes, then times the look-ups a request makes: find_contact by a full name, a
part of a name, an accent-folded name, an email and a phone number, and the gate's checks of a
recipient (who holds the address, which names the typed request holds, look-alikes). Prints the
median and worst of each over repeated runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GIVEN = [
    "Ana",
    "Marco",
    "Zoé",
    "José",
    "Léa",
    "Jürgen",
    "Ines",
    "Tom",
    "Sara",
    "Hugo",
    "Emma",
    "Noah",
    "Lina",
    "Omar",
    "Yuki",
    "Chen",
]
FAMILY = [
    "López",
    "Rossi",
    "Martin",
    "Silva",
    "Müller",
    "Dubois",
    "Nakamura",
    "Wang",
    "Smith",
    "García",
    "Costa",
    "Novak",
]


def cards(n: int, seed: int = 7) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        given, family = rng.choice(GIVEN), rng.choice(FAMILY)
        out.append(
            "BEGIN:VCARD\r\nVERSION:3.0\r\n"
            f"UID:gen-{i}\r\nFN:{given} {family} {i}\r\nN:{family} {i};{given};;;\r\n"
            f"EMAIL:{given.lower()}.{i}@example{i % 50}.org\r\n"
            f"TEL:+33 6 {i:08d}\r\nORG:Company {i % 300}\r\nEND:VCARD\r\n"
        )
    return "".join(out)


def timed(fn: Callable[[], Any], runs: int) -> tuple[float, float]:
    took = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        took.append((time.perf_counter() - start) * 1000)
    return statistics.median(took), max(took)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cards", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    from botpsy_desktop.app import build_app

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "profile"
        (home / "config").mkdir(parents=True)
        book = Path(tmp) / "all.vcf"
        book.write_text(cards(args.cards), encoding="utf-8", newline="")
        config = {
            "files": {"roots": [tmp]},
            "music": {"folders": [], "player": "none"},
            "contacts": {"files": [str(book)]},
        }
        (home / "config" / "config.json").write_text(json.dumps(config))
        app = build_app(home)
        try:
            service = app.contacts
            assert service is not None
            start = time.perf_counter()
            [report] = service.sync()
            print(
                f"sync of {args.cards:,} cards: {time.perf_counter() - start:.1f} s "
                f"({report.written:,} written, {len(report.problems)} skipped)"
            )
            start = time.perf_counter()
            service.sync()
            print(f"sync again, unchanged: {(time.perf_counter() - start) * 1000:.0f} ms")
            find = app.registry.get("find_contact")
            assert find is not None
            gate = app.gate.people
            assert gate is not None
            checks: list[tuple[str, Callable[[], Any]]] = [
                ("find_contact full name", lambda: service.find("Ana López 1234")),
                ("find_contact part of a name", lambda: service.find("nakam")),
                ("find_contact accent-folded", lambda: service.find("jurgen muller")),
                ("find_contact email", lambda: service.find("ana.1234@example34.org")),
                ("find_contact phone", lambda: service.find("06 00 01 23 45")),
                ("gate: holders of an address", lambda: gate.holders("ana.1234@example34.org")),
                ("gate: names in the request", lambda: gate.named("email Ana that I'm late")),
                ("gate: look-alikes", lambda: gate.lookalikes("ana.1234@examp1e34.org")),
            ]
            for label, fn in checks:
                median, worst = timed(fn, args.runs)
                print(f"{label:<32} median {median:7.1f} ms   worst {worst:7.1f} ms")
        finally:
            app.close()


if __name__ == "__main__":
    main()
