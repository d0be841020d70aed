"""Tests for the BotPsy completion parser and the streaming splitter."""

from __future__ import annotations

import json
import re
from typing import Any

import jinja2.sandbox
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from botpsy_desktop.llm.language import parser
from botpsy_desktop.llm.language.parser import CUT_OFF_MESSAGE, StreamSplitter, parse_turn
from botpsy_desktop.llm.types import ParsedTurn, ToolCall, ToolCallError

# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def make_tool(name: str, **props: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": props, "required": []},
        },
    }


WEATHER = make_tool(
    "get_weather",
    city={"type": "string"},
    days={"type": "integer"},
    metric={"type": "boolean"},
)
ALARM = make_tool(
    "set_alarm",
    time={"type": "string"},
    label={"type": "string"},
    repeat={"type": "array", "items": {"type": "string"}},
)
TOOLS = [WEATHER, ALARM]


def render_call(name: str, arguments: dict[str, Any]) -> str:
    """One call exactly as the Qwen3.5 template renders it (without the separator before it)."""
    out = f"<tool_call>\n<function={name}>\n"
    for key, value in arguments.items():
        text = json.dumps(value) if isinstance(value, (dict, list)) else str(value)
        out += f"<parameter={key}>\n{text}\n</parameter>\n"
    return out + "</function>\n</tool_call>"


