"""Render: the stored conversation as the prompt the model reads, fitted into its context, and
what the request's context holds that the person did not type."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from botpsy_desktop.agent.budget import ContextBudget, ContextFull, Fitted
from botpsy_desktop.agent.events import ContextTrimmed
from botpsy_desktop.agent.gate import described_by
from botpsy_desktop.agent.hardening import frame
from botpsy_desktop.agent.provenance import TAINT, untrusted_sources
from botpsy_desktop.agent.store import prompt_history
from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.llm.backend import Backend


def prompt_messages(system_prompt: str, stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Takes the system prompt and the conversation's stored rows; gives the prompt's messages:
    tool output framed as data from that tool, not instructions, and the app's own keys (taint,
    origin, notes for people) left out."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}]
    # an interrupted reply is marked as cut off or left out: agent/store.py prompt_view
    for m in prompt_history(stored):
        m = {k: v for k, v in m.items() if k != TAINT}  # the gate's, not the model's
        if m.get("role") == "tool" and m.get("data"):
            m = {k: v for k, v in m.items() if k != "data"}
            m["content"] = frame(str(m.get("name") or "the tool"), str(m.get("content", "")))
        elif m.get("role") == "user" and m.get("origin"):
            m = {k: v for k, v in m.items() if k != "origin"}
        elif m.get("role") == "assistant" and "note" in m:  # for people, not the model
            m = {k: v for k, v in m.items() if k != "note"}
        out.append(m)
    return out


def fit_prompt(
    backend: Backend,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    think: bool,
    reply_tokens: int,
    chunk_turns: int,
) -> tuple[list[dict[str, Any]], Fitted]:
    """Takes the prompt's messages and tools; gives them fitted into the backend's context
    (agent/budget.py: older turns left out, long results clipped) and what was left out.
    Raises ContextFull when even what is never left out does not fit."""
    n_ctx = backend.n_ctx
    if n_ctx is None:  # a backend with no context limit (a replay without one)
        return messages, Fitted(messages, 0)
    budget = ContextBudget(
        lambda m, t: backend.count_tokens(m, t, enable_thinking=think),
        n_ctx=n_ctx,
        reply_tokens=min(reply_tokens, n_ctx // 2),
        chunk_turns=chunk_turns,
    )
    fitted = budget.fit(messages, tools)
    return fitted.messages, fitted


def context_sources(
    stored: list[dict[str, Any]], registry: ToolRegistry, tools: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """The untrusted content of a request's context, named: what the conversation's rows carry
    (agent/provenance.py TAINT: tool output from outside, replies written while reading it,
    stored requests of untrusted origin; turns the context budget leaves out of the prompt
    still count), and the descriptions of tool servers' tools offered in the prompt (their
    authors' words)."""
    sources = list(untrusted_sources(stored))
    for schema in tools:
        name = str((schema.get("function") or {}).get("name") or "")
        tool = registry.get(name)
        if tool is not None and tool.author:
            sources.append(described_by(tool.author))
    return tuple(dict.fromkeys(sources))


class TrimNotices:
    """Says once what the context budget left out of a request's prompt: gives a
    ContextTrimmed event when a fitted prompt leaves out more (or other) than last reported."""

    def __init__(self, n_ctx: int) -> None:
        self.n_ctx = n_ctx
        self._last: tuple[int, tuple[str, ...]] | None = None

    def notice(self, fitted: Fitted) -> ContextTrimmed | None:
        """The event for ``fitted``, or None when nothing new was left out."""
        key = (fitted.dropped_turns, tuple(fitted.clipped))
        if not fitted.trimmed or key == self._last:
            return None
        self._last = key
        parts = []
        if fitted.dropped_turns:
            turns = "turn" if fitted.dropped_turns == 1 else f"{fitted.dropped_turns} turns"
            parts.append(
                f"Left out the oldest {turns} ({fitted.dropped_messages} messages) of this "
                f"conversation to fit the model's context of {self.n_ctx} tokens; they are "
                "still saved."
            )
        if fitted.clipped:
            names = ", ".join(dict.fromkeys(fitted.clipped))
            parts.append(f"Clipped long results of {names} to fit the context.")
        return ContextTrimmed(
            fitted.dropped_turns,
            fitted.dropped_messages,
            tuple(fitted.clipped),
            fitted.prompt_tokens,
            self.n_ctx,
            " ".join(parts),
        )


def context_full_message(exc: ContextFull, *, after_tools: bool = False) -> str:
    """The error of a request whose prompt does not fit, saying what to do (after its tools
    ran: what they returned filled the context)."""
    if after_tools:  # the request was short enough: what its tools returned filled the context
        return (
            f"The request stopped before an answer: with what its tool calls returned it needs "
            f"{exc.needed} tokens, more than the {max(exc.limit, 0)} of the model's "
            f"{exc.n_ctx} left after keeping {exc.reply_tokens} for the reply. The tool calls "
            "that ran are done (see them above and in `botpsy log`); do not simply repeat the "
            "request. Ask for a smaller part at a time, or raise model.n_ctx in the settings."
        )
    return (
        f"This request does not fit the model's context: the system prompt, the tools and the "
        f"request need {exc.needed} tokens, but only {max(exc.limit, 0)} of the {exc.n_ctx} are "
        f"left after keeping {exc.reply_tokens} for the reply. Write a shorter request, or "
        "raise model.n_ctx in the settings."
    )
