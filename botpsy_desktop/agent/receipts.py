"""Receipts for people: what a call will do in plain words, with the tool and JSON kept apart."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.policy import Assessment
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

    @property
    def text(self) -> str:
        """Everything a person reads, in order (what the CLI prints; the dialog's plain part)."""
        parts = [self.summary, *self.lines]
        if self.reasons:
            parts.append("Why it asks: " + "; ".join(self.reasons) + ".")
        return "\n".join(p for p in parts if p)


def sentence(text: str) -> str:
    text = " ".join(text.split())
    if not text:
        return ""
    text = text[:1].upper() + text[1:]
    return text if text[-1] in ".!?…" else text + "."


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
    lines: list[str] = [m.strip() for m in more if m.strip()]
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
    return Receipt(summary, tuple(lines), tuple(why), details(tool, arguments, assessment))
