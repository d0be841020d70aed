"""GBNF grammars that hold a Qwen3-Coder XML tool call to the declared tools and argument types."""

# How the engine uses this: it samples freely until the model emits the `<tool_call>` token, then
# constrains the rest of that call with `build_tool_call_grammar(tools)`, whose `root` matches
# exactly what the Qwen3.5 chat template writes after `<tool_call>`:
#
#     \n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n ... </function>\n</tool_call>
#
# Facts checked in the llama.cpp vendored by llama-cpp-python 0.3.36 (src/llama-grammar.cpp,
# src/llama-vocab.cpp):
# - The grammar sampler matches every token by `vocab.token_to_piece(id)`, a cache built with
#   `special=true`, so CONTROL and USER_DEFINED tokens such as `</tool_call>` are matched by
#   their text like any other token. Only end-of-generation tokens are special-cased (allowed
#   only once the grammar is complete). A plain "</tool_call>" literal accepts the special token.
# - GBNF also has token references: a bare `<text>` (or `<[id]>`) matches exactly that one vocab
#   token. By default (`close_token=True`) the grammar ends with the `</tool_call>` token reference,
#   so the call can only be closed by the special token (never by "</" "tool" "_call" ">" spelled
#   with ordinary tokens) and the engine can leave grammar mode on that token id. Such a grammar
#   only parses against a vocab where "</tool_call>" is a single token (every Qwen3/3.5 vocab);
#   `close_token=False` writes it as a text literal that parses anywhere.
#
# Limitations (by design of GBNF, which has no "not containing" operator):
# - A string value may contain any text except "</parameter>", "</function>" and "</tool_call>"
#   (a small automaton over those three texts; "</p>", "a < b", "<tag>" are all fine). Values are
#   never checked against `pattern`, `format` or `maxLength`; `minLength` > 0 only makes them
#   non-empty.
# - Parameters come in declared (`properties`) order by default, as the template renders them.
#   Upstream llama.cpp's own Qwen3-Coder grammar accepts required arguments in any order because
#   "Qwen does not always adhere to the order provided"; `param_order="any"` allows any order of
#   distinct parameters (each at most once, required ones present) for functions with at most
#   `MAX_ANY_ORDER_PARAMS` parameters, and falls back to declared order above that.
# - Booleans accept `true`/`false` and `True`/`False`: the template renders Python booleans with
#   Jinja's `|string`, which writes `True`.

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import llama_cpp
from llama_cpp.llama_grammar import json_schema_to_gbnf

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
FUNCTION_CLOSE = "</function>"
PARAMETER_CLOSE = "</parameter>"

# Texts a string value can never contain: any of them would end the value for a parser.
VALUE_STOP_TEXTS: tuple[str, ...] = (PARAMETER_CLOSE, FUNCTION_CLOSE, TOOL_CALL_CLOSE)
MAX_INTEGER_DIGITS = 18  # every such integer fits in int64
MAX_ANY_ORDER_PARAMS = 6  # 2**6 = 64 state rules per function
_FORMAT_VERSION = "1"  # bump when the generated text changes, so cached grammars are not reused

ParamOrder = Literal["declared", "any"]

# Shared value rules.
_STR = "xml-str"
_STR_NONEMPTY = "xml-str-nonempty"
_INT = "int"
_UINT = "uint"
_NUM = "num"
_BOOL = "bool"
_NULL = "null"
_NUMBER_BODY = '"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?'
_DIGITS_BODY = f'("0" | [1-9] [0-9]{{0,{MAX_INTEGER_DIGITS - 1}}})'

_RULE_LINE = re.compile(r"^([A-Za-z0-9-]+)\s*::=\s*(.*)$")
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def tool_call_close_text() -> str:
    """The text that ends a tool call (one special token in Qwen vocabularies)."""
    return TOOL_CALL_CLOSE


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal, quotes included."""
    out = ['"']
    for char in text:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02X}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


_NEWLINE = gbnf_literal("\n")
_PARAMETER_END = gbnf_literal("\n" + PARAMETER_CLOSE + "\n")
_FUNCTION_END = gbnf_literal(FUNCTION_CLOSE + "\n")


def _class_char(char: str) -> str:
    """One character escaped for use inside a GBNF character class."""
    if char.isascii() and char.isalnum():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02X}"
    return f"\\u{code:04X}" if code < 0x10000 else f"\\U{code:08X}"


def rule_slug(name: str) -> str:
    """A fragment of a GBNF rule name (letters, digits, '-') derived from any tool or field name."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")[:40] or "x"


