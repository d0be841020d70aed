"""The tool-selection model: a request's character n-grams scored by a small linear classifier.

A request is normalised (lower case, Latin and Cyrillic accents dropped, addresses, file names,
paths and digits replaced by placeholders) and cut into features: whole words, word pairs, and
character n-grams of 3 to 5 (padded words; CJK and Hangul runs as 1- to 3-grams, so Japanese and
Chinese need no word splitting and a typo changes a few features, not the word). Each feature is
hashed (CRC-32) into one of 2^18 buckets; each bucket holds one int8 weight per class. A class's
score is the sum of its weights over the request's distinct buckets (divided by the square root
of their number when the model says so: a long request's many features then do not swamp the
bias) plus a bias, its probability the logistic of that: one independent yes/no per domain (a
request may need several) and one for "no tool at all".

The weights are trained offline by ``tools/selection/train.py`` (one-vs-rest logistic regression
on the phrases in tools/selection/, in eleven languages, with typos and multi-domain joins added)
and shipped as ``selection_model.bin``: a zlib stream (its checksum catches a corrupt file) of a
JSON header line and the int8 table. Scoring needs only the standard library: loading takes a
few milliseconds and about 2 MB, scoring a request well under a millisecond; nothing is
downloaded. Written here rather than taken from a library because the runtime part is thirty
lines and a library (scikit-learn, fastText) would add tens of megabytes to load.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import unicodedata
import zlib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

FORMAT = "botpsy-selection-model/1"
BUCKETS = 1 << 18
MODEL_FILE = "selection_model.bin"

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"\b(?:https?://|www\.)\S+")
_FILE = re.compile(
    r"[\w-]+\.(?:txt|md|pdf|docx?|odt|xlsx?|ods|csv|pptx?|zip|tar|gz|iso|exe|dmg|deb|"
    r"jpe?g|png|gif|heic|svg|mp3|flac|ogg|wav|m4a|mp4|mov|json|html?|log)\b"
)
_PATH = re.compile(r"(?:^|\s)~(?=/|\s|$)|(?:[\w.-]*/)+[\w.-]+")
# The three patterns above begin with a run of characters (a class repeated), so re.sub tries
# them again from every character of a long run that never matches: n^2/2 steps (a
# 40,000-character word took 22 to 85 s). The same patterns, starting only where such a run
# starts (a lookbehind), find the same matches, since a start later in a run sees the same end
# of it; only right after a match (a run may go on past it) is the plain pattern tried once.
# See _linear_sub: the same result as re.sub, in steps linear in the text's length.
_STARTS = {
    _EMAIL: re.compile(r"(?<![\w.+-])" + _EMAIL.pattern),
    _FILE: re.compile(r"(?<![\w-])" + _FILE.pattern),
    _PATH: re.compile(_PATH.pattern.replace("|(?:[", "|(?<![\\w./-])(?:[", 1)),
}


def _linear_sub(pattern: re.Pattern[str], placeholder: str, text: str) -> str:
    """``pattern.sub(placeholder, text)`` for the patterns of ``_STARTS``, in linear steps."""
    starts = _STARTS[pattern]
    parts: list[str] = []
    pos, after_match = 0, False
    while True:
        found = pattern.match(text, pos) if after_match else None
        found = found or starts.search(text, pos)
        if found is None:
            break
        parts += [text[pos : found.start()], placeholder]
        pos, after_match = found.end(), True
    parts.append(text[pos:])
    return "".join(parts)


_DIGITS = re.compile(r"\d+")


def _is_cjk(c: str) -> bool:
    o = ord(c)
    return (
        0x3040 <= o <= 0x30FF  # kana
        or 0x3400 <= o <= 0x9FFF  # CJK ideographs
        or 0xF900 <= o <= 0xFAFF
        or 0xAC00 <= o <= 0xD7AF  # Hangul syllables
        or 0x1100 <= o <= 0x11FF
        or 0x3130 <= o <= 0x318F
    )


def normalize(text: str) -> str:
    """Lower case, full-width made plain, accents of Latin, Greek and Cyrillic letters dropped
    (others kept: a Devanagari vowel sign is part of the word), placeholders for addresses,
    links, file names, paths and numbers; anything but letters, marks and digits is a space."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = _linear_sub(_EMAIL, " xemailx ", text)
    text = _URL.sub(" xurlx ", text)
    text = _linear_sub(_FILE, " xfilex ", text)
    text = _linear_sub(_PATH, " xpathx ", text)
    text = _DIGITS.sub("0", text)
    out: list[str] = []
    for c in unicodedata.normalize("NFKD", text):
        cat = unicodedata.category(c)
        if cat[0] == "M":
            if out and ord(out[-1]) < 0x0530:  # an accent on a Latin/Greek/Cyrillic letter
                continue
            out.append(c)
        elif cat[0] in "LN":
            out.append(c)
        else:
            out.append(" ")
    return unicodedata.normalize("NFKC", "".join(out))


