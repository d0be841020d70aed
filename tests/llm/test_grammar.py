"""The tool-call grammar parses in llama.cpp and accepts exactly the calls the template writes."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

import llama_cpp
import numpy as np
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from botpsy_desktop.llm.language.grammar import (
    VALUE_STOP_TEXTS,
    GrammarCache,
    build_tool_call_grammar,
    gbnf_literal,
    grammar_key,
    rule_slug,
    tool_call_close_text,
)
from botpsy_desktop.llm.language.grammar_check import GrammarError, GrammarMatcher
from tests.helpers.vocab import (
    BOTPSY_ADDED_TOKENS,
    BOTPSY_N_BPE,
    BOTPSY_N_VOCAB,
    botpsy_vocab_path,
    qwen35_vocab_path,
)

TOOL_CALL_CLOSE_ID = BOTPSY_N_BPE + BOTPSY_ADDED_TOKENS.index("</tool_call>")
IM_END_ID = BOTPSY_N_BPE + BOTPSY_ADDED_TOKENS.index("<|im_end|>")


def tool(name: str, properties: Mapping[str, Any], required: list[str] | None = None) -> Any:
    parameters = {"type": "object", "properties": dict(properties), "required": required or []}
    return {
        "type": "function",
        "function": {"name": name, "description": "", "parameters": parameters},
    }


WEATHER = tool(
    "get_weather",
    {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1},
        "units": {"type": "string", "enum": ["metric", "imperial"]},
    },
    ["city"],
)
EVENT = tool(
    "calendar.create_event",
    {
        "title": {"type": "string", "minLength": 1},
        "attendees": {"type": "array", "items": {"type": "string"}},
        "all_day": {"type": "boolean"},
        "price": {"type": "number"},
        "offset": {"type": "integer"},
        "meta": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        "anything": {},
    },
    ["title"],
)
PING = tool("ping", {})
TOOLS = [WEATHER, EVENT, PING]


def call(name: str, *args: tuple[str, str]) -> str:
    """What the Qwen3.5 template writes after `<tool_call>` for one call."""
    params = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in args)
    return f"\n<function={name}>\n{params}</function>\n</tool_call>"


@pytest.fixture(scope="module")
def llm() -> Iterator[Any]:
    model = llama_cpp.Llama(model_path=str(botpsy_vocab_path()), vocab_only=True, verbose=False)
    yield model
    model.close()


@pytest.fixture(scope="module")
def qwen_llm() -> Iterator[Any]:
    model = llama_cpp.Llama(model_path=str(qwen35_vocab_path()), vocab_only=True, verbose=False)
    yield model
    model.close()


@pytest.fixture(scope="module")
def matcher(llm: Any) -> Iterator[GrammarMatcher]:
    with GrammarMatcher.for_llama(llm, build_tool_call_grammar(TOOLS)) as m:
        yield m


def tokens(llm: Any, text: str) -> list[int]:
    return [int(t) for t in llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)]


def run(m: GrammarMatcher, llm: Any, text: str) -> tuple[int, int]:
    """Feed `text` from the grammar's start; (tokens accepted, tokens in text)."""
    m.reset()
    ids = tokens(llm, text)
    return m.accept_all(ids), len(ids)


def accepted(m: GrammarMatcher, llm: Any, text: str) -> bool:
    done, total = run(m, llm, text)
    return done == total and m.is_complete()


# -- the vocabularies the tests run on ---------------------------------------------------------


def test_botpsy_shaped_vocab_has_the_model_ids(llm: Any) -> None:
    assert llm.n_vocab() == BOTPSY_N_VOCAB
    assert tokens(llm, "</tool_call>") == [TOOL_CALL_CLOSE_ID]
    assert tokens(llm, "<|im_end|>") == [IM_END_ID]
    assert tokens(llm, "<think>") == [248068]


def test_sdist_vocab_is_qwen_bpe_without_tool_tokens(qwen_llm: Any) -> None:
    # Recorded so nobody relies on it for tool tokens: 151,936 entries, `</tool_call>` is text.
    assert qwen_llm.n_vocab() == 151_936
    assert len(tokens(qwen_llm, "</tool_call>")) > 1


# -- llama.cpp facts the grammar relies on ------------------------------------------------------


