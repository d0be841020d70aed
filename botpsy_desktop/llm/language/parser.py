"""Split raw BotPsy completions into thinking, visible text and typed tool calls."""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, TypeAlias

from botpsy_desktop.llm.types import ParsedTurn, ToolCall, ToolCallError

__all__ = [
    "CUT_OFF_MESSAGE",
    "END_MARKERS",
    "StreamEvent",
    "StreamEventKind",
    "StreamSplitter",
    "parse_turn",
]

_log = logging.getLogger(__name__)

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
TOOL_OPEN = "<tool_call>"
TOOL_CLOSE = "</tool_call>"
END_MARKERS: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
_FUNC_OPEN = "<function="
_FUNC_CLOSE = "</function>"
_PARAM_OPEN = "<parameter="
_PARAM_CLOSE = "</parameter>"

_FORMAT_HINT = "<tool_call><function=NAME><parameter=ARG>VALUE</parameter></function></tool_call>"
CUT_OFF_MESSAGE = "Your tool call was cut off before </tool_call>; send the complete call again."
_NO_FUNCTION_MESSAGE = f"Your <tool_call> block has no <function=NAME> tag; write {_FORMAT_HINT}."
_INTERNAL_ERROR_MESSAGE = f"Your tool call could not be read; send it again as {_FORMAT_HINT}."

_TAG_END_RE = re.compile(r"[>\n<]")
_WS_RE = re.compile(r"\s*")
# A </parameter> only ends a value when the next thing is another parameter, the end of the
# function or the end of the block, so values may contain "</parameter>" fragments.
_AFTER_VALUE_RE = re.compile(r"\s*(?:<parameter=|</function>|\Z)")
_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_MAX_DEPTH = 32
_PREVIEW_CHARS = 60

# --------------------------------------------------------------------------------------------
# Value conversion
# --------------------------------------------------------------------------------------------

_TYPE_ALIASES: dict[str, str] = {
    "string": "string",
    "str": "string",
    "text": "string",
    "integer": "integer",
    "int": "integer",
    "number": "number",
    "float": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "array": "array",
    "list": "array",
    "object": "object",
    "dict": "object",
    "null": "null",
}

# type -> (what was expected, what to send instead)
_TYPE_WORDS: dict[str, tuple[str, str]] = {
    "string": ("a string", "plain text"),
    "integer": ("an integer", "a whole number such as 3"),
    "number": ("a number", "a number such as 2.5"),
    "boolean": ("a boolean", "true or false"),
    "array": ("a JSON array", 'a JSON array such as ["a", "b"]'),
    "object": ("a JSON object", 'a JSON object such as {"key": "value"}'),
    "null": ("null", "null"),
}


class _ConversionError(Exception):
    """A value does not fit its schema; carries wording for the model."""

    def __init__(self, expected: str, instead: str) -> None:
        super().__init__(expected)
        self.expected = expected
        self.instead = instead


def _join_unique(words: Sequence[str]) -> str:
    return " or ".join(dict.fromkeys(words))


def _fail_type(kind: str) -> _ConversionError:
    expected, instead = _TYPE_WORDS[kind]
    return _ConversionError(expected, instead)


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    raw = schema.get("type")
    names = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    types = [
        _TYPE_ALIASES[n.lower()] for n in names if isinstance(n, str) and n.lower() in _TYPE_ALIASES
    ]
    return list(dict.fromkeys(types))


def _alternatives(schema: Mapping[str, Any]) -> list[Any] | None:
    for key in ("anyOf", "oneOf"):
        alts = schema.get(key)
        if isinstance(alts, list) and alts:
            return alts
    return None


def _allows_null(schema: Any, depth: int = 0) -> bool:
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return False
    if schema.get("nullable") is True or "null" in _schema_types(schema):
        return True
    alts = _alternatives(schema)
    return alts is not None and any(_allows_null(a, depth + 1) for a in alts)


