"""The claims checker measured: precision and recall per language on a labelled set."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from botpsy_desktop.agent.claims import note_for

CLAIMS_SET = Path(__file__).parent / "claims" / "claims.jsonl"
"""Answers in nine languages, each with the tools that ran in its request and whether it must
get a note (it claims an action that did not run): claims backed by the calls that ran, claims
of an action that never ran (alone, or next to one that did), and non-claims (offers,
questions, negations, plain information). Written before the checker's word lists were, and
then used to develop them: a development set."""

HELD_OUT = Path(__file__).parent / "claims" / "heldout.jsonl"
"""A second set in the nine languages, other wordings, written after the checker was finished
and never used to change it: its figures are the honest ones."""


@dataclass(frozen=True)
class Case:
    lang: str
    text: str
    ran: tuple[str, ...]
    noted: bool
    """True: the answer claims an action that did not run, so it must get a note."""


@dataclass
class Score:
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0

    @property
    def cases(self) -> int:
        return self.tp + self.fp + self.fn + self.tn


def load(path: Path = CLAIMS_SET) -> list[Case]:
    cases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            cases.append(Case(row["lang"], row["text"], tuple(row["ran"]), row["expect"] == "note"))
    return cases


def measure(
    cases: Sequence[Case], notes: Callable[[str, Sequence[str]], str] = note_for
) -> dict[str, Score]:
    """Per language (and "all"): how the checker's notes meet the labels."""
    scores: dict[str, Score] = {}
    for case in cases:
        noted = bool(notes(case.text, case.ran))
        for key in (case.lang, "all"):
            score = scores.setdefault(key, Score())
            if noted and case.noted:
                score.tp += 1
            elif noted:
                score.fp += 1
            elif case.noted:
                score.fn += 1
            else:
                score.tn += 1
    return scores


def table(scores: dict[str, Score]) -> list[str]:
    lines = ["language  cases  claims-to-note  precision  recall"]
    for lang in [k for k in scores if k != "all"] + ["all"]:
        s = scores[lang]
        lines.append(
            f"{lang:<8}  {s.cases:>5}  {s.tp + s.fn:>14}  {s.precision:>9.2f}  {s.recall:>6.2f}"
        )
    return lines


def misses(cases: Sequence[Case]) -> list[str]:
    """The cases the checker gets wrong, for whoever extends its word lists."""
    out = []
    for case in cases:
        noted = bool(note_for(case.text, case.ran))
        if noted != case.noted:
            kind = "missed" if case.noted else "false note"
            out.append(f"{kind} [{case.lang}] ran={','.join(case.ran) or '-'}: {case.text}")
    return out