def test_special_tokens_match_by_their_text(llm: Any, qwen_llm: Any) -> None:
    # USER_DEFINED `</tool_call>` (BotPsy-shaped vocab) and CONTROL `<|im_start|>` (real Qwen
    # vocab) are both checked against a plain text literal by their piece.
    with GrammarMatcher.for_llama(llm, 'root ::= "a" "</tool_call>"') as m:
        m.accept(tokens(llm, "a")[0])
        assert m.accepts(TOOL_CALL_CLOSE_ID)
        assert m.accepts(tokens(llm, "</")[0])
    im_start = tokens(qwen_llm, "<|im_start|>")
    assert len(im_start) == 1
    with GrammarMatcher.for_llama(qwen_llm, 'root ::= "<|im_start|>"') as m:
        assert m.accepts(im_start[0])


def test_end_of_generation_tokens_only_when_complete(llm: Any) -> None:
    with GrammarMatcher.for_llama(llm, 'root ::= "ab"') as m:
        assert not m.accepts(IM_END_ID)
        with pytest.raises(GrammarError):
            m.accept(IM_END_ID)  # llama.cpp itself would abort the process here
        assert m.accept_all(tokens(llm, "ab")) == 1
        assert m.is_complete()
        assert m.accepts(IM_END_ID)
        assert not m.accepts(tokens(llm, "a")[0])


# -- valid calls are accepted token by token -----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        call("get_weather", ("city", "Paris")),
        call("get_weather", ("city", "São Paulo 😀"), ("days", "3"), ("units", "metric")),
        call("get_weather", ("city", "New\nYork"), ("units", "imperial")),
        call("get_weather", ("city", "")),
        call("get_weather", ("city", "a < b, <b>bold</b>, </p>, x</para, <tool_call>, <<")),
        call("get_weather", ("city", 'quotes " and \\ backslashes')),
        call(
            "calendar.create_event",
            ("title", "Lunch"),
            ("attendees", '["ann@example.org", "bob"]'),
            ("all_day", "True"),
            ("price", "-1.5e3"),
            ("offset", "-42"),
            ("meta", '{"a": 1}'),
            ("anything", "whatever </b>"),
        ),
        call("calendar.create_event", ("title", "x"), ("all_day", "false"), ("price", "0.25")),
        call("calendar.create_event", ("title", "x"), ("attendees", "[]")),
        call("ping"),
    ],
)
def test_valid_calls_are_accepted(matcher: GrammarMatcher, llm: Any, text: str) -> None:
    done, total = run(matcher, llm, text)
    assert done == total
    assert matcher.is_complete()


def test_closing_requires_the_special_token(matcher: GrammarMatcher, llm: Any) -> None:
    done, total = run(matcher, llm, "\n<function=ping>\n</function>\n")
    assert done == total
    assert not matcher.is_complete()
    assert matcher.accepts(TOOL_CALL_CLOSE_ID)
    assert not matcher.accepts(tokens(llm, "</")[0])  # no spelling it with ordinary tokens
    assert not matcher.accepts(IM_END_ID)


def test_text_close_accepts_special_token_and_spelling(llm: Any, qwen_llm: Any) -> None:
    grammar = build_tool_call_grammar([PING], close_token=False)
    with GrammarMatcher.for_llama(llm, grammar) as m:
        assert accepted(m, llm, call("ping"))
        m.reset()
        assert m.accept_all(tokens(llm, "\n<function=ping>\n</function>\n</")) > 0
        assert m.accept_all(tokens(llm, "tool_call>")) == len(tokens(llm, "tool_call>"))
        assert m.is_complete()
    # A vocab without a `</tool_call>` token: only the text form parses.
    with pytest.raises(GrammarError):
        GrammarMatcher.for_llama(qwen_llm, build_tool_call_grammar([PING]))
    with GrammarMatcher.for_llama(qwen_llm, grammar) as m:
        assert accepted(m, qwen_llm, call("ping"))