def _same_value(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and isinstance(a, bool) == isinstance(b, bool)
    except Exception:
        return False


def _in_enum(value: Any, enum: list[Any]) -> bool:
    return any(_same_value(value, e) for e in enum)


def _enum_error(enum: list[Any]) -> _ConversionError:
    shown = ", ".join(json.dumps(e, ensure_ascii=False, default=str) for e in enum[:20])
    return _ConversionError(f"one of {shown}", "exactly one of those values")


def _check_enum(value: Any, schema: Mapping[str, Any]) -> Any:
    enum = schema.get("enum")
    if not isinstance(enum, list):
        return value
    if _in_enum(value, enum):
        return value
    if isinstance(value, str) and _in_enum(value.strip(), enum):
        return value.strip()
    raise _enum_error(enum)


def _untyped_enum(value: Any, enum: list[Any]) -> Any:
    candidates = [value]
    if isinstance(value, str):
        candidates.append(value.strip())
        with contextlib.suppress(ValueError, RecursionError):
            candidates.append(json.loads(value))
    for candidate in candidates:
        if _in_enum(candidate, enum):
            return candidate
    raise _enum_error(enum)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _jsonable(value: Any, depth: int = 0) -> Any:
    """Return ``value`` as plain JSON data (tuples become lists) or raise ValueError."""
    if depth > _MAX_DEPTH:
        raise ValueError("nested too deeply")
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not finite")
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ValueError("keys must be strings")
        return {k: _jsonable(v, depth + 1) for k, v in value.items()}
    raise ValueError("not JSON data")


_NOTHING = object()


def _parse_structured(text: str) -> Any:
    """Parse JSON, falling back to a Python literal (single quotes, True/None)."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        pass
    try:
        return _jsonable(ast.literal_eval(text))
    except Exception:  # SyntaxError, ValueError, MemoryError, RecursionError, ...
        return _NOTHING


def _to_integer(value: Any) -> int:
    if isinstance(value, bool):
        raise _fail_type("integer")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if _INT_RE.fullmatch(text) and len(text) <= 4000:
            return int(text)
        if _FLOAT_RE.fullmatch(text) and len(text) <= 400:
            try:
                number = Decimal(text)
            except InvalidOperation:
                raise _fail_type("integer") from None
            if (
                number.is_finite()
                and number.adjusted() < 400
                and number == number.to_integral_value()
            ):
                return int(number)
    raise _fail_type("integer")


def _to_number(value: Any) -> int | float:
    if isinstance(value, bool):
        raise _fail_type("number")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str):
        text = value.strip()
        if _INT_RE.fullmatch(text) and len(text) <= 4000:
            return int(text)
        if _FLOAT_RE.fullmatch(text):
            result = float(text)
            if math.isfinite(result):
                return result
    raise _fail_type("number")


def _to_boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("true", "false"):
            return text == "true"
    raise _fail_type("boolean")


def _to_string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return json.dumps(value)
    raise _fail_type("string")


def _to_array(value: Any, schema: Mapping[str, Any], depth: int) -> list[Any]:
    data = _parse_structured(value.strip()) if isinstance(value, str) else value
    if not isinstance(data, list):
        raise _fail_type("array")
    items = schema.get("items")
    if not isinstance(items, Mapping):
        return data
    converted: list[Any] = []
    for item in data:
        try:
            converted.append(_convert(item, items, depth + 1))
        except _ConversionError as exc:
            raise _ConversionError(
                f"a JSON array whose items are each {exc.expected}",
                f"a JSON array whose items are each {exc.instead}",
            ) from None
    return converted


def _to_object(value: Any, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
    data = _parse_structured(value.strip()) if isinstance(value, str) else value
    if not isinstance(data, dict):
        raise _fail_type("object")
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return data
    converted: dict[str, Any] = {}
    for key, item in data.items():
        sub = props.get(key)
        if not isinstance(sub, Mapping):
            converted[key] = item
            continue
        try:
            converted[key] = _convert(item, sub, depth + 1)
        except _ConversionError as exc:
            raise _ConversionError(
                f'a JSON object whose "{key}" is {exc.expected}',
                f'a JSON object whose "{key}" is {exc.instead}',
            ) from None
    return converted


def _convert_type(value: Any, kind: str, schema: Mapping[str, Any], depth: int) -> Any:
    if kind == "string":
        return _to_string(value)
    if kind == "integer":
        return _to_integer(value)
    if kind == "number":
        return _to_number(value)
    if kind == "boolean":
        return _to_boolean(value)
    if kind == "array":
        return _to_array(value, schema, depth)
    if kind == "object":
        return _to_object(value, schema, depth)
    if value is None:  # kind == "null"
        return None
    raise _fail_type("null")


def _convert(value: Any, schema: Any, depth: int = 0) -> Any:
    """Convert a raw string (XML) or decoded JSON value to the type ``schema`` asks for."""
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return value
    if _allows_null(schema) and (
        value is None or (isinstance(value, str) and value.strip() in ("null", "None"))
    ):
        return None
    alts = _alternatives(schema)
    failures: list[_ConversionError] = []
    if alts is not None:
        for alt in alts:
            try:
                return _convert(value, alt, depth + 1)
            except _ConversionError as exc:
                failures.append(exc)
    else:
        types = _schema_types(schema)
        if not types:
            enum = schema.get("enum")
            return _untyped_enum(value, enum) if isinstance(enum, list) else value
        for kind in types:
            try:
                return _check_enum(_convert_type(value, kind, schema, depth), schema)
            except _ConversionError as exc:
                failures.append(exc)
        enum_failures = [f for f in failures if f.expected.startswith("one of ")]
        if enum_failures:
            raise enum_failures[0]
    raise _ConversionError(
        _join_unique([f.expected for f in failures]), _join_unique([f.instead for f in failures])
    )


def _preview(value: Any) -> str:
    if isinstance(value, str):
        text = value if len(value) <= _PREVIEW_CHARS else value[:_PREVIEW_CHARS] + "..."
        return json.dumps(text, ensure_ascii=False)
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= _PREVIEW_CHARS else text[:_PREVIEW_CHARS] + "..."


# --------------------------------------------------------------------------------------------
# Tool call blocks
# --------------------------------------------------------------------------------------------

_Schemas: TypeAlias = dict[str, Mapping[str, Any]]


@dataclass(frozen=True)
class _Fail:
    """A structural problem in one call. ``definite`` problems are not explained by truncation."""

    message: str
    name: str | None = None
    definite: bool = False


def _schemas(tools: Sequence[Mapping[str, Any]] | None) -> _Schemas:
    out: _Schemas = {}
    if not tools:
        return out
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function", tool)
        if not isinstance(fn, Mapping):
            continue
        name = fn.get("name")
        if not isinstance(name, str) or name in out:
            continue
        params = fn.get("parameters")
        out[name] = params if isinstance(params, Mapping) else {}
    return out


def _build_call(
    name: str,
    args: Mapping[str, Any],
    raw: str,
    fmt: Literal["xml", "json"],
    schemas: _Schemas,
) -> ToolCall | ToolCallError:
    schema = schemas.get(name)
    props = schema.get("properties") if schema is not None else None
    if not isinstance(props, Mapping):
        props = {}
    converted: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in args.items():
        sub = props.get(key)
        if not isinstance(sub, Mapping):
            converted[key] = value
            continue
        try:
            converted[key] = _convert(value, sub)
        except _ConversionError as exc:
            problems.append(
                f'Parameter "{key}" of {name} must be {exc.expected}, but you sent '
                f"{_preview(value)}; send the call again with {exc.instead}."
            )
    if problems:
        return ToolCallError(" ".join(problems), raw, name)
    return ToolCall(name, converted, raw, fmt)


def _strip_one_newline(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _parse_xml_function(
    text: str, pos: int, end: int, closed: bool
) -> tuple[str, dict[str, str], int] | _Fail:
    """Parse the ``<function=...>`` at ``pos``; return its name, raw arguments and end offset."""
    name_start = pos + len(_FUNC_OPEN)
    match = _TAG_END_RE.search(text, name_start, end)
    if match is None or match.group() != ">":
        return _Fail(
            "The function name in your tool call is not closed with '>'; write <function=NAME> "
            "on its own line."
        )
    name = text[name_start : match.start()].strip()
    if not name:
        return _Fail(
            "Your tool call has an empty function name; write <function=NAME> with the name of "
            "one of the available tools.",
            definite=True,
        )
    p = match.end()
    args: dict[str, str] = {}
    while True:
        ws = _WS_RE.match(text, p, end)
        p = ws.end() if ws is not None else p
        if p >= end:
            if closed:  # tolerate a missing </function> when the block itself is complete
                return name, args, p
            return _Fail(f"Your call to {name} has no closing </function>.", name)
        if text.startswith(_FUNC_CLOSE, p):
            return name, args, p + len(_FUNC_CLOSE)
        if not text.startswith(_PARAM_OPEN, p):
            junk = text[p : p + 30].split("\n", 1)[0]
            return _Fail(
                f"Unexpected text {json.dumps(junk, ensure_ascii=False)} in your call to {name}; "
                "put each argument in its own <parameter=ARG>VALUE</parameter> block and end "
                "the call with </function>.",
                name,
            )
        pname_start = p + len(_PARAM_OPEN)
        match = _TAG_END_RE.search(text, pname_start, end)
        if match is None or match.group() != ">":
            return _Fail(
                f"A <parameter= tag in your call to {name} is not closed with '>'; write "
                "<parameter=ARG> on its own line.",
                name,
            )
        pname = text[pname_start : match.start()].strip()
        if not pname:
            return _Fail(
                f"A parameter in your call to {name} has an empty name; write <parameter=ARG> "
                "with the argument's name.",
                name,
                definite=True,
            )
        value_start = match.end()
        close = first_close = text.find(_PARAM_CLOSE, value_start, end)
        while close != -1 and not _AFTER_VALUE_RE.match(text, close + len(_PARAM_CLOSE), end):
            close = text.find(_PARAM_CLOSE, close + 1, end)
        if close == -1:
            if first_close == -1:
                return _Fail(
                    f'Parameter "{pname}" in your call to {name} has no closing </parameter>; '
                    "end every value with </parameter>.",
                    name,
                )
            return _Fail(
                f'Unexpected text after </parameter> of "{pname}" in your call to {name}; '
                "after </parameter> write the next <parameter=ARG> or </function>.",
                name,
            )
        if pname in args:
            return _Fail(
                f'Parameter "{pname}" appears twice in your call to {name}; send the call again '
                "with each parameter once.",
                name,
                definite=True,
            )
        args[pname] = _strip_one_newline(text[value_start:close])
        p = close + len(_PARAM_CLOSE)


def _parse_xml_block(
    text: str, start: int, end: int, closed: bool, raw: str, schemas: _Schemas
) -> list[ToolCall | ToolCallError]:
    pos = text.find(_FUNC_OPEN, start, end)
    if pos == -1:
        return [ToolCallError(_NO_FUNCTION_MESSAGE if closed else CUT_OFF_MESSAGE, raw)]
    found: list[tuple[str, dict[str, str], str]] = []
    while pos != -1:
        outcome = _parse_xml_function(text, pos, end, closed)
        if isinstance(outcome, _Fail):
            message = outcome.message if closed or outcome.definite else CUT_OFF_MESSAGE
            error = ToolCallError(message, raw if not found else text[pos:end], outcome.name)
            return [*(_build_call(n, a, r, "xml", schemas) for n, a, r in found), error]
        name, args, after = outcome
        found.append((name, args, text[pos:after]))
        pos = text.find(_FUNC_OPEN, after, end)
    if len(found) == 1:  # the usual case: the call's raw text is the whole block
        name, args, _ = found[0]
        return [_build_call(name, args, raw, "xml", schemas)]
    return [_build_call(n, a, r, "xml", schemas) for n, a, r in found]


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
_JSON_HINT = f"use the format {_FORMAT_HINT} instead."


def _parse_json_block(
    text: str, start: int, end: int, closed: bool, raw: str, schemas: _Schemas
) -> ToolCall | ToolCallError:
    inner = text[start:end].strip()
    try:
        obj, idx = _DECODER.raw_decode(inner)
    except _DuplicateKeyError as exc:
        return ToolCallError(
            f'Key "{exc.key}" appears twice in your JSON tool call; send the call again with '
            "each key once.",
            raw,
        )
    except (ValueError, RecursionError) as exc:
        if not closed:
            return ToolCallError(CUT_OFF_MESSAGE, raw)
        if isinstance(exc, json.JSONDecodeError):
            reason = f"{exc.msg} at character {exc.pos}"
        else:
            reason = str(exc) or type(exc).__name__
        return ToolCallError(f"Your tool call is not valid JSON ({reason}); {_JSON_HINT}", raw)
    rest = inner[idx:].strip()
    if rest and (closed or not TOOL_CLOSE.startswith(rest)):
        if not closed:
            return ToolCallError(CUT_OFF_MESSAGE, raw)
        return ToolCallError(
            f"Unexpected text after the JSON object in your tool call; {_JSON_HINT}", raw
        )
    fn: Any = obj
    if isinstance(obj, dict) and "name" not in obj and isinstance(obj.get("function"), dict):
        fn = obj["function"]
    if not isinstance(fn, dict):
        return ToolCallError(
            f'Your JSON tool call must be an object with "name" and "arguments"; {_JSON_HINT}',
            raw,
        )
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCallError(
            f'Your JSON tool call has no "name" string naming the tool; {_JSON_HINT}', raw
        )
    name = name.strip()
    args = fn["arguments"] if "arguments" in fn else fn.get("parameters")
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args, parse_constant=_reject_constant) if args.strip() else {}
        except (ValueError, RecursionError):
            args = None
    if not isinstance(args, dict):
        return ToolCallError(
            f'The "arguments" of your call to {name} must be a JSON object mapping each '
            f"parameter name to its value; {_JSON_HINT}",
            raw,
            name,
        )
    return _build_call(name, args, raw, "json", schemas)


def _parse_block(
    text: str, start: int, end: int, closed: bool, raw: str, schemas: _Schemas
) -> list[ToolCall | ToolCallError]:
    if text[start:end].lstrip().startswith("{"):
        return [_parse_json_block(text, start, end, closed, raw, schemas)]
    return _parse_xml_block(text, start, end, closed, raw, schemas)


# --------------------------------------------------------------------------------------------
# Turns
# --------------------------------------------------------------------------------------------


def _cut_at_end_marker(text: str) -> str:
    cut = len(text)
    for marker in END_MARKERS:
        idx = text.find(marker, 0, cut)
        if idx != -1:
            cut = idx
    return text[:cut]


def _split_thinking(text: str, started_in_thinking: bool) -> tuple[str, str]:
    """Return (thinking, rest), where ``rest`` is everything after the first ``</think>``."""
    body = text
    opened = started_in_thinking
    lead = text.lstrip()
    if lead.startswith(THINK_OPEN):
        body = lead[len(THINK_OPEN) :]
        opened = True
    idx = body.find(THINK_CLOSE)
    if idx != -1:
        return body[:idx].strip(), body[idx + len(THINK_CLOSE) :]
    if opened:  # thinking never closed: the completion was cut off while thinking
        return body.strip(), ""
    return "", text


def _parse_turn_unsafe(
    text: str, tools: Sequence[Mapping[str, Any]] | None, started_in_thinking: bool
) -> ParsedTurn:
    thinking, rest = _split_thinking(_cut_at_end_marker(text), started_in_thinking)
    schemas = _schemas(tools)
    parts: list[str] = []
    calls: list[ToolCall | ToolCallError] = []
    pos = 0
    while True:
        open_at = rest.find(TOOL_OPEN, pos)
        if open_at == -1:
            parts.append(rest[pos:])
            break
        parts.append(rest[pos:open_at])
        close_at = rest.find(TOOL_CLOSE, open_at + len(TOOL_OPEN))
        closed = close_at != -1
        block_end = close_at if closed else len(rest)
        raw_end = close_at + len(TOOL_CLOSE) if closed else len(rest)
        # A second <tool_call> before </tool_call> means the first call was abandoned.
        start, raw_start = open_at + len(TOOL_OPEN), open_at
        nested = rest.find(TOOL_OPEN, start, block_end)
        while nested != -1:
            calls.extend(_parse_block(rest, start, nested, False, rest[raw_start:nested], schemas))
            start, raw_start = nested + len(TOOL_OPEN), nested
            nested = rest.find(TOOL_OPEN, start, block_end)
        calls.extend(_parse_block(rest, start, block_end, closed, rest[raw_start:raw_end], schemas))
        pos = raw_end
    return ParsedTurn(thinking=thinking, content="".join(parts).strip(), calls=calls)


def parse_turn(
    text: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    *,
    started_in_thinking: bool = False,
) -> ParsedTurn:
    """Parse one raw assistant completion into thinking, content and tool calls.

    ``text`` is the completion exactly as generated (special tokens rendered as text); anything
    from the first ``<|im_end|>`` or ``<|endoftext|>`` on is ignored. ``started_in_thinking``
    says the prompt ended with an open ``<think>``. ``tools`` (OpenAI-style tool dicts) give the
    JSON schemas used to convert argument values. Never raises.
    """
    try:
        return _parse_turn_unsafe(text, tools, started_in_thinking)
    except Exception:  # a parser bug must not take the agent loop down
        _log.exception("parse_turn failed on a completion of %d characters", len(text))
        calls: list[ToolCall | ToolCallError] = []
        if TOOL_OPEN in text:
            calls.append(ToolCallError(_INTERNAL_ERROR_MESSAGE, text))
        return ParsedTurn(thinking="", content=text.strip(), calls=calls)


# --------------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------------

StreamEventKind: TypeAlias = Literal["thinking", "text", "tool_call_start"]
StreamEvent: TypeAlias = tuple[StreamEventKind, str]
_State: TypeAlias = Literal["start", "thinking", "text", "tool", "done"]

_WATCHED: dict[str, tuple[str, ...]] = {
    "thinking": (THINK_CLOSE, *END_MARKERS),
    "text": (TOOL_OPEN, *END_MARKERS),
    "tool": (TOOL_CLOSE, *END_MARKERS),
}


class _Trimmer:
    """Drops leading whitespace and holds trailing whitespace until more text follows."""

    def __init__(self) -> None:
        self._started = False
        self._pending = ""

    def push(self, piece: str) -> str:
        if not self._started:
            piece = piece.lstrip()
            if not piece:
                return ""
            self._started = True
        body = piece.rstrip()
        if not body:
            self._pending += piece
            return ""
        out = self._pending + body
        self._pending = piece[len(body) :]
        return out


def _held_suffix(buffer: str, tags: Sequence[str]) -> int:
    """Length of the longest suffix of ``buffer`` that is a proper prefix of one of ``tags``."""
    tail = buffer[-(max(len(t) for t in tags) - 1) :]
    start = tail.find("<")  # every tag starts with "<"
    while start != -1:
        rest = tail[start:]
        if any(len(t) > len(rest) and t.startswith(rest) for t in tags):
            return len(rest)
        start = tail.find("<", start + 1)
    return 0


class StreamSplitter:
    """Route streamed completion text to thinking, visible text or a hidden tool call block.

    Text that may be the start of a tag is held back until it can be decided. Whitespace at
    the start and end of each stream is dropped, so the concatenated thinking and text equal
    ``parse_turn(...).thinking`` and ``.content`` for the same completion, provided the flag is
    right: with ``started_in_thinking=False``, a ``</think>`` after visible text cannot be taken
    back. The final answer must always come from :func:`parse_turn`.
    """

    def __init__(self, started_in_thinking: bool) -> None:
        self._started_in_thinking = started_in_thinking
        self._state: _State = "start"
        self._buffer = ""
        self._finished = False
        self._trimmers = {"thinking": _Trimmer(), "text": _Trimmer()}

    def feed(self, piece: str) -> list[StreamEvent]:
        """Add streamed text; return the events it makes decidable."""
        if self._finished or self._state == "done":
            return []
        self._buffer += piece
        events: list[StreamEvent] = []
        self._drain(events, final=False)
        return events

    def finish(self) -> list[StreamEvent]:
        """Flush held-back text at the end of the stream."""
        if self._finished:
            return []
        self._finished = True
        events: list[StreamEvent] = []
        self._drain(events, final=True)
        return events

    def _emit(
        self, events: list[StreamEvent], kind: Literal["thinking", "text"], text: str
    ) -> None:
        out = self._trimmers[kind].push(text)
        if not out:
            return
        if events and events[-1][0] == kind:
            events[-1] = (kind, events[-1][1] + out)
        else:
            events.append((kind, out))

    def _drain(self, events: list[StreamEvent], final: bool) -> None:
        while True:
            state = self._state
            if state == "done":
                self._buffer = ""
                return
            if state == "start":
                lead = self._buffer.lstrip()
                if lead.startswith(THINK_OPEN):
                    self._buffer = lead[len(THINK_OPEN) :]
                    self._state = "thinking"
                elif lead.startswith(THINK_CLOSE):
                    self._buffer = lead[len(THINK_CLOSE) :]
                    self._state = "text"
                elif not final and (
                    not lead or THINK_OPEN.startswith(lead) or THINK_CLOSE.startswith(lead)
                ):
                    return
                else:
                    self._state = "thinking" if self._started_in_thinking else "text"
                continue
            tags = _WATCHED[state]
            hit, tag = -1, ""
            for candidate in tags:
                idx = self._buffer.find(candidate)
                if idx != -1 and (hit == -1 or idx < hit):
                    hit, tag = idx, candidate
            if hit == -1:
                keep = 0 if final else _held_suffix(self._buffer, tags)
                ready = self._buffer[: len(self._buffer) - keep]
                self._buffer = self._buffer[len(self._buffer) - keep :]
                if state != "tool":
                    self._emit(events, state, ready)
                return
            before, self._buffer = self._buffer[:hit], self._buffer[hit + len(tag) :]
            if state != "tool":
                self._emit(events, state, before)
            if tag in END_MARKERS:
                self._state = "done"
            elif state == "thinking":
                self._state = "text"
            elif state == "text":
                events.append(("tool_call_start", ""))
                self._state = "tool"
            else:
                self._state = "text"
