"""One request shape for every engine: the rendered prompt, the tool-call grammar, the limits."""

from __future__ import annotations

from pathlib import Path

import pytest

from botpsy_desktop.core.config import ModelSettings
from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.language.prompt import PromptRenderer
from botpsy_desktop.llm.request import ShapedEngine, ToolCallGrammars, shape_request
from tests.helpers.models import sdist_assets
from tests.helpers.tool_schemas import TOOLS

MESSAGES = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "Wake me at seven."},
]


@pytest.fixture(scope="module")
def qwen_renderer() -> PromptRenderer:
    """BotPsy's own chat template (Qwen3.5's, from llama.cpp's sources): XML tool calls."""
    _, template = sdist_assets()
    return PromptRenderer(Path(template).read_text(encoding="utf-8"))


def test_a_request_renders_every_tool_and_constrains_calls_to_the_callable_ones(
    qwen_renderer: PromptRenderer,
) -> None:
    grammars = ToolCallGrammars(ModelSettings(), lambda: True)
    request = shape_request(
        qwen_renderer,
        grammars,
        MESSAGES,
        TOOLS,
        enable_thinking=False,
        may_call={"get_weather"},
        max_tokens=32,
    )
    rendered = qwen_renderer.render(MESSAGES, TOOLS, enable_thinking=False)
    assert request.prompt == rendered.text
    assert "set_alarm" in request.prompt and "get_weather" in request.prompt
    assert request.grammar is not None
    assert "get_weather" in request.grammar and "set_alarm" not in request.grammar
    assert request.options() == {
        "started_in_thinking": rendered.started_in_thinking,
        "grammar": request.grammar,
        "max_tokens": 32,
        "force_tool_call": False,
    }
    every = grammars.for_tools(TOOLS, call_format="xml")
    assert every is not None and "set_alarm" in every and "get_weather" in every
    # built once for each set of callable tools
    assert grammars.for_tools(TOOLS, call_format="xml", may_call={"get_weather"}) is request.grammar
    # a name outside the tools leaves every tool callable (a grammar must allow some call)
    assert grammars.for_tools(TOOLS, call_format="xml", may_call={"nothing"}) is every


def test_no_grammar_without_tools_constraint_or_xml_calls(qwen_renderer: PromptRenderer) -> None:
    constrained = ToolCallGrammars(ModelSettings(), lambda: True)
    assert constrained.for_tools([], call_format="xml") is None
    assert constrained.for_tools(TOOLS, call_format="json") is None  # the ChatML fallback
    free = ToolCallGrammars(ModelSettings(constrain_tool_calls=False), lambda: True)
    request = shape_request(qwen_renderer, free, MESSAGES, TOOLS, enable_thinking=False)
    assert request.grammar is None


def test_a_forced_tool_call_needs_the_grammar_and_no_open_thinking() -> None:
    assert ShapedEngine._prompt_to_generate("P", "root ::= x", False, True) == "P<tool_call>"
    assert ShapedEngine._prompt_to_generate("P", None, False, False) == "P"
    for grammar, thinking in ((None, False), ("root ::= x", True)):
        with pytest.raises(ModelError, match="forced tool call"):
            ShapedEngine._prompt_to_generate("P", grammar, thinking, True)


def test_room_left_for_the_answer() -> None:
    assert ShapedEngine._room_after(100, 128, "the context", "Fix it.") == 28
    with pytest.raises(ModelError, match="empty"):
        ShapedEngine._room_after(0, 128, "the context", "Fix it.")
    with pytest.raises(ModelError, match=r"\(128 tokens\) does not fit the context"):
        ShapedEngine._room_after(128, 128, "the context", "Fix it.")
