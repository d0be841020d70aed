"""Render conversations with the model's own Jinja chat template (or the ChatML tool fallback)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any, Literal, NoReturn

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from botpsy_desktop.core.errors import ModelError

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

CallFormat = Literal["xml", "json"]


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Same output as Hugging Face transformers' chat-template tojson filter.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise(message: str) -> NoReturn:
    raise ModelError(f"The chat template refused the conversation: {message}")


def fallback_template() -> str:
    """botpsy-desktop's ChatML tool prompt, used when a model's template has no tool support."""
    return (
        resources.files("botpsy_desktop.llm.language") / "templates" / "chatml_tools.jinja"
    ).read_text(encoding="utf-8")


def supports_tools(template: str) -> bool:
    """A template that never reads the ``tools`` variable cannot show the model its tools."""
    return "tools" in template


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    started_in_thinking: bool  # the prompt ends inside an open <think> block


class PromptRenderer:
    """Renders messages + tools the way the model was trained to read them.

    The model's own template is used when it supports tools (Qwen3.5/BotPsy: tool calls in
    Qwen3-Coder XML). Otherwise the ChatML fallback is used, with tool calls in Hermes JSON.
    """

    def __init__(self, template: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        self.uses_fallback = template is None or not supports_tools(template)
        self.source = fallback_template() if self.uses_fallback or template is None else template
        self.call_format: CallFormat = "json" if self.uses_fallback else "xml"
        if not self.uses_fallback and "<function=" not in self.source:
            self.call_format = "json"
        self.bos_token = bos_token
        self.eos_token = eos_token
        env = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(),
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[jinja2.ext.loopcontrols],
        )
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(self.source)
        except jinja2.TemplateError as exc:
            raise ModelError(
                f"The model's chat template does not compile: {exc}.",
                "Use another GGUF file, or report the model's template to botpsy-desktop.",
            ) from exc

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        enable_thinking: bool = False,
        add_generation_prompt: bool = True,
    ) -> RenderedPrompt:
        try:
            text = self._template.render(
                messages=[dict(m) for m in messages],
                tools=[dict(t) for t in tools] or None,
                add_generation_prompt=add_generation_prompt,
                enable_thinking=enable_thinking,
                bos_token=self.bos_token,
                eos_token=self.eos_token,
                raise_exception=_raise,
                strftime_now=lambda fmt: datetime.now().strftime(fmt),
            )
        except jinja2.TemplateError as exc:
            raise ModelError(f"The chat template failed to render: {exc}.") from exc
        stripped = text.rstrip()
        open_think = stripped.endswith("<think>")
        return RenderedPrompt(text, open_think)