def render_assistant(content: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Assistant content plus tool calls, as the Qwen3.5 template renders them."""
    out = content
    for i, (name, arguments) in enumerate(calls):
        if i == 0:
            out += "\n\n" if content.strip() else ""
        else:
            out += "\n"
        out += render_call(name, arguments)
    return out


# The assistant tool-call part of the Qwen3.5 chat template, copied verbatim.
_TEMPLATE_SOURCE = """{{- content }}
{%- for tool_call in tool_calls %}
    {%- if tool_call.function is defined %}
        {%- set tool_call = tool_call.function %}
    {%- endif %}
    {%- if loop.first %}
        {%- if content|trim %}
            {{- '\\n\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
        {%- else %}
            {{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '\\n<tool_call>\\n<function=' + tool_call.name + '>\\n' }}
    {%- endif %}
    {%- if tool_call.arguments is defined %}
        {%- for args_name, args_value in tool_call.arguments|items %}
            {{- '<parameter=' + args_name + '>\\n' }}
            {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
            {{- args_value }}
            {{- '\\n</parameter>\\n' }}
        {%- endfor %}
    {%- endif %}
    {{- '</function>\\n</tool_call>' }}
{%- endfor %}"""  # noqa: E501
_TEMPLATE = jinja2.sandbox.ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True
).from_string(_TEMPLATE_SOURCE)


def render_with_jinja(content: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    tool_calls = [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]
    return _TEMPLATE.render(content=content, tool_calls=tool_calls)


def calls_of(turn: ParsedTurn) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in turn.tool_calls]


def only_error(turn: ParsedTurn) -> ToolCallError:
    assert len(turn.calls) == 1, turn.calls
    call = turn.calls[0]
    assert isinstance(call, ToolCallError), call
    return call


def split_stream(text: str, chunks: list[str], started_in_thinking: bool) -> tuple[str, str, int]:
    splitter = StreamSplitter(started_in_thinking)
    events: list[tuple[str, str]] = []
    for chunk in chunks:
        events.extend(splitter.feed(chunk))
    events.extend(splitter.finish())
    assert "".join(chunks) == text
    thinking = "".join(t for kind, t in events if kind == "thinking")
    visible = "".join(t for kind, t in events if kind == "text")
    starts = sum(1 for kind, _ in events if kind == "tool_call_start")
    assert all(t == "" for kind, t in events if kind == "tool_call_start")
    return thinking, visible, starts


# --------------------------------------------------------------------------------------------
# Thinking and content
# --------------------------------------------------------------------------------------------


def test_plain_answer_without_thinking() -> None:
    turn = parse_turn("  The capital of France is Paris.\n")
    assert turn == ParsedTurn(thinking="", content="The capital of France is Paris.", calls=[])


def test_prompt_ended_inside_thinking() -> None:
    text = "The user wants the weather.\n</think>\n\nLet me check."
    for flag in (True, False):  # a </think> without <think> is recognised either way
        turn = parse_turn(text, started_in_thinking=flag)
        assert turn.thinking == "The user wants the weather."
        assert turn.content == "Let me check."


def test_think_block_at_start() -> None:
    turn = parse_turn("<think>\nShort plan.\n</think>\n\nHello!")
    assert (turn.thinking, turn.content) == ("Short plan.", "Hello!")
    turn = parse_turn("\n<think>\nplan</think>Hi", started_in_thinking=True)
    assert (turn.thinking, turn.content) == ("plan", "Hi")


def test_empty_think_block() -> None:
    turn = parse_turn("<think>\n\n</think>\n\nHi there")
    assert (turn.thinking, turn.content) == ("", "Hi there")


@pytest.mark.parametrize(
    ("text", "flag"),
    [
        ("<think>\nI should call get_weather for", False),
        ("I should call get_weather for", True),
        ("I might use <tool_call>\n<function=get_weather>", True),
    ],
)
def test_unclosed_thinking_is_all_thinking(text: str, flag: bool) -> None:
    turn = parse_turn(text, TOOLS, started_in_thinking=flag)
    assert turn.thinking == text.removeprefix("<think>").strip()
    assert turn.content == ""
    assert turn.calls == []


def test_only_the_first_close_ends_thinking() -> None:
    turn = parse_turn("a</think>b</think>c", started_in_thinking=True)
    assert (turn.thinking, turn.content) == ("a", "b</think>c")


@pytest.mark.parametrize("marker", ["<|im_end|>", "<|endoftext|>"])
def test_end_markers_are_stripped(marker: str) -> None:
    turn = parse_turn(f"<think>x</think>\nDone.{marker}")
    assert (turn.thinking, turn.content) == ("x", "Done.")
    turn = parse_turn(f"Done.{marker}\n<|im_start|>user\nmore<tool_call>")
    assert (turn.content, turn.calls) == ("Done.", [])


# --------------------------------------------------------------------------------------------
# XML tool calls
# --------------------------------------------------------------------------------------------


def test_single_xml_call() -> None:
    block = render_call("get_weather", {"city": "Paris", "days": 3, "metric": True})
    turn = parse_turn(block, TOOLS)
    assert turn.content == ""
    assert turn.calls == [
        ToolCall(
            "get_weather", {"city": "Paris", "days": 3, "metric": True}, raw=block, format="xml"
        )
    ]


def test_several_calls_with_text_before() -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_weather", {"city": "Paris", "days": 2}),
        ("set_alarm", {"time": "07:30", "repeat": ["mon", "tue"]}),
        ("get_weather", {"city": "Rome", "metric": False}),
    ]
    text = "<think>\nTwo tools.\n</think>\n\n" + render_assistant("On it.", calls)
    turn = parse_turn(text, TOOLS)
    assert turn.thinking == "Two tools."
    assert turn.content == "On it."
    assert calls_of(turn) == calls
    assert turn.errors == []
    assert [c.raw for c in turn.tool_calls] == [render_call(n, a) for n, a in calls]


def test_python_renderer_matches_the_jinja_template() -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_weather", {"city": "Paris", "days": 2, "metric": True}),
        ("set_alarm", {"repeat": ["mon", "<tue>"], "label": {"a": 1}}),
    ]
    for content in ("", "Checking."):
        assert render_with_jinja(content, calls) == render_assistant(content, calls).replace(
            '"<tue>"', '"\\u003ctue\\u003e"'
        )


def test_text_between_and_after_calls_is_content() -> None:
    one = render_call("get_weather", {"city": "Oslo"})
    turn = parse_turn(f"First. {one} Then. {one}\nDone.", TOOLS)
    assert turn.content == "First.  Then. \nDone."
    assert len(turn.tool_calls) == 2


def test_multiline_value_keeps_inner_whitespace() -> None:
    value = "  line one\n\n\tline two  \n"
    block = render_call("set_alarm", {"label": value})
    assert parse_turn(block, TOOLS).tool_calls[0].arguments == {"label": value}


@pytest.mark.parametrize(
    "value",
    [
        "a < b and b > c",
        "</param",
        "x </parameter",
        "<parameter=label>",
        "inline </parameter> tag",
        "ends with </parameter>",
        "</function> and <function=x>",
        "<",
        "",
        "\n",
    ],
)
def test_values_with_tag_fragments(value: str) -> None:
    block = render_call("set_alarm", {"label": value, "time": "9:00"})
    turn = parse_turn(block, TOOLS)
    assert calls_of(turn) == [("set_alarm", {"label": value, "time": "9:00"})]


def test_tolerates_missing_newlines_and_spaces_in_names() -> None:
    text = (
        "<tool_call><function= get_weather ><parameter= city >Paris</parameter>"
        "<parameter=days>4</parameter></function></tool_call>"
    )
    assert calls_of(parse_turn(text, TOOLS)) == [("get_weather", {"city": "Paris", "days": 4})]


def test_tolerates_missing_function_close_in_a_closed_block() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</tool_call>"
    )
    assert calls_of(parse_turn(text, TOOLS)) == [("get_weather", {"city": "Paris"})]


def test_call_without_parameters() -> None:
    text = "<tool_call>\n<function=list_alarms>\n</function>\n</tool_call>"
    assert calls_of(parse_turn(text, TOOLS)) == [("list_alarms", {})]


def test_two_functions_in_one_block() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n</function>\n"
        "<function=get_weather>\n<parameter=city>\nB\n</parameter>\n</function>\n</tool_call>"
    )
    turn = parse_turn(text, TOOLS)
    assert calls_of(turn) == [("get_weather", {"city": "A"}), ("get_weather", {"city": "B"})]
    assert all(c.raw.startswith("<function=") for c in turn.tool_calls)


def test_unknown_function_and_parameter_keep_raw_strings() -> None:
    text = render_call("launch_rocket", {"count": 3}) + render_call(
        "get_weather", {"city": "Paris", "mood": "True"}
    )
    turn = parse_turn(text, TOOLS)
    assert turn.errors == []
    assert calls_of(turn) == [
        ("launch_rocket", {"count": "3"}),
        ("get_weather", {"city": "Paris", "mood": "True"}),
    ]


def test_without_tools_values_stay_strings() -> None:
    block = render_call("get_weather", {"days": 3, "metric": True})
    assert calls_of(parse_turn(block)) == [("get_weather", {"days": "3", "metric": "True"})]


# --------------------------------------------------------------------------------------------
# Malformed XML calls
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "fragment", "name"),
    [
        ("<tool_call>\n</tool_call>", "no <function=NAME>", None),
        ("<tool_call>\nget_weather(city='Paris')\n</tool_call>", "no <function=NAME>", None),
        (
            "<tool_call>\n<function=get_weather\n<parameter=city>\nParis\n</parameter>\n"
            "</function>\n</tool_call>",
            "not closed with '>'",
            None,
        ),
        ("<tool_call>\n<function=>\n</function>\n</tool_call>", "empty function name", None),
        (
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</function>\n"
            "</tool_call>",
            'Parameter "city" in your call to get_weather has no closing </parameter>',
            "get_weather",
        ),
        (
            "<tool_call>\n<function=get_weather>\n<parameter=city\nParis\n</parameter>\n"
            "</function>\n</tool_call>",
            "<parameter= tag in your call to get_weather is not closed",
            "get_weather",
        ),
        (
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\n"
            "<parameter=city>\nB\n</parameter>\n</function>\n</tool_call>",
            'Parameter "city" appears twice in your call to get_weather',
            "get_weather",
        ),
        (
            "<tool_call>\n<function=get_weather>\ncity: Paris\n</function>\n</tool_call>",
            'Unexpected text "city: Paris" in your call to get_weather',
            "get_weather",
        ),
        (
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nA\n</parameter>\njunk\n"
            "</function>\n</tool_call>",
            'Unexpected text after </parameter> of "city"',
            "get_weather",
        ),
    ],
)
def test_malformed_calls_get_specific_messages(text: str, fragment: str, name: str | None) -> None:
    turn = parse_turn("Sure. " + text + " ok", TOOLS)
    error = only_error(turn)
    assert fragment in error.message
    assert error.raw == text
    assert error.name == name
    assert turn.content == "Sure.  ok"


def test_unclosed_block_is_reported_as_cut_off() -> None:
    text = "Checking.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"
    turn = parse_turn(text, TOOLS)
    error = only_error(turn)
    assert error.message == CUT_OFF_MESSAGE
    assert error.raw == text[text.index("<tool_call>") :]
    assert error.name == "get_weather"
    assert turn.content == "Checking."


def test_complete_function_without_tool_call_close_is_accepted() -> None:
    block = render_call("get_weather", {"city": "Paris"}).removesuffix("</tool_call>")
    assert calls_of(parse_turn(block, TOOLS)) == [("get_weather", {"city": "Paris"})]


def test_new_tool_call_before_close_abandons_the_first() -> None:
    text = "<tool_call>\n<function=get_weather>\n<parameter=ci" + render_call(
        "get_weather", {"city": "Paris"}
    )
    turn = parse_turn(text, TOOLS)
    assert isinstance(turn.calls[0], ToolCallError)
    assert turn.calls[0].message == CUT_OFF_MESSAGE
    assert calls_of(turn) == [("get_weather", {"city": "Paris"})]


# --------------------------------------------------------------------------------------------
# JSON (Hermes) tool calls
# --------------------------------------------------------------------------------------------


def test_json_call_with_object_arguments() -> None:
    inner = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
    text = f"Sure.<tool_call>\n{inner}\n</tool_call>"
    turn = parse_turn(text, TOOLS)
    assert turn.content == "Sure."
    (call,) = turn.tool_calls
    assert (call.name, call.arguments, call.format) == (
        "get_weather",
        {"city": "Paris", "days": 2},
        "json",
    )
    assert call.raw == text[5:]


def test_json_call_with_string_arguments_converts_values() -> None:
    args = json.dumps({"days": "4", "metric": "true", "city": "Rome"})
    text = f"<tool_call>{json.dumps({'name': 'get_weather', 'arguments': args})}</tool_call>"
    assert calls_of(parse_turn(text, TOOLS)) == [
        ("get_weather", {"days": 4, "metric": True, "city": "Rome"})
    ]


def test_json_call_variants() -> None:
    text = '<tool_call>{"function": {"name": "get_weather", "parameters": {"days": 1}}}</tool_call>'
    assert calls_of(parse_turn(text, TOOLS)) == [("get_weather", {"days": 1})]
    text = '<tool_call>{"name": "list_alarms"}</tool_call>'
    assert calls_of(parse_turn(text, TOOLS)) == [("list_alarms", {})]


@pytest.mark.parametrize(
    ("inner", "fragment"),
    [
        ('{"name": "get_weather", "arguments": {"city": "Paris"}', "not valid JSON"),
        ('{"name": "get_weather", "arguments": {"city": Paris}}', "not valid JSON"),
        ('{"name": "get_weather"} extra', "Unexpected text after the JSON object"),
        ('{"arguments": {}}', 'no "name" string'),
        ('{"name": "get_weather", "arguments": "Paris"}', 'The "arguments" of your call'),
        ('{"name": "get_weather", "arguments": [1]}', 'The "arguments" of your call'),
        ('{"name": "a", "name": "b"}', 'Key "name" appears twice'),
        ('{"name": "get_weather", "arguments": {"days": 3.5}}', 'Parameter "days"'),
    ],
)
def test_bad_json_calls(inner: str, fragment: str) -> None:
    error = only_error(parse_turn(f"<tool_call>\n{inner}\n</tool_call>", TOOLS))
    assert fragment in error.message
    assert error.raw == f"<tool_call>\n{inner}\n</tool_call>"


def test_truncated_json_call_is_cut_off() -> None:
    error = only_error(parse_turn('<tool_call>\n{"name": "get_weather", "argu', TOOLS))
    assert error.message == CUT_OFF_MESSAGE


# --------------------------------------------------------------------------------------------
# Value conversion
# --------------------------------------------------------------------------------------------


def convert_one(schema: dict[str, Any], raw: str) -> ToolCall | ToolCallError:
    tools = [make_tool("f", p=schema)]
    text = (
        f"<tool_call>\n<function=f>\n<parameter=p>\n{raw}\n</parameter>\n</function>\n</tool_call>"
    )
    (call,) = parse_turn(text, tools).calls
    return call


@pytest.mark.parametrize(
    ("schema", "raw", "expected"),
    [
        ({"type": "string"}, " spaced \n", " spaced \n"),
        ({"type": "string"}, "42", "42"),
        ({"type": "string"}, "null", "null"),
        ({"type": "integer"}, "42", 42),
        ({"type": "integer"}, " -7 ", -7),
        ({"type": "integer"}, "3.0", 3),
        ({"type": "integer"}, "1e3", 1000),
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "number"}, "3", 3),
        ({"type": "number"}, "-1.5e-3", -0.0015),
        ({"type": "boolean"}, "true", True),
        ({"type": "boolean"}, "True", True),
        ({"type": "boolean"}, "FALSE", False),
        ({"type": "array"}, '["a", 1]', ["a", 1]),
        ({"type": "array"}, "['a', 'b']", ["a", "b"]),
        ({"type": "array"}, "(1, 2)", [1, 2]),
        ({"type": "array", "items": {"type": "integer"}}, '["1", 2]', [1, 2]),
        ({"type": "object"}, '{"k": [1, {"x": null}]}', {"k": [1, {"x": None}]}),
        ({"type": "object"}, "{'k': True, 'n': None}", {"k": True, "n": None}),
        (
            {"type": "object", "properties": {"n": {"type": "integer"}}},
            '{"n": "5", "s": "x"}',
            {"n": 5, "s": "x"},
        ),
        ({"type": "string", "enum": ["celsius", "fahrenheit"]}, "celsius", "celsius"),
        ({"type": "string", "enum": ["celsius", "fahrenheit"]}, " celsius ", "celsius"),
        ({"type": "integer", "enum": [1, 2, 3]}, "2", 2),
        ({"enum": [1, "two"]}, "1", 1),
        ({"enum": [1, "two"]}, "two", "two"),
        ({"type": ["integer", "string"]}, "5", 5),
        ({"type": ["integer", "string"]}, "five", "five"),
        ({"type": ["string", "integer"]}, "5", "5"),
        ({"anyOf": [{"type": "boolean"}, {"type": "array"}]}, "[true]", [True]),
        ({"anyOf": [{"type": "integer"}, {"type": "null"}]}, "None", None),
        ({"type": ["string", "null"]}, "null", None),
        ({"type": "integer", "nullable": True}, "null", None),
        ({"description": "untyped"}, "[1, 2]", "[1, 2]"),
    ],
)
def test_conversion(schema: dict[str, Any], raw: str, expected: Any) -> None:
    call = convert_one(schema, raw)
    assert isinstance(call, ToolCall), call
    assert call.arguments == {"p": expected}
    assert type(call.arguments["p"]) is type(expected)


@pytest.mark.parametrize(
    ("schema", "raw", "expected", "instead"),
    [
        ({"type": "integer"}, "3.5", "an integer", "a whole number"),
        ({"type": "integer"}, "three", "an integer", "a whole number"),
        ({"type": "integer"}, "1_000", "an integer", "a whole number"),
        ({"type": "integer"}, "true", "an integer", "a whole number"),
        ({"type": "integer"}, "None", "an integer", "a whole number"),
        ({"type": "integer"}, "1e999999999", "an integer", "a whole number"),
        ({"type": "number"}, "abc", "a number", "a number such as"),
        ({"type": "number"}, "inf", "a number", "a number such as"),
        ({"type": "number"}, "NaN", "a number", "a number such as"),
        ({"type": "boolean"}, "yes", "a boolean", "true or false"),
        ({"type": "array"}, "[a, b]", "a JSON array", 'such as ["a", "b"]'),
        ({"type": "array"}, '{"a": 1}', "a JSON array", "a JSON array"),
        ({"type": "array"}, "__import__('os')", "a JSON array", "a JSON array"),
        ({"type": "array"}, "{1, 2}", "a JSON array", "a JSON array"),
        ({"type": "object"}, "[1]", "a JSON object", 'such as {"key": "value"}'),
        ({"type": "object"}, "{1: 2}", "a JSON object", "a JSON object"),
        (
            {"type": "array", "items": {"type": "integer"}},
            '["x"]',
            "a JSON array whose items are each an integer",
            "a whole number",
        ),
        ({"type": "string", "enum": ["c", "f"]}, "k", 'one of "c", "f"', "exactly one of"),
        ({"type": ["integer", "boolean"]}, "x", "an integer or a boolean", "true or false"),
        (
            {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "x",
            "an integer or null",
            "a whole number",
        ),
    ],
)
def test_conversion_errors(schema: dict[str, Any], raw: str, expected: str, instead: str) -> None:
    call = convert_one(schema, raw)
    assert isinstance(call, ToolCallError), call
    assert call.name == "f"
    assert call.message.startswith('Parameter "p" of f must be ')
    assert expected in call.message
    assert instead in call.message
    assert "send the call again with" in call.message


def test_all_bad_parameters_are_reported_together() -> None:
    block = render_call("get_weather", {"city": "Paris", "days": "two", "metric": "maybe"})
    error = only_error(parse_turn(block, TOOLS))
    assert '"days"' in error.message
    assert '"metric"' in error.message
    assert error.name == "get_weather"


def test_long_values_are_shortened_in_messages() -> None:
    error = only_error(parse_turn(render_call("get_weather", {"days": "9" * 500 + "x"}), TOOLS))
    assert len(error.message) < 300


# --------------------------------------------------------------------------------------------
# Truncation
# --------------------------------------------------------------------------------------------


def test_truncation_at_every_position_of_xml_calls() -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_weather", {"city": "Paris\nFrance", "days": 12, "metric": True}),
        ("set_alarm", {"label": "a < b </param", "repeat": ["mon", "tue"]}),
    ]
    full = "<think>\nplan\n</think>\n\n" + render_assistant("Checking both.", calls)
    assert calls_of(parse_turn(full, TOOLS)) == calls
    function_ends = [m.end() for m in re.finditer("</function>", full)]
    for cut in range(len(full) + 1):
        turn = parser._parse_turn_unsafe(full[:cut], TOOLS, False)
        assert len(turn.calls) <= len(calls)
        for i, call in enumerate(turn.calls):
            if cut >= function_ends[i]:
                assert isinstance(call, ToolCall), (cut, call)
                assert (call.name, call.arguments) == calls[i]
            else:
                assert isinstance(call, ToolCallError), (cut, call)
                assert call.message == CUT_OFF_MESSAGE


def test_truncation_at_every_position_of_a_json_call() -> None:
    inner = json.dumps({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}})
    full = f"<tool_call>\n{inner}\n</tool_call>"
    object_end = full.index(inner) + len(inner)
    for cut in range(len(full) + 1):
        turn = parser._parse_turn_unsafe(full[:cut], TOOLS, False)
        for call in turn.calls:
            if cut >= object_end:
                assert isinstance(call, ToolCall)
                assert call.arguments == {"city": "Paris", "days": 2}
            else:
                assert isinstance(call, ToolCallError)
                assert call.message == CUT_OFF_MESSAGE


# --------------------------------------------------------------------------------------------
# Streaming splitter
# --------------------------------------------------------------------------------------------


def test_splitter_char_by_char() -> None:
    text = "plan</think>\n\nSure." + render_call("get_weather", {"city": "Paris"}) + "<|im_end|>"
    splitter = StreamSplitter(started_in_thinking=True)
    events: list[tuple[str, str]] = []
    for ch in text:
        events.extend(splitter.feed(ch))
    events.extend(splitter.finish())
    kinds = [k for k, _ in events]
    assert kinds.count("tool_call_start") == 1
    assert kinds.index("tool_call_start") > max(i for i, k in enumerate(kinds) if k == "text")
    assert "".join(t for k, t in events if k == "thinking") == "plan"
    assert "".join(t for k, t in events if k == "text") == "Sure."


def test_splitter_holds_back_possible_tags() -> None:
    splitter = StreamSplitter(started_in_thinking=False)
    assert splitter.feed("<thi") == []
    assert splitter.feed("nk>\nidea") == [("thinking", "idea")]
    assert splitter.feed("</thi") == []
    assert splitter.feed("nk>\n\nAnswer <tool") == [("text", "Answer")]
    assert splitter.feed("_call>\n<function=x>") == [("tool_call_start", "")]
    assert splitter.feed("</function>\n</tool_call> after") == [("text", "  after")]
    assert splitter.finish() == []


def test_splitter_flushes_an_unfinished_tag_as_text() -> None:
    splitter = StreamSplitter(started_in_thinking=False)
    assert splitter.feed("Use the <tool_ca") == [("text", "Use the")]
    assert splitter.finish() == [("text", " <tool_ca")]
    assert splitter.feed("more") == []


def test_splitter_without_thinking_and_leading_close() -> None:
    assert split_stream("Hi <b>", ["Hi <b>"], False) == ("", "Hi <b>", 0)
    assert split_stream("\n</think>\n\nHi", ["\n</th", "ink>\n\nHi"], False) == ("", "Hi", 0)


def test_splitter_stops_at_end_marker() -> None:
    text = "a</think>b<|im_end|>c<tool_call>"
    assert split_stream(text, [text[:13], text[13:]], True) == ("a", "b", 0)


def test_splitter_cannot_take_back_text_when_the_flag_is_wrong() -> None:
    # Documented limitation: parse_turn recognises the thinking afterwards, the stream cannot.
    assert split_stream("idea</think>ok", ["idea</think>ok"], False) == ("", "idea</think>ok", 0)
    assert parse_turn("idea</think>ok").thinking == "idea"


# --------------------------------------------------------------------------------------------
# Property tests
# --------------------------------------------------------------------------------------------

VOCABULARY = [
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "<|im_end|>",
    "<|endoftext|>",
    "<thi",
    "</tool",
    "<|im",
    "get_weather",
    "set_alarm",
    "city",
    "days",
    "metric",
    "repeat",
    "Paris",
    "3",
    "3.5",
    "True",
    "null",
    "['a']",
    '{"name": "get_weather", "arguments": {"days": "2"}}',
    '"arguments"',
    "{",
    "}",
    "[",
    "<",
    ">",
    "=",
    "/",
    "\n",
    " ",
]
SCHEMA_ZOO = make_tool(
    "f",
    a={"anyOf": [{"type": "integer"}, {"type": "array", "items": {"type": "boolean"}}]},
    b={"type": ["number", "null"], "enum": [1, 2.5, None]},
    c={"type": "object", "properties": {"x": {"type": "integer"}}},
)
tag_soup = st.lists(st.one_of(st.sampled_from(VOCABULARY), st.text(max_size=4)), max_size=40).map(
    "".join
)


@given(text=st.one_of(st.text(), tag_soup), flag=st.booleans())
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_parse_turn_never_raises(text: str, flag: bool) -> None:
    turn = parser._parse_turn_unsafe(text, [*TOOLS, SCHEMA_ZOO], flag)
    assert turn == parse_turn(text, [*TOOLS, SCHEMA_ZOO], started_in_thinking=flag)
    for call in turn.calls:
        assert isinstance(call, (ToolCall, ToolCallError))
        assert call.raw
        if isinstance(call, ToolCallError):
            assert call.message


_SPECIAL = ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>", "<|endoftext|>")
_AMBIGUOUS_CLOSE = re.compile(r"</parameter>\s*(?:<parameter=|</function>)")


def value_is_renderable(value: str) -> bool:
    """Values the model can express: no special tokens and no end-of-value lookalike."""
    return (
        "\n</parameter>" not in value
        and not any(s in value for s in _SPECIAL)
        and not _AMBIGUOUS_CLOSE.search(value)
    )


names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,12}", fullmatch=True)
plain_chars = st.characters(codec="utf-8", exclude_characters="\n")
single_line = st.text(
    st.characters(codec="utf-8").filter(lambda c: c.isprintable() and not c.isspace()),
    min_size=1,
    max_size=12,
)
multi_line = st.lists(
    st.one_of(
        st.text(plain_chars, max_size=8),
        st.sampled_from(["\n", " ", "\t", "<", ">", "</param", "</parameter>", "<parameter=x>"]),
    ),
    max_size=12,
).map("".join)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
PARAM_KINDS: dict[str, tuple[dict[str, Any], st.SearchStrategy[Any]]] = {
    "string": ({"type": "string"}, st.one_of(single_line, multi_line).filter(value_is_renderable)),
    "integer": ({"type": "integer"}, st.integers()),
    "number": ({"type": "number"}, st.floats(allow_nan=False, allow_infinity=False)),
    "boolean": ({"type": "boolean"}, st.booleans()),
    "array": ({"type": "array"}, st.lists(json_scalars, max_size=4)),
    "object": ({"type": "object"}, st.dictionaries(st.text(max_size=4), json_scalars, max_size=3)),
}


@st.composite
def tool_calls(draw: st.DrawFn) -> tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]]:
    fn_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    calls: list[tuple[str, dict[str, Any]]] = []
    tools: list[dict[str, Any]] = []
    for fn in fn_names:
        params = draw(st.dictionaries(names, st.sampled_from(sorted(PARAM_KINDS)), max_size=4))
        arguments = {p: draw(PARAM_KINDS[kind][1]) for p, kind in params.items()}
        calls.append((fn, arguments))
        tools.append(make_tool(fn, **{p: PARAM_KINDS[kind][0] for p, kind in params.items()}))
    return calls, tools


prose = st.text(st.characters(codec="utf-8", exclude_characters="<"), max_size=20)


@given(
    generated=tool_calls(),
    content=prose,
    thinking=prose,
    mode=st.sampled_from(["none", "tag", "flag"]),
)
def test_round_trip_through_the_template(
    generated: tuple[list[tuple[str, dict[str, Any]]], list[dict[str, Any]]],
    content: str,
    thinking: str,
    mode: str,
) -> None:
    calls, tools = generated
    content = content.strip()
    prefix = {
        "none": "",
        "tag": f"<think>\n{thinking}\n</think>\n\n",
        "flag": f"{thinking}\n</think>\n\n",
    }[mode]
    for renderer in (render_assistant, render_with_jinja):
        turn = parser._parse_turn_unsafe(prefix + renderer(content, calls), tools, mode == "flag")
        assert turn.errors == []
        assert calls_of(turn) == calls
        assert turn.content == content
        assert turn.thinking == ("" if mode == "none" else thinking.strip())
        if renderer is render_assistant:
            assert [c.raw for c in turn.tool_calls] == [render_call(n, a) for n, a in calls]


def _diverges(text: str, flag: bool) -> bool:
    """The one case the stream cannot match: visible text followed by an unflagged </think>."""
    cut = parser._cut_at_end_marker(text).lstrip()
    return not flag and not cut.startswith(("<think>", "</think>")) and "</think>" in cut


@given(text=tag_soup, flag=st.booleans(), data=st.data())
def test_stream_splitter_matches_parse_turn(text: str, flag: bool, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    whole = split_stream(text, [text], flag)
    assert split_stream(text, chunks, flag) == whole
    assert split_stream(text, list(text), flag) == whole
    if _diverges(text, flag):
        return
    turn = parse_turn(text, TOOLS, started_in_thinking=flag)
    thinking, visible, starts = whole
    assert thinking == turn.thinking
    assert visible == turn.content
    assert (starts > 0) == bool(turn.calls)
