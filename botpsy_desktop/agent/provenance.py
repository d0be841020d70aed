"""Provenance: which argument values came from untrusted tool output rather than from the user."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.policy import EMAIL_RE, URL_RE, leaves

WINDOW = 40
"""A run of this many characters copied from tool output into an argument counts as copied."""

MIN_WHOLE = 8
"""Shorter argument values are only checked for addresses, links and numbers inside them."""

_NUMBER_RE = re.compile(r"\b[A-Z]{2}\d{2}[A-Z0-9]{10,30}\b|\d[\d .-]{5,}\d")


def _norm(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold()


@dataclass(frozen=True)
class Source:
    """One piece of untrusted text the assistant read: a tool's output, and where it came from."""

    label: str
    text: str


@dataclass(frozen=True)
class Finding:
    """An argument value that appears in untrusted tool output and nowhere in the user's words."""

    argument: str
    value: str
    source: str
    copied: bool = False

    def sentence(self) -> str:
        left = len(self.value) - 80
        shown = self.value if left <= 0 else f"{self.value[:80]}… (+{left:,} more characters)"
        if self.copied:
            return (
                f"Text in {self.argument} was copied from what {self.source} returned "
                f"(“{shown}”): content written by someone else would leave with it"
            )
        return (
            f"“{shown}” ({self.argument}) appears only in what {self.source} returned, not in "
            "anything you wrote: it may come from a file, message or page written by someone else"
        )


class Provenance:
    """Trusted text (the user's own requests) and untrusted text (every tool output so far)."""

    def __init__(self, trusted: Iterable[str], untrusted: Iterable[Source]) -> None:
        self._trusted = _norm("\n".join(trusted))
        self._untrusted = [Source(s.label, _norm(s.text)) for s in untrusted if s.text]

    @classmethod
    def from_messages(cls, messages: Sequence[Mapping[str, Any]]) -> Provenance:
        """User messages are trusted; tool messages (what tools returned) are not."""
        calls: dict[str, str] = {}
        trusted: list[str] = []
        untrusted: list[Source] = []
        for m in messages:
            role = m.get("role")
            if role == "user" and m.get("origin"):  # a stored request the user did not type
                untrusted.append(Source(str(m["origin"]), str(m.get("content") or "")))
            elif role == "user":
                trusted.append(str(m.get("content") or ""))
            elif role == "assistant":
                for call in m.get("tool_calls") or []:
                    fn = call.get("function") or {}
                    args = fn.get("arguments") or {}
                    shown = ", ".join(f"{k}={v!s:.60}" for k, v in dict(args).items())
                    calls[str(call.get("id"))] = f"{fn.get('name', '?')}({shown})"
                taint = message_taint(m, calls)
                if taint:  # written while reading untrusted content: untrusted too
                    label = "the assistant (while reading " + "; ".join(taint) + ")"
                    untrusted.append(Source(label, str(m.get("content") or "")))
            elif role == "tool":
                if m.get("data") and not message_taint(m, calls):
                    continue  # the app's own confirmation of a change
                call_id = str(m.get("tool_call_id"))
                label = calls.get(call_id) or str(m.get("name") or "a tool")
                untrusted.append(Source(label, str(m.get("content") or "")))
        return cls(trusted, untrusted)

    @property
    def empty(self) -> bool:
        return not self._untrusted

    def _source_of(self, atom: str) -> str | None:
        if not atom or atom in self._trusted:
            return None
        for source in self._untrusted:
            if atom in source.text:
                return source.label
        return None

    def findings(self, arguments: Mapping[str, Any]) -> list[Finding]:
        """Argument values (or addresses, links, numbers or long runs of text inside them) that
        appear in what tools returned but not in what the user wrote."""
        if not self._untrusted:
            return []
        found: list[Finding] = []
        seen: set[tuple[str, str]] = set()

        def add(key: str, value: str, source: str, copied: bool = False) -> None:
            if (key, _norm(value)) not in seen:
                seen.add((key, _norm(value)))
                found.append(Finding(key, value, source, copied))

        for key, text in leaves(dict(arguments)):
            value = text.strip()
            atoms = [*URL_RE.findall(value), *EMAIL_RE.findall(value), *_NUMBER_RE.findall(value)]
            if MIN_WHOLE <= len(value) <= 500:
                atoms.append(value)
            for atom in atoms:
                source = self._source_of(_norm(atom.strip().rstrip(".,;)")))
                if source is not None:
                    add(key, atom, source)
            if len(value) > WINDOW and not any(f.argument == key for f in found):
                norm = _norm(value)
                for start in range(0, len(norm) - WINDOW + 1, WINDOW // 2):
                    chunk = norm[start : start + WINDOW]
                    if not chunk.strip():
                        continue
                    source = self._source_of(chunk)
                    if source is not None:
                        add(key, value[start : start + WINDOW], source, copied=True)
                        break
        return found


TAINT = "taint"
"""The key of a stored message's label: the untrusted content it holds or was written from.

A tool's result carries the call that brought its content in (empty: a confirmation of the
app's own, see core/tools.py ``untrusted_output``); a reply the model wrote while its context
held untrusted content carries that content's names; a stored request of untrusted origin
carries its origin. The labels are stored with the messages (agent/store.py keeps each message
whole), so every reader of a conversation sees them, and the prompt never does."""


def message_taint(message: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[str, ...]:
    """The untrusted content ``message`` holds or was written from, named (empty: none).

    A tool result stored before labels existed counts as untrusted (``data`` without a label).
    """
    label = message.get(TAINT)
    if isinstance(label, list | tuple):
        return tuple(str(x) for x in label)
    role = message.get("role")
    if role == "tool" and message.get("data"):
        call = labels.get(str(message.get("tool_call_id"))) or str(message.get("name") or "a tool")
        return (f"what {call} returned",)
    if role == "user" and message.get("origin"):
        return (str(message["origin"]),)
    return ()


def call_labels(messages: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each tool call's id -> the call in a few words (``read_text_file(path=~/a.txt)``)."""
    calls: dict[str, str] = {}
    for m in messages:
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            fn = call.get("function") or {}
            args = fn.get("arguments") or {}
            shown = ", ".join(f"{k}={v!s:.60}" for k, v in dict(args).items())
            calls[str(call.get("id"))] = f"{fn.get('name', '?')}({shown})"
    return calls


def untrusted_sources(messages: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The content in ``messages`` (a conversation) that the user did not type, named: what
    tools brought in from outside, replies written while reading it, and stored requests of
    untrusted origin (see :data:`TAINT`). Empty: the conversation is clean.

    Pass the whole conversation, not the prompt the context budget fitted: a reply restating a
    planted instruction stays untrusted when the turn that read it is left out, and leaving
    turns out never makes a conversation cleaner."""
    labels = call_labels(messages)
    out: list[str] = []
    for m in messages:
        out.extend(message_taint(m, labels))
    return tuple(dict.fromkeys(out))
