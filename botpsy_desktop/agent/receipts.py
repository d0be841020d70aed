"""Receipts for people: what a call will do in plain words, with the tool and JSON kept apart."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.policy import Assessment, leaves
from botpsy_desktop.agent.provenance import Finding
from botpsy_desktop.core.tools import Tier, Tool


@dataclass(frozen=True)
class Receipt:
    """One call's receipt.

    ``summary``: the tool's declared summary of this call ("Send an email to ana@example.com,
    subject "Taxes", with tax.pdf attached."); ``lines``: further plain lines (web addresses
    contacted, files leaving the computer, where the request's untrusted content came from, why
    it asks); ``details``: the tool's name, effects and arguments as JSON, for a Details section.
    """

    summary: str
    lines: tuple[str, ...]
    reasons: tuple[str, ...]
    details: str
    texts: tuple[tuple[str, str], ...] = ()
    """Each long text argument (over :data:`FULL_TEXT_OVER` characters) whole, as (argument,
    text): the lines show such text clipped with a count, the decision is made on all of it."""

    @property
    def text(self) -> str:
        """Everything a person reads, in order (what the CLI prints; the dialog's plain part,
        whose whole texts are in a box of their own)."""
        parts = [self.summary, *self.lines]
        if self.reasons:
            parts.append("Why it asks: " + "; ".join(self.reasons) + ".")
        parts += [whole_text(key, text) for key, text in self.texts]
        return "\n".join(p for p in parts if p)


FULL_TEXT_OVER = 120
"""Text arguments longer than this are clipped in the plain lines (with a count) and shown whole
in a section of their own."""


def clipped(text: str, limit: int = FULL_TEXT_OVER) -> str:
    """``text`` on one line, cut to ``limit`` characters with how much is left out."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (+{len(text) - limit:,} more characters, shown whole below)"


def whole_text(key: str, text: str) -> str:
    """One long argument whole, headed with its name and length."""
    return f"--- the whole {key} ({len(text):,} characters) ---\n{text}\n--- end of {key} ---"


def long_texts(arguments: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The text arguments too long for a line, whole (see :attr:`Receipt.texts`)."""
    return tuple((k, t) for k, t in leaves(dict(arguments)) if len(t) > FULL_TEXT_OVER)


def sentence(text: str) -> str:
    text = " ".join(text.split())
    if not text:
        return ""
    text = text[:1].upper() + text[1:]
    return text if text[-1] in ".!?…" else text + "."


def _short(value: Any, limit: int = FULL_TEXT_OVER) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return clipped(text, limit)


def details(tool: Tool, arguments: Mapping[str, Any], assessment: Assessment | None) -> str:
    """The programmer's view: tool name, effects, tier and the exact arguments as JSON."""
    effects = ", ".join(sorted(e.value for e in (assessment.effects if assessment else ())))
    shown = json.dumps(dict(arguments), ensure_ascii=False, indent=2, sort_keys=True, default=str)
    return (
        f"Tool: {tool.name}\nTier: {tool.tier_for(arguments).value}\n"
        f"Effects: {effects or 'none'}\nArguments:\n{shown}"
    )


def build_receipt(
    tool: Tool,
    arguments: Mapping[str, Any],
    assessment: Assessment,
    *,
    tier: Tier,
    sources: Sequence[str] = (),
    findings: Sequence[Finding] = (),
    reasons: Sequence[str] = (),
) -> Receipt:
    """The receipt of one call, from the tool's declaration and the gate's assessment.

    ``sources`` names the untrusted content in the request's context; ``findings`` the argument
    values that appear in it and not in the user's words (agent/provenance.py).
    """
    first, *more = tool.summarize(arguments).split("\n")
    summary = sentence(first)
    # the summary's further lines are kept as written (a message's text, line by line)
    lines: list[str] = [block] if (block := "\n".join(more).strip("\n")) else []
    if tool.summary is None and arguments:  # no words declared: say what it was given
        given = ", ".join(f"{k} “{_short(v)}”" for k, v in arguments.items())
        lines.append(f"With {given}.")
    lines += [sentence(line) for line in assessment.lines]
    if sources:
        shown = ", ".join(dict.fromkeys(sources))
        lines.append(
            f"This request has read content you did not type ({shown}); it may have been "
            "written by someone else to make the assistant do this."
        )
    why = list(reasons)
    why += [f.sentence() for f in findings]
    if tier is Tier.ASK and not why:
        why.append("this kind of action always asks")
    return Receipt(
        summary,
        tuple(lines),
        tuple(why),
        details(tool, arguments, assessment),
        long_texts(arguments),
    )