# -- invalid calls are rejected at some token ----------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        call("get_wether", ("city", "Paris")),  # unknown function
        call("get_weather"),  # missing required parameter
        call("get_weather", ("days", "3")),  # missing required parameter
        call("get_weather", ("city", "Paris"), ("days", "three")),  # string for an integer
        call("get_weather", ("city", "Paris"), ("days", "-3")),  # minimum 0 or more: no sign
        call("get_weather", ("city", "Paris"), ("days", "3.5")),
        call("get_weather", ("city", "Paris"), ("units", "kelvin")),  # not in the enum
        call("get_weather", ("city", "Paris"), ("country", "FR")),  # undeclared parameter
        call("get_weather", ("units", "metric"), ("city", "Paris")),  # declared order
        call("get_weather", ("city", "Paris"), ("city", "Lyon")),  # twice
        call("get_weather", ("city", "a</parameter>b")),  # closing tags inside a value
        call("get_weather", ("city", "a</function>b")),
        call("get_weather", ("city", "a</tool_call>b")),
        call("calendar.create_event", ("title", "")),  # minLength 1
        call("calendar.create_event", ("title", "x"), ("all_day", "yes")),
        call("calendar.create_event", ("title", "x"), ("price", "1e")),
        call("calendar.create_event", ("title", "x"), ("attendees", "ann, bob")),
        call("calendar.create_event", ("title", "x"), ("attendees", "[1, 2]")),
        call("calendar.create_event", ("title", "x"), ("meta", "{}")),
        call("ping", ("x", "1")),
        "<function=ping>\n</function>\n</tool_call>",  # no newline after <tool_call>
        "\n<function=ping>\n</function></tool_call>",
        "\n<function=get_weather>\n<parameter=city>\nParis</parameter>\n</function>\n</tool_call>",
    ],
)
def test_invalid_calls_are_rejected(matcher: GrammarMatcher, llm: Any, text: str) -> None:
    done, total = run(matcher, llm, text)
    assert done < total


def test_rejected_token_leaves_state_unchanged(matcher: GrammarMatcher, llm: Any) -> None:
    run(matcher, llm, "\n<function=get_weather>\n<parameter=days>\n")
    with pytest.raises(GrammarError):
        matcher.accept(tokens(llm, "abc")[0])
    assert matcher.accept_all(tokens(llm, "7\n</parameter>\n</function>\n</tool_call>")) == 0
    run(matcher, llm, "\n<function=get_weather>\n<parameter=city>\nRome")
    with pytest.raises(GrammarError):
        matcher.accept(-1)
    with pytest.raises(GrammarError):
        matcher.accept(BOTPSY_N_VOCAB)
    rest = tokens(llm, "\n</parameter>\n</function>\n</tool_call>")
    assert matcher.accept_all(rest) == len(rest)
    assert matcher.is_complete()


def test_any_order_accepts_permutations_once_each(llm: Any) -> None:
    grammar = build_tool_call_grammar([WEATHER], param_order="any")
    with GrammarMatcher.for_llama(llm, grammar) as m:
        assert accepted(m, llm, call("get_weather", ("units", "metric"), ("city", "Paris")))
        assert accepted(
            m, llm, call("get_weather", ("days", "2"), ("city", "P"), ("units", "metric"))
        )
        assert accepted(m, llm, call("get_weather", ("city", "Paris")))
        assert not accepted(m, llm, call("get_weather", ("units", "metric")))
        assert not accepted(m, llm, call("get_weather", ("city", "P"), ("city", "Q")))


# -- whole-vocabulary filtering --------------------------------------------------------------------


def test_allowed_mask_and_constrain_logits(matcher: GrammarMatcher, llm: Any) -> None:
    matcher.reset()
    mask = matcher.allowed_mask()
    assert mask.shape == (BOTPSY_N_VOCAB,)
    newline = tokens(llm, "\n")[0]
    assert mask[newline]
    assert not mask[tokens(llm, "Hello")[0]]
    assert not mask[IM_END_ID]
    assert 0 < int(mask.sum()) < 100  # only pieces that are prefixes of "\n<function=..."
    logits = np.zeros(BOTPSY_N_VOCAB, dtype=np.float32)
    matcher.constrain_logits(logits)
    assert np.array_equal(np.isfinite(logits), mask)
    with pytest.raises(ValueError, match="logits"):
        matcher.constrain_logits(np.zeros(3, dtype=np.float32))

    # Inside a string value almost everything is allowed; end tokens are not.
    run(matcher, llm, "\n<function=get_weather>\n<parameter=city>\nPar")
    mask = matcher.allowed_mask()
    assert mask.sum() > BOTPSY_N_VOCAB * 0.9
    assert not mask[IM_END_ID]
    assert not mask[TOOL_CALL_CLOSE_ID]


