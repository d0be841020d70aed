"""Answers that describe an action no tool carried out: found in the text, checked per action.

A small model often says "Done, the timer will ring in 10 minutes" without calling a tool, or
sets a timer and also claims an alarm it never set. The loop knows what ran; this module reads
the answer, clause by clause, for claims of completed (or scheduled) actions in the nine
languages the model answers in (en, fr, de, es, it, pt, nl, zh, ja), each as an *action kind*
(set, cancel, send, move, play, stop, volume) and the *object* it names (an alarm, a timer, a
reminder, a mail, an event, a file, a folder, a note, music, a task), and checks each against
the calls that really ran: a timer set backs "the timer is running", not "your 6:00 alarm is
set". Offers, questions and negations are not claims ("shall I set", "I could not send"), but
a cancellation said as a negation is ("it won't ring", "il ne sonnera pas").

Written by hand: no library recognises claims of actions, and word lists are easy to review
and extend. Measured on a labelled set of claims and non-claims in the nine languages:
``python tools/eval_claims.py`` (botpsy_desktop/eval/claims/claims.jsonl; docs/GATE.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from botpsy_desktop.agent.cues import (
    CJK,
    CLAIM_ACTIONS,
    CLAIM_NEGATION,
    CLAIM_OBJECTS,
    CLAIM_OFFER,
    NEGATED_CANCEL,
    fold,
)

NOTE = (
    "No action was carried out: the assistant only described it. Nothing was set, sent, "
    "changed or deleted in this request; ask again to have it done."
)


def _alt(words: str) -> str:
    return "|".join(w.replace("_", " ") for w in words.split())


_FILE_NAME = re.compile(r"\b[\w-]+\.(?:pdf|txt|md|docx?|xlsx?|odt|png|jpe?g|csv)\b")

_ACTION_RE = {k: re.compile(v, re.IGNORECASE) for k, v in CLAIM_ACTIONS.items()}
_OBJECT_WORDS = {k: tuple(v.split()) for k, v in CLAIM_OBJECTS.items()}
_WORDS = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")

_SENTENCE = re.compile(r"(?<=[.!?])\s+|[。\n]")  # full-width ! and ? are folded to ASCII
"""Where sentences end ("report.pdf" and "6.30" are not ends: a stop must be followed by
a space)."""
_CLAUSE = re.compile(
    r"[;:]\s|,\s*(?:and|et|und|y|e|en)\s+|\s+(?:and also|and|et|und)\s+|"
    r",(?=\s*[\u3040-\u30ff\u3400-\u9fff])|、|。",
    re.IGNORECASE,
)
# What a tool that ran backs: (action kind, object).
_BACKS: dict[str, tuple[tuple[str, str], ...]] = {
    "set_alarm": (("set", "alarm"),),
    "set_timer": (("set", "timer"),),
    "set_reminder": (("set", "reminder"),),
    "set_routine": (("set", "reminder"), ("set", "alarm")),
    "cancel_alarm": (("cancel", "alarm"), ("cancel", "timer"), ("cancel", "reminder")),
    "dismiss_alarm": (("cancel", "alarm"), ("stop", "alarm")),
    "snooze_alarm": (("set", "alarm"),),
    "send_email": (("send", "email"),),
    "reply_email": (("send", "email"),),
    "forward_email": (("send", "email"),),
    "save_draft": (("set", "email"),),
    "move_email": (("move", "email"), ("cancel", "email")),
    "mark_email": (("set", "email"),),
    "create_event": (("set", "event"),),
    "create_meeting": (("set", "event"), ("send", "email")),
    "update_event": (("move", "event"), ("set", "event")),
    "update_meeting": (("move", "event"), ("set", "event")),
    "delete_event": (("cancel", "event"),),
    "add_task": (("set", "task"),),
    "complete_task": (("set", "task"), ("cancel", "task")),
    "create_folder": (("set", "folder"),),
    "write_text_note": (("set", "note"), ("set", "file")),
    "rename_or_move": (("move", "file"), ("move", "folder"), ("set", "file")),
    "move_to_trash": (("cancel", "file"), ("cancel", "folder"), ("move", "file")),
    "undo_last_file_change": (("cancel", "file"), ("cancel", "folder"), ("cancel", "note")),
    "play_music": (("play", "music"), ("set", "music")),
    "resume_music": (("play", "music"),),
    "next_track": (("play", "music"),),
    "previous_track": (("play", "music"),),
    "pause_music": (("stop", "music"),),
    "stop_music": (("stop", "music"),),
    "set_music_volume": (("volume", "volume"), ("volume", "music"), ("set", "volume")),
}


ANY_CHANGE = "*"
"""In ``ran``: a change by a tool this table does not know (a tool server's, a plug-in's). What
it did cannot be read from its name, so no claim is called unbacked beside it."""


def as_ran(name: str) -> str:
    """How a change that ran by the tool ``name`` is given to :func:`note_for`."""
    return name if name in _BACKS else ANY_CHANGE


@dataclass(frozen=True)
class Claim:
    """One claimed action: its kind, the objects it names (empty: none named), the words."""

    action: str
    objects: tuple[str, ...]
    text: str

    def words(self) -> str:
        what = " or ".join(_OBJECT_NAMES.get(o, o) for o in self.objects) or "something"
        verb = _ACTION_NAMES.get(self.action, "done")
        return f"{what} {verb}"


_OBJECT_NAMES = {
    "alarm": "an alarm", "timer": "a timer", "reminder": "a reminder", "email": "a mail",
    "event": "an event", "file": "a file", "folder": "a folder", "note": "a note",
    "music": "music", "volume": "the volume", "task": "a task",
}  # fmt: skip
_ACTION_NAMES = {
    "set": "set or made", "cancel": "cancelled or deleted", "send": "sent", "move": "moved",
    "play": "playing", "stop": "stopped", "volume": "changed", "done": "done",
}  # fmt: skip


def _objects(clause: str) -> tuple[str, ...]:
    words = _WORDS.findall(clause)
    found: list[str] = []
    for kind, stems in _OBJECT_WORDS.items():
        for stem in stems:
            if CJK.search(stem):
                if stem in clause and not (stem == "文件" and "文件夹" in clause):
                    found.append(kind)
                    break
            elif any(w == stem or (len(stem) >= 4 and w.startswith(stem)) for w in words):
                found.append(kind)
                break
    if "file" not in found and _FILE_NAME.search(clause):
        found.append("file")
    return tuple(found)


def _clauses(sentence: str) -> list[str]:
    return [c for c in _CLAUSE.split(sentence) if c and c.strip()]


def find_claims(text: str) -> list[Claim]:
    """Every action ``text`` claims was carried out, clause by clause (see the module)."""
    claims: list[Claim] = []
    for sentence in _SENTENCE.split(fold(text)):
        if not sentence.strip() or CLAIM_OFFER.search(sentence):
            continue
        previous: tuple[str, ...] = ()
        for clause in _clauses(sentence):
            objects = _objects(clause) or previous
            previous = objects
            if NEGATED_CANCEL.search(clause):
                claims.append(Claim("cancel", objects or ("alarm",), clause.strip()))
                continue
            if CLAIM_NEGATION.search(clause):
                continue
            cancel = _ACTION_RE["cancel"].search(clause)
            for action, pattern in _ACTION_RE.items():
                if pattern.search(clause):
                    if action == "set" and cancel is not None:
                        continue
                    claims.append(Claim(action, objects, clause.strip()))
    return _specific(claims)


def _specific(claims: list[Claim]) -> list[Claim]:
    """One claim per clause where a specific kind was found ("done" only alone)."""
    by_clause: dict[str, list[Claim]] = {}
    for claim in claims:
        by_clause.setdefault(claim.text, []).append(claim)
    out: list[Claim] = []
    for found in by_clause.values():
        specific = [c for c in found if c.action != "done"]
        out += specific or found
    return out


def backed(claim: Claim, ran: Iterable[str]) -> bool:
    """Does a call that ran (tool names) carry out this claimed action?"""
    names = list(ran)
    if claim.action == "done":
        return bool(names)
    if ANY_CHANGE in names:
        return True
    pairs = {pair for name in names for pair in _BACKS.get(name, ())}
    if not claim.objects:
        return any(action == claim.action for action, _ in pairs) or (
            claim.action == "set" and bool(pairs)
        )
    return any((claim.action, o) in pairs for o in claim.objects)


def unbacked_claims(text: str, ran: Sequence[str]) -> list[Claim]:
    """The actions ``text`` claims that no call in ``ran`` (tools that ran) carried out."""
    return [c for c in find_claims(text) if not backed(c, ran)]


def note_for(text: str, ran: Sequence[str]) -> str:
    """The note an answer gets: '' when every action it claims ran; :data:`NOTE` when it
    claims one and nothing was changed; else which claimed actions did not happen."""
    missing = unbacked_claims(text, ran)
    if not missing:
        return ""
    changes = [n for n in ran if n in _BACKS]
    if not changes:
        return NOTE
    said = "; ".join(dict.fromkeys(c.words() for c in missing))
    return (
        f"Not carried out: the answer says {said}, but no such action ran in this request "
        f"(what ran: {', '.join(dict.fromkeys(changes))}). Ask again to have it done."
    )


def claims_action(text: str) -> bool:
    """True if ``text`` claims, in a clause of its own, that an action was carried out (or is
    now scheduled), not as an offer or a question, nor under a negation."""
    return bool(find_claims(text))
