"""Receipts for people: what a call will do in plain words, with the tool and JSON kept apart."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.adapters.untrusted import neutralize
from botpsy_desktop.agent.policy import Assessment, leaves
from botpsy_desktop.agent.provenance import Finding
from botpsy_desktop.core.tools import ALL_ARGUMENTS, Tier, Tool


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


_BREAKS_AND_HIDDEN = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069"
    "\ufeff\ud800-\udfff]"
)
"""Every character a renderer may break a line at (\\n, \\r, \\x0b, \\x0c, \\x1c-\\x1e,
\\x85, U+2028, U+2029) and every control, bidi or invisible one: in a receipt line, a value or a
name from a call or from outside shows them as escapes, so it cannot draw a line of its own."""


def escaped(text: str) -> str:
    """``text`` for one receipt line: line breaks, controls and bidi characters as visible
    escapes (``\\n``, ``\\u2028``), chat and call markup defused."""
    shown = _BREAKS_AND_HIDDEN.sub(_escape_char, str(text))
    return neutralize(shown)


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group())
    named = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
    if code in named:
        return named[code]
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


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
    """The programmer's view: tool name, effects, tier and the exact arguments as JSON (line
    separators JSON leaves as they are, U+2028 and U+2029, escaped too)."""
    effects = ", ".join(sorted(e.value for e in (assessment.effects if assessment else ())))
    shown = json.dumps(dict(arguments), ensure_ascii=False, indent=2, sort_keys=True, default=str)
    shown = shown.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    shown = shown.replace("\x85", "\\u0085")
    return (
        f"Tool: {escaped(tool.name)}\nTier: {tool.tier_for(arguments).value}\n"
        f"Effects: {effects or 'none'}\nArguments:\n{shown}"
    )


MAX_SENT_LINES = 12
"""Arguments a receipt lists one by one as sent; the rest are counted (all are in Details)."""


def sent_lines(tool: Tool, arguments: Mapping[str, Any]) -> list[str]:
    """What a call sends, value by value (escaped, clipped with how much is left out): the
    arguments its declaration says leave the computer (``sends``; every one for a tool
    server's tool)."""
    keys = tool.sent(arguments)
    if not keys:
        return []
    whole = {k for k, _ in long_texts(arguments)}
    shown = []
    for key in keys[:MAX_SENT_LINES]:
        value = arguments[key]
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        flat = escaped(text)
        if len(flat) > FULL_TEXT_OVER:
            where = "shown whole below" if key in whole else "all of it in Details"
            left = len(flat) - FULL_TEXT_OVER
            flat = f"{flat[:FULL_TEXT_OVER]}… (+{left:,} more characters, {where})"
        shown.append(f"{escaped(key)} “{flat}”")
    more = len(keys) - MAX_SENT_LINES
    tail = f"; and {more} more (all in Details)" if more > 0 else ""
    to = "the tool server" if tool.author or ALL_ARGUMENTS in tool.sends else "the service"
    return [f"It sends to {to}: " + "; ".join(shown) + tail + "."]


def build_receipt(
    tool: Tool,
    arguments: Mapping[str, Any],
    assessment: Assessment,
    *,
    tier: Tier,
    sources: Sequence[str] = (),
    findings: Sequence[Finding] = (),
    reasons: Sequence[str] = (),
    resolved: Sequence[str] = (),
    people: Sequence[str] = (),
) -> Receipt:
    """The receipt of one call, from the tool's declaration and the gate's assessment.

    ``sources`` names the untrusted content in the request's context; ``findings`` the argument
    values that appear in it and not in the user's words (agent/provenance.py); ``resolved``
    what the call's references name now (agent/gate.py ``Resolution``), one line each;
    ``people`` who the recipients are in the address books (agent/people.py), one line each.
    """
    said = tool.summarize(arguments)
    if tool.author:  # a third party's words: one line, whatever they hold
        said = escaped(said)
    first, *more = said.split("\n")
    summary = sentence(first)
    # the summary's further lines are kept as written (a message's text, line by line)
    lines: list[str] = [block] if (block := "\n".join(more).strip("\n")) else []
    lines += [f"It acts on {escaped(line)}" for line in resolved]
    lines += [escaped(line) for line in people]
    if tool.summary is None and arguments:  # no words declared: say what it was given
        given = ", ".join(f"{escaped(k)} “{escaped(_short(v))}”" for k, v in arguments.items())
        lines.append(f"With {given}.")
    lines += sent_lines(tool, arguments) if tool.summary is not None else []
    lines += [sentence(line) for line in assessment.lines]
    if sources:
        shown = escaped(", ".join(dict.fromkeys(sources)))
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