def test_apply_on_caller_candidates(matcher: GrammarMatcher, llm: Any) -> None:
    matcher.reset()
    ids = [tokens(llm, "\n")[0], tokens(llm, "Hello")[0]]
    data = (llama_cpp.llama_token_data * 2)(*(llama_cpp.llama_token_data(i, 1.0, 0.0) for i in ids))
    array = llama_cpp.llama_token_data_array(data=data, size=2, selected=-1, sorted=False)
    matcher.apply(array)
    assert np.isfinite(data[0].logit)
    assert np.isneginf(data[1].logit)


def test_closed_matcher_refuses_use(llm: Any) -> None:
    m = GrammarMatcher.for_llama(llm, 'root ::= "a"')
    m.close()
    m.close()
    assert m.closed
    with pytest.raises(GrammarError, match="closed"):
        m.accepts(0)


def test_unparsable_grammar_raises(llm: Any) -> None:
    with pytest.raises(GrammarError):
        GrammarMatcher.for_llama(llm, "root ::= undefined-rule")


# -- many schemas: each grammar parses and accepts a sample call -----------------------------------


class Color(enum.Enum):
    RED = "red"
    DARK_BLUE = "dark blue"


class Paint(pydantic.BaseModel):
    color: Color
    shade: Color | None = None
    coats: int | None = None
    tags: list[str] = []
    note: str | None = None


SCHEMAS: list[tuple[Any, str]] = [
    (
        {
            "type": "function",
            "function": {"name": "paint", "parameters": Paint.model_json_schema()},
        },
        call("paint", ("color", "dark blue"), ("shade", "red"), ("coats", "2"), ("tags", '["a"]')),
    ),
    (
        tool("n", {"x": {"type": ["integer", "null"]}, "y": {"type": ["number", "string"]}}),
        call("n", ("x", "None"), ("y", "twelve")),
    ),
    (
        tool("e", {"k": {"enum": [1, 2.5, True, None, 'a"b', "c\\d", "", "ß\n"]}}, ["k"]),
        call("e", ("k", 'a"b')),
    ),
    (tool("e2", {"k": {"enum": [""]}}, ["k"]), call("e2", ("k", ""))),
    (tool("c", {"k": {"const": "fixed"}}, ["k"]), call("c", ("k", "fixed"))),
    (
        tool("o", {"k": {"oneOf": [{"type": "integer"}, {"type": "boolean"}]}}, ["k"]),
        call("o", ("k", "true")),
    ),
    (
        tool(
            "deep",
            {
                "rows": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"id": {"type": "integer"}, "tags": {"type": "array"}},
                        "required": ["id"],
                    },
                    "minItems": 1,
                }
            },
            ["rows"],
        ),
        call("deep", ("rows", '[{"id": 1, "tags": ["x", 2, null]}, {"id": 2}]')),
    ),
    (
        tool("weird.name-with_chars", {"a b": {"type": "string"}, "ä.ö": {"type": "boolean"}}),
        call("weird.name-with_chars", ("a b", "v"), ("ä.ö", "False")),
    ),
    (tool("日本", {"引数": {"type": "string"}}, ["引数"]), call("日本", ("引数", "値"))),
    (
        tool("bad_schema", {"p": {"type": "array", "items": {"type": "no-such-type"}}}),
        call("bad_schema", ("p", '["anything", 1]')),
    ),
    (tool("ref", {"p": {"$ref": "#/$defs/Missing"}}), call("ref", ("p", "free text"))),
    (
        {"name": "bare", "parameters": {"properties": {"q": {"type": "integer"}}}},
        call("bare", ("q", "10")),
    ),
    ({"type": "function", "function": {"name": "noparams"}}, call("noparams")),
    # Shapes llama-cpp-python's JSON-schema converter gets wrong: handled or replaced.
    (
        tool(
            "conv",
            {
                "quoted": {"type": "object", "properties": {'a"b': {"type": "integer"}}},
                "regex": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+\\d$"}},
                "astral": {"type": "array", "items": {"enum": ["😀", "x\\y"]}},
                "dates": {"type": "array", "items": {"type": "string", "format": "date"}},
                "named": {
                    "type": "object",
                    "properties": {"pattern": {"type": "string", "pattern": "(("}},
                    "required": ["pattern"],
                },
            },
        ),
        call(
            "conv",
            ("quoted", '{"a\\"b": 1}'),
            ("regex", '["ab1"]'),
            ("astral", '["😀"]'),
            ("dates", '["2024-01-05"]'),
            ("named", '{"pattern": "(("}'),
        ),
    ),
]


