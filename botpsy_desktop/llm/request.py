"""One request, shaped once for every engine: the rendered prompt, the tool-call grammar, limits.

The llama.cpp engine (engines/engine.py, in the worker) and llama-server (engines/remote.py) both
take a turn the same way: render the conversation with the model's own template, choose the
grammar that holds a tool call to the tools the turn may call, and generate. ``ShapedEngine``
does the first two once (``shape_request``, the Backend interface's ``complete``); each engine
only carries the ``Request`` to its own ``generate`` (``carry``). The engine worker's app side
(engines/engine_process.py) passes the turn's arguments on to the worker, where it is shaped.
The grammar module (llama-cpp-python's GBNF converter) is imported only when a grammar is built,
so the app's process with a remote engine loads no llama.cpp.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.language.prompt import TOOL_CALL_OPEN, PromptRenderer

if TYPE_CHECKING:
    from botpsy_desktop.core.config import ModelSettings
    from botpsy_desktop.llm.backend import Message
    from botpsy_desktop.llm.types import Completion, PromptProgress, TextPiece


@dataclass(frozen=True)
class Request:
    """One assistant turn: what it was asked with, and how an engine generates it."""

    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]]
    enable_thinking: bool
    may_call: Collection[str] | None
    prompt: str
    started_in_thinking: bool
    grammar: str | None
    max_tokens: int | None = None
    force_tool_call: bool = False

    def options(self) -> dict[str, Any]:
        """The keyword arguments of the engines' ``generate`` for this request."""
        return {
            "started_in_thinking": self.started_in_thinking,
            "grammar": self.grammar,
            "max_tokens": self.max_tokens,
            "force_tool_call": self.force_tool_call,
        }


class ToolCallGrammars:
    """The tool-call grammars of one engine's model, built once for each set of callable tools
    (the last ``keep`` sets). ``close_token``: whether the model spells ``</tool_call>`` as one
    token, asked when a grammar is first built."""

    def __init__(
        self, settings: ModelSettings, close_token: Callable[[], bool], *, keep: int = 8
    ) -> None:
        self._settings = settings
        self._close_token = close_token
        self._keep = keep
        self._built: dict[str, str] = {}

    def for_tools(
        self,
        tools: Sequence[Mapping[str, Any]],
        *,
        call_format: str,
        may_call: Collection[str] | None = None,
    ) -> str | None:
        """The grammar a turn's tool call follows: None without tools, with
        ``constrain_tool_calls`` off, or for a template that writes JSON calls (the grammar
        describes Qwen3-Coder XML calls only). ``may_call`` narrows it to those tools."""
        if not tools or not self._settings.constrain_tool_calls or call_format != "xml":
            return None
        from botpsy_desktop.llm.language.grammar import (
            build_tool_call_grammar,
            callable_tools,
            grammar_key,
        )

        chosen = callable_tools(tools, may_call)
        close_token = self._close_token()
        key = grammar_key(chosen, close_token=close_token, param_order="any")
        if key not in self._built:
            if len(self._built) >= self._keep:
                self._built.clear()
            self._built[key] = build_tool_call_grammar(
                chosen, close_token=close_token, param_order="any"
            )
        return self._built[key]


def shape_request(
    renderer: PromptRenderer,
    grammars: ToolCallGrammars,
    messages: Sequence[Message],
    tools: Sequence[Mapping[str, Any]],
    *,
    enable_thinking: bool,
    may_call: Collection[str] | None = None,
    max_tokens: int | None = None,
    force_tool_call: bool = False,
) -> Request:
    """The request for one turn: ``messages`` and every tool of ``tools`` rendered with the
    model's template, the grammar for the tools of ``may_call`` (None: all of them)."""
    rendered = renderer.render(messages, tools, enable_thinking=enable_thinking)
    return Request(
        messages=messages,
        tools=tools,
        enable_thinking=enable_thinking,
        may_call=may_call,
        prompt=rendered.text,
        started_in_thinking=rendered.started_in_thinking,
        grammar=grammars.for_tools(tools, call_format=renderer.call_format, may_call=may_call),
        max_tokens=max_tokens,
        force_tool_call=force_tool_call,
    )


class ShapedEngine(ABC):
    """An engine that renders and constrains a turn here, then generates it its own way."""

    renderer: PromptRenderer
    _grammars: ToolCallGrammars

    def _grammar_for(self, tools: Sequence[Mapping[str, Any]]) -> str | None:
        """The tool-call grammar for ``tools`` with this engine's model (built once)."""
        return self._grammars.for_tools(tools, call_format=self.renderer.call_format)

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        max_tokens: int | None = None,
        force_tool_call: bool = False,
        may_call: Collection[str] | None = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        """One assistant turn (the Backend interface). ``may_call``: the tools of ``tools`` the
        turn may call (None: all); the others stay in the prompt, the grammar refuses them."""
        request = shape_request(
            self.renderer,
            self._grammars,
            messages,
            tools,
            enable_thinking=enable_thinking,
            may_call=may_call,
            max_tokens=max_tokens,
            force_tool_call=force_tool_call,
        )
        yield from self.carry(request, cancel)

    def _before_user_turn(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> str:
        """The conversation as the next request on it renders it, up to where its user turn's
        text begins (rendered twice, with two placeholder user messages: where they part)."""
        first, second = (
            self.renderer.render(
                [*messages, {"role": "user", "content": placeholder}],
                tools,
                enable_thinking=enable_thinking,
                add_generation_prompt=False,
            ).text
            for placeholder in ("a", "b")
        )
        shared = next(
            (i for i, (x, y) in enumerate(zip(first, second, strict=False)) if x != y),
            min(len(first), len(second)),
        )
        return first[:shared]

    @staticmethod
    def _prompt_to_generate(
        prompt: str, grammar: str | None, started_in_thinking: bool, force_tool_call: bool
    ) -> str:
        """The text an engine evaluates for ``prompt``: a forced tool call starts it with
        ``<tool_call>`` (the model must call a tool, the grammar holds it from its first token)."""
        if not force_tool_call:
            return prompt
        if grammar is None or started_in_thinking:
            raise ModelError(
                "A forced tool call needs the tool-call grammar and no open thinking block."
            )
        return prompt + TOOL_CALL_OPEN

    @staticmethod
    def _room_after(prompt_tokens: int, n_ctx: int, context: str, fix: str) -> int:
        """How many tokens a turn may generate after a prompt of ``prompt_tokens`` in a context
        of ``n_ctx`` (``context`` names it in the error, ``fix`` says what to do if none)."""
        if not prompt_tokens:
            raise ModelError("The prompt is empty.")
        if n_ctx - prompt_tokens < 1:
            raise ModelError(
                f"The conversation ({prompt_tokens} tokens) does not fit {context}.", fix
            )
        return n_ctx - prompt_tokens

    @abstractmethod
    def carry(
        self, request: Request, cancel: threading.Event | None
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        """Generate a shaped request, streaming as ``complete`` does."""
