"""Look-alike addresses: the same address to the eye (0/o, 1/l, rn/m) or one edit apart."""

from __future__ import annotations

import re
import unicodedata


def parts(address: str) -> tuple[str, str]:
    """(local part, domain) of an address, case-folded."""
    local, _, domain = address.strip().casefold().rpartition("@")
    return local, domain


_CONFUSABLE = str.maketrans({"0": "o", "1": "l", "i": "l", "3": "e", "5": "s"})


def skeleton(address: str) -> str:
    """An address as it looks: look-alike letters and digits made one (0/o, 1/l/i), accents
    and compatibility forms folded, dots, hyphens and underscores left out."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", address).casefold())
    text = "".join(c for c in text if not unicodedata.combining(c)).replace("rn", "m")
    local, _, domain = text.partition("@")
    domain = domain.rsplit(".", 1)[0]  # example.com and example.co look alike
    return re.sub(r"[._-]", "", local.translate(_CONFUSABLE)) + "@" + domain.translate(_CONFUSABLE)


def near(a: str, b: str) -> bool:
    """One edit apart (a letter added, left out, changed or two swapped), or the same local
    part at a domain one edit apart: how a look-alike is registered."""
    if a == b or abs(len(a) - len(b)) > 1 or min(len(a), len(b)) < 6:
        return False
    return _edits(a, b) <= 1


def _edits(a: str, b: str) -> int:
    """Damerau-Levenshtein distance, capped at 2."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        if min(row) > 2:
            return 3
        prev2, prev = prev, row
    return prev[-1]