@pytest.mark.parametrize(("schema_tool", "text"), SCHEMAS)
def test_varied_schemas_parse_and_accept(llm: Any, schema_tool: Any, text: str) -> None:
    grammar = build_tool_call_grammar([schema_tool, PING])
    with GrammarMatcher.for_llama(llm, grammar) as m:
        assert accepted(m, llm, text), grammar
        assert accepted(m, llm, call("ping"))


def test_all_schemas_together_in_both_orders(llm: Any) -> None:
    all_tools = [t for t, _ in SCHEMAS] + TOOLS
    for order in ("declared", "any"):
        grammar = build_tool_call_grammar(all_tools, param_order=order)
        with GrammarMatcher.for_llama(llm, grammar) as m:
            for _, text in SCHEMAS:
                assert accepted(m, llm, text)


def test_many_parameters_any_order_falls_back_to_declared(llm: Any) -> None:
    props = {f"p{i}": {"type": "integer"} for i in range(12)}
    grammar = build_tool_call_grammar([tool("wide", props, ["p0"])], param_order="any")
    with GrammarMatcher.for_llama(llm, grammar) as m:
        assert accepted(m, llm, call("wide", ("p0", "1"), ("p11", "2")))
        assert not accepted(m, llm, call("wide", ("p11", "2"), ("p0", "1")))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.sampled_from(
            [
                *VALUE_STOP_TEXTS,
                "</",
                "<",
                ">",
                "/",
                "</p>",
                "</para",
                "</functio",
                "</tool_",
                "a",
                " ",
                "\n",
                "é",
                "😀",
                "<tool_call>",
                '"',
                "\\",
                "parameter",
                "function",
            ]
        ),
        max_size=12,
    )
)
def test_string_values_accepted_iff_free_of_closing_tags(
    matcher: GrammarMatcher, llm: Any, parts: list[str]
) -> None:
    value = "".join(parts)
    expected = not any(stop in value for stop in VALUE_STOP_TEXTS)
    assert accepted(matcher, llm, call("get_weather", ("city", value))) == expected


# -- pure helpers ----------------------------------------------------------------------------------


def test_errors_for_bad_tool_lists() -> None:
    with pytest.raises(ValueError, match="at least one"):
        build_tool_call_grammar([])
    with pytest.raises(ValueError, match="duplicate"):
        build_tool_call_grammar([PING, PING])
    with pytest.raises(ValueError, match="name"):
        build_tool_call_grammar([{"type": "function", "function": {"parameters": {}}}])
    with pytest.raises(TypeError):
        build_tool_call_grammar(PING)
    with pytest.raises(TypeError):
        build_tool_call_grammar(["ping"])  # type: ignore[list-item]


def test_literals_and_slugs() -> None:
    assert gbnf_literal('a"b\\c\nd\re\tf\x01g') == '"a\\"b\\\\c\\nd\\re\\tf\\x01g"'
    assert rule_slug("calendar.create_event") == "calendar-create-event"
    assert rule_slug("___") == "x"
    assert rule_slug("日本") == "x"
    assert tool_call_close_text() == "</tool_call>"


def test_grammar_is_deterministic_and_keyed() -> None:
    assert build_tool_call_grammar(TOOLS) == build_tool_call_grammar(TOOLS)
    assert grammar_key(TOOLS) == grammar_key([dict(t) for t in TOOLS])
    assert grammar_key(TOOLS) != grammar_key(TOOLS[:2])
    assert grammar_key(TOOLS) != grammar_key(TOOLS, close_token=False)
    assert grammar_key(TOOLS) != grammar_key(TOOLS, param_order="any")
    reordered = tool(
        "get_weather", dict(reversed(WEATHER["function"]["parameters"]["properties"].items()))
    )
    assert grammar_key([reordered]) != grammar_key([WEATHER])


def test_grammar_cache_builds_once_and_evicts() -> None:
    cache = GrammarCache(maxsize=2)
    first = cache.get(TOOLS)
    assert cache.get([dict(t) for t in TOOLS]) is first
    cache.get([PING])
    cache.get([WEATHER])
    assert len(cache) == 2
    assert cache.get(TOOLS) == first
    with pytest.raises(ValueError):
        GrammarCache(maxsize=0)
