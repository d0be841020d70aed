"""Select tools: the tools a request is offered (its own domains, grown into the
conversation's set), and whether the prompt lists every tool of the app's own."""

from __future__ import annotations

from typing import Any

from botpsy_desktop.agent.selection import RequestTools, ToolSelector, stable_schemas
from botpsy_desktop.agent.steps.settings import LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.llm.backend import Backend

TOOL_SET_KEY = "tool_domains"
"""The per-conversation setting that keeps the conversation's tool set (domains in prompt
order, agent/selection.py ``ToolSelector.for_conversation``)."""


def offer_tools(
    store: ConversationStore,
    conversation_id: str,
    registry: ToolRegistry,
    selector: ToolSelector | None,
    backend: Backend,
    settings: LoopSettings,
    text: str | None,
    history: list[dict[str, Any]],
) -> RequestTools:
    """The tools of a request ``text`` (None: the conversation's set as it stands) after the
    conversation's ``history``: its own choice (agent/selection.py), grown into the
    conversation's set when the settings keep one (the set stored with the conversation)."""
    kept = None
    if selector is not None and settings.conversation_tools > 0:
        stored = store.setting(conversation_id, TOOL_SET_KEY)
        kept = [str(d) for d in stored] if isinstance(stored, list) else None
    return RequestTools(
        registry,
        selector,
        text,
        history,
        kept=kept,
        cap=settings.conversation_tools,
        stable=stable_prompt(backend, registry, settings),
    )


def keep_tool_set(
    store: ConversationStore,
    conversation_id: str,
    offer: RequestTools,
    settings: LoopSettings,
    selecting: bool,
) -> None:
    """Store the conversation's tool set (its domains in prompt order) for its next request and
    for the warm-up that prepares it, when tools are selected and the settings keep a set."""
    if not selecting or settings.conversation_tools <= 0:
        return
    order = offer.order
    if store.setting(conversation_id, TOOL_SET_KEY) != order:
        store.set_setting(conversation_id, TOOL_SET_KEY, order)


STABLE_SHARE = 0.6
"""A stable prompt ("auto") when every tool of the app's own takes at most this share of the
model's context (the rest for the conversation and the reply)."""

_stable_fits: dict[tuple[int, int, str, tuple[str, ...]], bool] = {}


def stable_prompt(backend: Backend, registry: ToolRegistry, settings: LoopSettings) -> bool:
    """Whether requests list every tool of the app's own in the prompt (agent/selection.py
    ``stable_schemas``), the choice narrowing only what the model may call.

    With per-request lists a conversation's prompt changed whenever a request was about
    another domain: the tools come before the history, so the whole history was read again.
    A stable list keeps the prompt's start, and the model's saved state of the conversation,
    valid from request to request: a follow-up evaluates its own message only
    (docs/PERFORMANCE.md). "auto" uses it when the tools take at most STABLE_SHARE of the
    context (a small context keeps per-request lists) and the backend says its context.
    """
    mode = settings.prompt_tools
    if not settings.select_tools or mode == "selected":
        return False
    if mode == "all":
        return True
    n_ctx = backend.n_ctx
    if not n_ctx:
        return False
    tools = stable_schemas(registry)
    names = tuple(t["function"]["name"] for t in tools)
    key = (id(backend), n_ctx, settings.system_prompt, names)
    fits = _stable_fits.get(key)
    if fits is None:
        # the template wants a user turn: an empty one (a few tokens) stands for the request
        messages = [
            {"role": "system", "content": settings.system_prompt},
            {"role": "user", "content": ""},
        ]
        try:
            size = backend.count_tokens(messages, tools, enable_thinking=False)
            fits = size <= n_ctx * STABLE_SHARE
        except BotpsyError:
            return False
        if len(_stable_fits) > 64:
            _stable_fits.clear()
        _stable_fits[key] = fits
    return fits