def _stop_free_text_rules(stops: Sequence[str]) -> dict[str, str]:
    """Right-linear rules for text that contains none of `stops` (one rule per automaton state).

    States are the proper prefixes of the stop texts (the longest one the text read so far ends
    with); a character that would complete a stop text has no transition.
    """
    prefixes = sorted(
        {stop[:i] for stop in stops for i in range(len(stop))}, key=lambda p: (len(p), p)
    )
    index = {prefix: i for i, prefix in enumerate(prefixes)}
    alphabet = sorted({char for stop in stops for char in stop})

    def step(state: str, char: str) -> str | None:
        text = state + char
        if any(text.endswith(stop) for stop in stops):
            return None
        return next(text[k:] for k in range(len(text) + 1) if text[k:] in index)

    def name(state: str) -> str:
        return f"{_STR}-s{index[state]}"

    def alternatives(state: str) -> list[str]:
        by_target: dict[str, list[str]] = {}
        blocked: list[str] = []
        for char in alphabet:
            target = step(state, char)
            if target is None or target != "":
                blocked.append(char)
            if target is not None and target != "":
                by_target.setdefault(target, []).append(char)
        alts = [f"[^{''.join(_class_char(c) for c in blocked)}] {name('')}"]
        for target, chars in by_target.items():
            if len(chars) == 1:
                alts.append(f"{gbnf_literal(chars[0])} {name(target)}")
            else:
                alts.append(f"[{''.join(_class_char(c) for c in chars)}] {name(target)}")
        return alts

    rules = {_STR: name(""), _STR_NONEMPTY: " | ".join(alternatives(""))}
    for state in prefixes:
        rules[name(state)] = "(" + " | ".join(alternatives(state)) + ")?"
    return rules


def _prefixed_rules(grammar: str, prefix: str) -> dict[str, str]:
    """The rules of a GBNF text with every rule name (definitions and references) prefixed."""
    rules: dict[str, str] = {}
    for line in grammar.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = _RULE_LINE.match(line)
        if match is None:
            raise ValueError(f"unexpected GBNF line: {line!r}")
        rules[match[1]] = match[2]
    names = set(rules)
    return {prefix + name: _rename_refs(body, names, prefix) for name, body in rules.items()}


def _rename_refs(body: str, names: set[str], prefix: str) -> str:
    out: list[str] = []
    i, n = 0, len(body)
    while i < n:
        char = body[i]
        if char in '"[':
            close = '"' if char == '"' else "]"
            j = i + 1
            while j < n and body[j] != close:
                j += 2 if body[j] == "\\" else 1
            out.append(body[i : j + 1])
            i = j + 1
        elif char == "{":
            j = body.index("}", i)
            out.append(body[i : j + 1])
            i = j + 1
        elif char in _WORD_CHARS:
            j = i
            while j < n and body[j] in _WORD_CHARS:
                j += 1
            word = body[i:j]
            out.append(prefix + word if word in names else word)
            i = j
        else:
            out.append(char)
            i += 1
    return "".join(out)


