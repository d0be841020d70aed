"""Prompt-path fidelity: the tokens the engine evaluates against the model's own template."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from botpsy_desktop.core.errors import BotpsyError, ModelError
from botpsy_desktop.eval.oracle import render_call
from botpsy_desktop.eval.runner import offered_tools
from botpsy_desktop.eval.sandbox import SandboxSettings, open_sandbox
from botpsy_desktop.eval.spec import Case
from botpsy_desktop.eval.weather import weather_stand_in
from botpsy_desktop.llm.engines.replay import ReplayBackend
from botpsy_desktop.llm.models.gguf_info import read_gguf_info

FIDELITY_TOOLS = ("get_weather", "set_alarm", "list_alarms")
"""The tools of the scripted conversation (a small set, so it fits small models' context)."""

_CASE = {
    "id": "fidelity",
    "domain": "alarms",
    "category": "multi_step",
    "language": "en",
    "now": "2026-03-10T21:00",
    "time_zone": "Europe/Paris",
    "request": "What's the weather in Lyon tomorrow? If it rains, wake me at 6:30.",
    "tools": list(FIDELITY_TOOLS),
    "expect": {
        "calls": [
            {"tool": "get_weather", "arguments": {"place": "Lyon", "when": "tomorrow"}},
            {"tool": "set_alarm", "arguments": {"time": "6:30", "label": "Rain"}},
        ]
    },
}
_SCRIPT = [
    "<think>\nThe user wants the weather first.\n</think>\n\n"
    + render_call("get_weather", {"place": "Lyon", "when": "tomorrow"}),
    "<think>\nRain is likely, so set the alarm.\n</think>\n\nIt will rain; setting the alarm.\n"
    + render_call("set_alarm", {"time": "6:30", "label": "Rain"}),
    "<think>\nDone, summarise.\n</think>\n\nRain tomorrow in Lyon; your alarm rings at 06:30.",
    render_call("list_alarms", {}),
    "You have one alarm: Rain at 06:30 tomorrow.",
]
_SECOND_REQUEST = "Which alarms do I have?"


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> NoReturn:
    raise jinja2.TemplateError(message)


def reference_render(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    *,
    enable_thinking: bool,
    bos_token: str,
    eos_token: str,
) -> str:
    """The prompt as Hugging Face's apply_chat_template renders it (jinja2 sandbox, trim and
    lstrip blocks, loopcontrols, its tojson, raise_exception, strftime_now), written apart
    from the app's renderer on purpose."""
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template).render(
        messages=[dict(m) for m in messages],
        tools=[dict(t) for t in tools] or None,
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
        bos_token=bos_token,
        eos_token=eos_token,
    )


def reference_template(model: Path) -> tuple[str, str]:
    """The template the model should be prompted with, and where it came from: the GGUF's own,
    or (when it has no tool support) botpsy-desktop's documented ChatML fallback."""
    template = read_gguf_info(model).chat_template
    if template and "tools" in template:
        return template, "the GGUF's chat template"
    fallback = resources.files("botpsy_desktop.llm.language") / "templates" / "chatml_tools.jinja"
    return fallback.read_text(encoding="utf-8"), "the ChatML tool fallback (no tools in the GGUF's)"


def conversation() -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The prompts of a scripted two-request conversation with thinking, tool calls and real
    tool results, as the app's loop builds them on a sandbox; and the tool schemas."""
    from botpsy_desktop.agent.loop import AgentSession

    case = Case.model_validate(_CASE)
    replay = ReplayBackend(_SCRIPT)
    with weather_stand_in() as stand_in, open_sandbox(case, SandboxSettings(stand_in)) as box:
        registry = offered_tools(case, box.app.registry, "app")
        session = AgentSession(
            replay, registry, box.app.gate, box.app.store, box.app.loop_settings()
        )
        for request in (case.conversation[-1].user, _SECOND_REQUEST):
            for event in session.run(request, think=True):
                request_obj = getattr(event, "request", None)
                if request_obj is not None:
                    request_obj.approve(by="fidelity check")
        tools = registry.schemas()
    return [list(map(dict, p)) for p in replay.prompts], tools


@dataclass
class FidelityResult:
    model: str
    template: str
    prompts: int = 0
    tokens: int = 0
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.prompts > 0 and not self.mismatches

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "template": self.template,
            "prompts": self.prompts,
            "tokens": self.tokens,
            "ok": self.ok,
            "mismatches": self.mismatches,
        }


def check_fidelity(
    model: Path,
    backend: Any,
    *,
    thinking: Sequence[bool] = (False, True),
    every_prompt: bool = True,
    template: str | None = None,
    evaluate: bool = True,
) -> FidelityResult:
    """Feed the prompts of the scripted conversation to ``backend`` (a loaded LlamaBackend, in
    order, generating one token each, for each ``thinking`` mode) and compare the tokens it
    evaluated with the reference rendering tokenized in one piece. ``every_prompt`` False
    keeps only the last prompt (both requests, every kind of message); ``template``
    replaces the reference template (to show the check sees a difference); ``evaluate``
    False asks the engine for the tokens it would evaluate on a fresh context, without the
    prefill (the rendering and tokenization, not the reuse of evaluated tokens)."""
    reference, origin = reference_template(model)
    if template is not None:
        reference, origin = template, "a given template"
    result = FidelityResult(str(model), origin)
    prompts, tools = conversation()
    if not every_prompt:
        prompts = prompts[-1:]
    renderer = backend.renderer
    for think in thinking:
        backend.reset()
        for i, messages in enumerate(prompts):
            try:
                text = reference_render(
                    reference,
                    messages,
                    tools,
                    enable_thinking=think,
                    bos_token=renderer.bos_token,
                    eos_token=renderer.eos_token,
                )
            except jinja2.TemplateError as exc:
                raise ModelError(f"The reference rendering failed: {exc}.") from exc
            want = backend.tokenize(text)
            try:
                if evaluate:
                    for _ in backend.complete(messages, tools, enable_thinking=think, max_tokens=1):
                        pass
                    got = list(backend.last_prompt_tokens)
                else:
                    backend.reset()
                    got = backend.prompt_tokens(messages, tools, enable_thinking=think)
            except BotpsyError as exc:
                result.mismatches.append(f"prompt {i + 1} (think={think}): {exc}")
                continue
            result.prompts += 1
            result.tokens += len(got)
            if got != want:
                at = next(
                    (k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                    min(len(got), len(want)),
                )
                result.mismatches.append(
                    f"prompt {i + 1} (think={think}): {len(got)} tokens evaluated, {len(want)} "
                    f"in the reference; first difference at token {at}: "
                    f"{got[at : at + 8]} vs {want[at : at + 8]}"
                )
    return result
