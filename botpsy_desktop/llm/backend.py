"""The interface every model backend offers the agent loop: stream one assistant turn."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from botpsy_desktop.llm.types import Completion, PromptProgress, TextPiece

Message = Mapping[str, Any]


class Backend(Protocol):
    """Produces one assistant turn for a conversation.

    ``complete`` yields TextPiece items as text is generated and ends with exactly one Completion.
    Before the first TextPiece it may yield PromptProgress items while a long prompt is evaluated
    (tokens done of total, seconds so far); consumers show them and otherwise pass them over.
    Setting ``cancel`` stops generation within one token; the Completion then says "cancelled".
    ``may_call`` (None: every tool) names the tools of ``tools`` the turn may call: the prompt
    lists them all (its start stays the same from request to request, and so does the state
    saved of it), the choice is narrowed at decoding where the backend can (a tool-call
    grammar); a backend that cannot ignores it, and the agent judges the calls either way.
    ``count_tokens`` says how many tokens ``complete`` would evaluate for the same arguments (the
    whole prompt, before the reply); ``n_ctx`` is the context window those tokens and the reply
    must fit in, or None when the backend has no limit (a replay without a configured context).
    """

    @property
    def name(self) -> str: ...

    @property
    def n_ctx(self) -> int | None: ...

    def count_tokens(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> int: ...

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        may_call: Collection[str] | None = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]: ...

    def close(self) -> None: ...


B = TypeVar("B", bound=Backend)


class BackendWrapper(Generic[B]):
    """A backend that hands everything to ``inner``: a wrapper overrides what it changes
    (recording, pacing, a fixed policy), usually ``complete``.

    The wrapped backend belongs to whoever made it: ``close`` leaves it open. Only the Backend
    interface is passed on (no ``warm``: a wrapper that warms says so itself).
    """

    def __init__(self, inner: B) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def n_ctx(self) -> int | None:
        return self.inner.n_ctx

    def count_tokens(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> int:
        return self.inner.count_tokens(messages, tools, enable_thinking=enable_thinking)

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        may_call: Collection[str] | None = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        return self.inner.complete(
            messages, tools, enable_thinking=enable_thinking, cancel=cancel, may_call=may_call
        )

    def close(self) -> None:
        """The wrapped backend belongs to the caller."""