def _literal_texts(value: Any) -> list[str]:
    """How the chat template writes a constant value (`|string`, or `|tojson` for containers)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool):
        return ["true", "True"] if value else ["false", "False"]
    if value is None:
        return ["null", "None"]
    return [json.dumps(value, ensure_ascii=False)]


def _tool_function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(tool, Mapping):
        raise TypeError(f"a tool must be a mapping, not {type(tool).__name__}")
    function = tool.get("function", tool)
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise ValueError(f"not an OpenAI-style tool with a function name: {tool!r}")
    if not function["name"]:
        raise ValueError("a tool has an empty function name")
    return function


def callable_tools(
    tools: Sequence[Mapping[str, Any]], may_call: Collection[str] | None
) -> list[Mapping[str, Any]]:
    """The tools a turn's grammar lets the model call: those of ``tools`` (the prompt's) named
    in ``may_call`` (None: all of them). The prompt keeps every tool, so that its start, and
    the saved state of it, stay the same from request to request; the request's choice is made
    at decoding instead ("mask, don't remove"). None of them named: all of them, and the agent
    judges the call (a grammar must allow some call once the model opens one)."""
    if may_call is None:
        return list(tools)
    allowed = set(may_call)
    chosen = [t for t in tools if _tool_function(t)["name"] in allowed]
    return chosen or list(tools)


def tools_reached_for(
    prefix: str, tools: Sequence[Mapping[str, Any]], may_call: Collection[str] | None
) -> tuple[str, ...]:
    """The tools of ``tools`` outside ``may_call`` whose name starts with ``prefix``: what the
    model was writing when the grammar refused its choice of name."""
    if may_call is None or not prefix:
        return ()
    allowed = set(may_call)
    names = (str(_tool_function(t)["name"]) for t in tools)
    return tuple(n for n in names if n.startswith(prefix) and n not in allowed)


# the name of the call being written, as the grammar's text has it so far
CALL_NAME_SO_FAR = re.compile(r"<function=([^>\s]*)$")


class _Builder:
    def __init__(self, *, close_token: bool, param_order: ParamOrder) -> None:
        self.rules: dict[str, str] = {}
        self.close_token = close_token
        self.param_order = param_order
        self.schema_root: Mapping[str, Any] = {}

    def build(self, tools: Sequence[Mapping[str, Any]]) -> str:
        if isinstance(tools, Mapping | str | bytes):
            raise TypeError("tools must be a sequence of tool mappings")
        functions = [_tool_function(tool) for tool in tools]
        if not functions:
            raise ValueError("a tool-call grammar needs at least one tool")
        seen: set[str] = set()
        for function in functions:
            if function["name"] in seen:
                raise ValueError(f"duplicate tool name {function['name']!r}")
            seen.add(function["name"])

        close = TOOL_CALL_CLOSE if self.close_token else gbnf_literal(TOOL_CALL_CLOSE)
        calls = " | ".join(self._function(i, function) for i, function in enumerate(functions))
        root = f"{_NEWLINE} ({calls}) {_FUNCTION_END} {close}"
        lines = [f"root ::= {root}"]
        lines += [f"{name} ::= {body}" for name, body in self.rules.items()]
        return "\n".join(lines) + "\n"

    def _function(self, i: int, function: Mapping[str, Any]) -> str:
        name: str = function["name"]
        rule = f"tool{i}-{rule_slug(name)}"
        params = function.get("parameters")
        self.schema_root = params if isinstance(params, Mapping) else {}
        properties = self.schema_root.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required_raw = self.schema_root.get("required")
        required = set(required_raw) if isinstance(required_raw, list) else set()

        args: list[tuple[str, bool]] = []
        for j, (param, schema) in enumerate(properties.items()):
            arg_rule = f"tool{i}-arg{j}-{rule_slug(str(param))}"
            value = self._value(schema, arg_rule, depth=0)
            open_tag = gbnf_literal(f"<parameter={param}>\n")
            self.rules[arg_rule] = f"{open_tag} {value} {_PARAMETER_END}"
            args.append((arg_rule, param in required))

        parts = [gbnf_literal(f"<function={name}>\n")]
        if self.param_order == "any" and 1 < len(args) <= MAX_ANY_ORDER_PARAMS:
            parts.append(self._any_order(f"tool{i}-args", args))
        else:
            parts += [arg if needed else f"{arg}?" for arg, needed in args]
        self.rules[rule] = " ".join(parts)
        return rule

    def _any_order(self, prefix: str, args: list[tuple[str, bool]]) -> str:
        full = (1 << len(args)) - 1
        required = sum(1 << j for j, (_, needed) in enumerate(args) if needed)
        for mask in range(full):
            alts = []
            for j, (arg, _) in enumerate(args):
                if not mask & (1 << j):
                    nxt = mask | (1 << j)
                    alts.append(arg if nxt == full else f"{arg} {prefix}{nxt}")
            done = required & ~mask == 0
            self.rules[f"{prefix}{mask}"] = f"({' | '.join(alts)})" + ("?" if done else "")
        return f"{prefix}0"

    # -- values ---------------------------------------------------------------------------------

    def _resolve(self, schema: Any, depth: int = 0) -> Mapping[str, Any]:
        """Follow local `$ref`s and single-element `allOf`s; anything unreadable becomes `{}`."""
        if not isinstance(schema, Mapping):
            return {}
        if depth > 16:
            return {}
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self._lookup(ref)
            if target is None:
                return {}
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return self._resolve({**target, **rest}, depth + 1)
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], Mapping):
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self._resolve({**all_of[0], **rest}, depth + 1)
        return schema

    def _lookup(self, ref: str) -> Mapping[str, Any] | None:
        if not ref.startswith("#/"):
            return None
        node: Any = self.schema_root
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, Mapping) or key not in node:
                return None
            node = node[key]
        return node if isinstance(node, Mapping) else None

    def _shared(self, name: str) -> str:
        if name in self.rules:
            return name
        if name in (_STR, _STR_NONEMPTY):
            self.rules.update(_stop_free_text_rules(VALUE_STOP_TEXTS))
        elif name == _INT:
            self.rules[name] = f'"-"? {_DIGITS_BODY}'
        elif name == _UINT:
            self.rules[name] = _DIGITS_BODY
        elif name == _NUM:
            self.rules[name] = _NUMBER_BODY
        elif name == _BOOL:
            self.rules[name] = '"true" | "false" | "True" | "False"'
        elif name == _NULL:
            self.rules[name] = '"null" | "None"'
        return name

    def _union(self, exprs: list[str]) -> str:
        if _STR in exprs:
            return self._shared(_STR)
        if _STR_NONEMPTY in exprs:
            return self._shared(_STR_NONEMPTY)
        unique = list(dict.fromkeys(exprs))
        return unique[0] if len(unique) == 1 else "(" + " | ".join(unique) + ")"

    def _value(self, raw: Any, name: str, depth: int) -> str:
        schema = self._resolve(raw)
        if depth > 8:
            return self._shared(_STR)
        if "const" in schema:
            return self._literals([schema["const"]])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return self._literals(enum)
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                return self._union(
                    [self._value(opt, f"{name}-{k}", depth + 1) for k, opt in enumerate(options)]
                )
        kind = schema.get("type")
        if isinstance(kind, list) and kind:
            return self._union(
                [self._value({**schema, "type": t}, f"{name}-{t}", depth + 1) for t in kind]
            )
        if kind == "string":
            min_length = schema.get("minLength")
            nonempty = isinstance(min_length, int) and min_length > 0
            return self._shared(_STR_NONEMPTY if nonempty else _STR)
        if kind == "integer":
            minimum = schema.get("minimum")
            unsigned = isinstance(minimum, int | float) and minimum >= 0
            return self._shared(_UINT if unsigned else _INT)
        if kind == "number":
            return self._shared(_NUM)
        if kind == "boolean":
            return self._shared(_BOOL)
        if kind == "null":
            return self._shared(_NULL)
        if kind in ("array", "object"):
            return self._json(schema, f"{name}-json-", str(kind))
        return self._shared(_STR)

    def _literals(self, values: list[Any]) -> str:
        texts = list(dict.fromkeys(text for value in values for text in _literal_texts(value)))
        alts = [gbnf_literal(text) for text in texts]
        return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"

    def _json(self, schema: Mapping[str, Any], prefix: str, kind: str) -> str:
        """A JSON value for `schema` via llama-cpp-python's converter, its rules renamed to fit.

        The converter mis-escapes quotes and backslashes in literals and emits invalid GBNF for
        some regex patterns, so patterns are dropped, schemas with such literals fall back to any
        JSON of the kind, and its output must parse in llama.cpp before it is used.
        """
        for defs in ("$defs", "definitions"):
            if defs in self.schema_root and defs not in schema:
                schema = {**schema, defs: self.schema_root[defs]}
        text: str | None = None
        clean, risky = _converter_schema(schema)
        if not risky:
            try:
                text = json_schema_to_gbnf(json.dumps(clean))
            except Exception:  # it asserts on schemas it does not support
                text = None
            if text is not None and not _parses(text):
                text = None
        if text is None:
            text = json_schema_to_gbnf(json.dumps({"type": kind}))
        rules = _prefixed_rules(text, prefix)
        self.rules.update(rules)
        return prefix + "root"


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_ONES = ("items", "additionalProperties", "not", "contains", "if", "then", "else")
_SCHEMA_LISTS = ("prefixItems", "anyOf", "oneOf", "allOf", "items")


def _needs_escape(value: Any) -> bool:
    """Whether JSON text for `value` has escapes or astral characters the converter mangles."""
    text = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        text = text[1:-1]
    return "\\" in text or any(ord(char) > 0xFFFF for char in text)


def _converter_schema(schema: Any) -> tuple[Any, bool]:
    """`schema` without `pattern` keywords, and whether a literal in it needs escaping."""
    if isinstance(schema, list):
        parts = [_converter_schema(item) for item in schema]
        return [p for p, _ in parts], any(r for _, r in parts)
    if not isinstance(schema, Mapping):
        return schema, False
    out: dict[str, Any] = {}
    risky = False
    for key, value in schema.items():
        if key == "pattern":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, Mapping):
            mapped: dict[str, Any] = {}
            for name, sub in value.items():
                mapped[name], sub_risky = _converter_schema(sub)
                risky = risky or sub_risky or _needs_escape(str(name))
            out[key] = mapped
        elif key in _SCHEMA_ONES or key in _SCHEMA_LISTS:
            out[key], sub_risky = _converter_schema(value)
            risky = risky or sub_risky
        elif key == "enum" and isinstance(value, list):
            out[key] = value
            risky = risky or any(_needs_escape(v) for v in value)
        elif key == "const":
            out[key] = value
            risky = risky or _needs_escape(value)
        else:
            out[key] = value
    return out, risky


def _parses(grammar: str) -> bool:
    """Whether llama.cpp parses `grammar` (no vocab: the text must not use token references)."""
    sampler = llama_cpp.llama_sampler_init_grammar(None, grammar.encode("utf-8"), b"root")
    if not sampler:
        return False
    llama_cpp.llama_sampler_free(sampler)
    return True


def build_tool_call_grammar(
    tools: Sequence[Mapping[str, Any]],
    *,
    close_token: bool = True,
    param_order: ParamOrder = "declared",
) -> str:
    """GBNF (rule `root`) for one tool call's text after the `<tool_call>` token, closer included.

    `tools` are OpenAI-style `{"type": "function", "function": {"name", "description",
    "parameters"}}` mappings (a bare function mapping is accepted too). Each function contributes
    its name and its parameters, required ones mandatory and optional ones optional; values follow
    the JSON schema type: string (text free of the closing tags), `enum`/`const` (the exact
    literals), integer, number, boolean, null, array/object (JSON for the schema); `anyOf`,
    `oneOf` and type lists become the union of their options (plain text when one is a string);
    anything else is a string. Local `$ref`s into `$defs`/`definitions` are followed.
    `close_token` and `param_order` are described at the top of this module.
    Raises `ValueError` for an empty tool list, a tool without a name or a duplicate name.
    """
    return _Builder(close_token=close_token, param_order=param_order).build(tools)


def grammar_key(
    tools: Sequence[Mapping[str, Any]],
    *,
    close_token: bool = True,
    param_order: ParamOrder = "declared",
) -> str:
    """A stable hash of the tools and options: equal keys mean equal grammars.

    Key order is kept (it decides parameter order), so reordered but equal tool lists may get
    different keys; that only costs a cache miss.
    """
    payload = json.dumps(
        [_FORMAT_VERSION, close_token, param_order, list(tools)],
        ensure_ascii=False,
        separators=(",", ":"),
        default=repr,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


class GrammarCache:
    """Built grammars by `grammar_key`, least recently used dropped first; safe across threads."""

    def __init__(self, maxsize: int = 16) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self._maxsize = maxsize
        self._items: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def get(
        self,
        tools: Sequence[Mapping[str, Any]],
        *,
        close_token: bool = True,
        param_order: ParamOrder = "declared",
    ) -> str:
        """The grammar for `tools`, built on first use."""
        key = grammar_key(tools, close_token=close_token, param_order=param_order)
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        grammar = build_tool_call_grammar(tools, close_token=close_token, param_order=param_order)
        with self._lock:
            self._items[key] = grammar
            self._items.move_to_end(key)
            while len(self._items) > self._maxsize:
                self._items.popitem(last=False)
        return grammar