def features(text: str) -> list[str]:
    """The features of ``text`` (see the module's notes); the same for training and scoring."""
    words = normalize(text).split()
    out: list[str] = []
    plain: list[str] = []
    for word in words:
        if any(_is_cjk(c) for c in word):
            padded = f"<{word}>"
            for n in (1, 2, 3):
                out += [f"c{padded[i : i + n]}" for i in range(len(padded) - n + 1)]
            plain.append(word)
            continue
        out.append(f"w{word}")
        plain.append(word)
        padded = f"<{word}>"
        for n in (3, 4, 5):
            if len(padded) >= n:
                out += [f"n{padded[i : i + n]}" for i in range(len(padded) - n + 1)]
    out += [f"b{a}_{b}" for a, b in itertools.pairwise(plain)]
    return out


def bucket(feature: str) -> int:
    """The hash bucket of a feature (stable across runs and platforms)."""
    return zlib.crc32(feature.encode("utf-8")) & (BUCKETS - 1)


class ModelError(Exception):
    """The selection model file is missing or damaged."""


@dataclass(frozen=True)
class SelectionModel:
    """Per-class logistic scores of a text (see the module's notes)."""

    classes: tuple[str, ...]
    bias: tuple[float, ...]
    scale: tuple[float, ...]
    table: bytes
    """int8 weights, ``len(classes)`` per bucket, bucket-major."""
    thresholds: dict[str, float]
    """Decision thresholds chosen when the model was trained (agent/selection.py uses them)."""
    norm: bool = False
    """Whether a text's summed weights are divided by the square root of its feature count (so
    a long request's many features do not outweigh the bias)."""

    def scores(self, text: str) -> dict[str, float]:
        """Each class's probability for ``text``."""
        k = len(self.classes)
        sums = [0] * k
        table = self.table
        found = {bucket(f) for f in features(text)}  # as in training: each bucket once
        for b in found:
            at = b * k
            for j in range(k):
                w = table[at + j]
                sums[j] += w - 256 if w > 127 else w
        damp = 1 / math.sqrt(max(len(found), 1)) if self.norm else 1.0
        return {
            c: _sigmoid(self.bias[j] + sums[j] * self.scale[j] * damp)
            for j, c in enumerate(self.classes)
        }

    @classmethod
    def from_bytes(cls, data: bytes) -> SelectionModel:
        """Parse a model file; ModelError when it is damaged or of another format."""
        try:
            raw = zlib.decompress(data)
            head, _, table = raw.partition(b"\n")
            header = json.loads(head)
        except (zlib.error, ValueError) as exc:
            raise ModelError(f"the selection model is damaged ({exc})") from exc
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise ModelError("the selection model has an unknown format")
        classes = tuple(header["classes"])
        if len(table) != BUCKETS * len(classes) or header.get("buckets") != BUCKETS:
            raise ModelError("the selection model's table has the wrong size")
        return cls(
            classes,
            tuple(float(b) for b in header["bias"]),
            tuple(float(s) for s in header["scale"]),
            table,
            {str(k): float(v) for k, v in header.get("thresholds", {}).items()},
            header.get("norm") == "sqrt",
        )

    def to_bytes(self) -> bytes:
        header = {
            "format": FORMAT,
            "buckets": BUCKETS,
            "classes": list(self.classes),
            "bias": list(self.bias),
            "scale": list(self.scale),
            "thresholds": self.thresholds,
            **({"norm": "sqrt"} if self.norm else {}),
        }
        return zlib.compress(json.dumps(header).encode() + b"\n" + self.table, 9)


def _sigmoid(x: float) -> float:
    if x < -30:
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


@cache
def shipped_model() -> SelectionModel:
    """The model shipped with the package, loaded once; ModelError when it is missing or bad."""
    try:
        data = resources.files("botpsy_desktop.agent").joinpath(MODEL_FILE).read_bytes()
    except OSError as exc:
        raise ModelError(f"the selection model {MODEL_FILE} is missing ({exc})") from exc
    return SelectionModel.from_bytes(data)


def model_path() -> Path:
    """Where the shipped model lives in a checkout (for the training tool)."""
    return Path(__file__).with_name(MODEL_FILE)
