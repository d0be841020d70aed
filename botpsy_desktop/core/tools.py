"""Tools declared once: an arguments model, a handler and declared effects give everything else."""

from __future__ import annotations

import inspect
import json
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, get_type_hints

from pydantic import BaseModel, ValidationError

from botpsy_desktop.core.errors import BotpsyError


class Effect(StrEnum):
    """What carrying out a tool call does to the world. The gate decides from these."""

    READ = "read"
    LOCAL_WRITE = "local-write"
    OUTBOUND = "outbound"
    MONEY = "money"
    PERSONAL_DATA = "personal-data"
    DESTRUCTIVE = "destructive"


class ToolArgumentsError(BotpsyError):
    """The model's arguments do not fit the tool's schema; the message is written for the model."""


Handler = Callable[[Any], Any]


@dataclass(frozen=True)
class Tool:
    """One tool: its name, the model-facing description, arguments model, handler and effects."""

    name: str
    description: str
    args_model: type[BaseModel]
    handler: Handler
    effects: frozenset[Effect]
    domain: str = ""
    """What the tool is about (``files``, ``email``, a tool server's name): each request is
    offered the tools of its domains (agent/selection.py). Empty: offered to every request."""
    input_schema: Mapping[str, Any] | None = None
    """A JSON Schema given with the tool (a tool server's): shown to the model instead of the
    one derived from ``args_model``, and checked in full when arguments are validated."""
    notes: tuple[str, ...] = ()
    """Lines the approval receipt adds under the tool's summary (where a tool comes from)."""

    def __post_init__(self) -> None:
        if not self.effects:
            raise ValueError(f"tool {self.name!r} must declare at least one effect")
        if not self.name.isidentifier() or not self.name.isascii():
            raise ValueError(f"tool name {self.name!r} must be an ASCII identifier")

    @property
    def read_only(self) -> bool:
        return self.effects == frozenset({Effect.READ})

    def parameters_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments, simplified to what a small model reads well."""
        if self.input_schema is not None:
            return _clean_schema(json.loads(json.dumps(self.input_schema)))
        return _clean_schema(self.args_model.model_json_schema())

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function declaration placed in the prompt."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters_schema(),
            },
        }

    def validate(self, arguments: Mapping[str, Any]) -> BaseModel:
        """Check arguments against the model; raise ToolArgumentsError with advice for the model."""
        known = set(self.args_model.model_fields)
        if self.input_schema is not None:
            known = set(self.input_schema.get("properties") or {})
        unknown = sorted(set(arguments) - known)
        if self.input_schema is not None and self.input_schema.get("additionalProperties"):
            unknown = []
        if unknown:
            raise ToolArgumentsError(
                f"{self.name} has no parameter(s) {', '.join(unknown)}; "
                f"its parameters are: {', '.join(sorted(known)) or 'none'}."
            )
        if self.input_schema is not None:
            self._check_schema(arguments)
        try:
            return self.args_model.model_validate(dict(arguments))
        except ValidationError as exc:
            parts = []
            for err in exc.errors():
                where = ".".join(str(p) for p in err["loc"]) or "arguments"
                parts.append(f"{where}: {err['msg']}")
            raise ToolArgumentsError(
                f"Invalid arguments for {self.name}: {'; '.join(parts)}. "
                "Call it again with corrected arguments."
            ) from exc

    def _check_schema(self, arguments: Mapping[str, Any]) -> None:
        """The given JSON Schema, checked in full (nested objects, enums, bounds)."""
        import jsonschema

        schema = dict(self.input_schema or {})
        try:
            validator_class = jsonschema.validators.validator_for(schema)
            validator = validator_class(schema)
            errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
        except (jsonschema.SchemaError, TypeError, ValueError) as exc:
            raise ToolArgumentsError(
                f"{self.name} cannot be called: its declared schema is invalid ({exc})."
            ) from exc
        if errors:
            parts = [
                f"{'.'.join(str(p) for p in e.path) or 'arguments'}: {e.message[:200]}"
                for e in errors[:5]
            ]
            raise ToolArgumentsError(
                f"Invalid arguments for {self.name}: {'; '.join(parts)}. "
                "Call it again with corrected arguments."
            )

    def call(self, args: BaseModel) -> Any:
        return self.handler(args)

    def describe_call(self, arguments: Mapping[str, Any]) -> str:
        """One line naming the call and its full arguments, for receipts and logs."""
        shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
        return f"{self.name}({shown})"


def make_tool(
    handler: Handler,
    *,
    effects: Iterable[Effect],
    name: str | None = None,
    description: str | None = None,
    domain: str | None = None,
) -> Tool:
    """Build a Tool from a handler whose single parameter is annotated with a pydantic model.

    The tool's description is the model's docstring unless given; field descriptions become the
    parameter descriptions the model reads. ``domain`` defaults to the adapter the handler
    comes from (``botpsy_desktop.adapters.weather...`` -> ``weather``).
    """
    params = list(inspect.signature(handler).parameters.values())
    if len(params) != 1:
        raise TypeError(f"{handler!r} must take exactly one argument (its arguments model)")
    try:
        hints = get_type_hints(handler)
    except NameError as exc:
        raise TypeError(f"{handler!r}: its argument annotation cannot be resolved ({exc})") from exc
    model = hints.get(params[0].name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"{handler!r}: annotate its argument with a pydantic model")
    own_doc = model.__dict__.get("__doc__")
    doc = description or (inspect.cleandoc(own_doc) if isinstance(own_doc, str) else "")
    if not doc:
        raise TypeError(f"{model.__name__} needs a docstring: it is the tool's description")
    tool_name = name or str(getattr(handler, "__name__", ""))
    area = adapter_of(handler) if domain is None else domain
    return Tool(tool_name, doc, model, handler, frozenset(effects), area)


def adapter_of(handler: Handler) -> str:
    """The adapter package a handler is defined in (``weather``), or "" for any other code."""
    parts = str(getattr(handler, "__module__", "") or "").split(".")
    if len(parts) > 2 and parts[:2] == ["botpsy_desktop", "adapters"]:
        return parts[2]
    return ""


def canonical_name(name: str) -> str:
    """Normalise a name only to compare it; tricks (case, look-alikes, spaces) never match."""
    return unicodedata.normalize("NFC", name)


class ToolRegistry:
    """The tools the agent may call, by exact name."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """Exact lookup: a name that differs in case, spacing or script is unknown."""
        return self._tools.get(canonical_name(name))

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self._tools.values()]


_NOT_FOR_THE_MODEL = frozenset(
    {"title", "$defs", "default", "minLength", "maxLength", "minimum", "maximum", "examples"}
)
"""Schema keys left out of the prompt: every token of a schema is read on every request, and
these cost tokens without helping the model choose or fill a call. Defaults are what happens
when a field is left out (it is not required); bounds are still checked when the call is
validated, and a value out of range goes back to the model with the reason (``validate``)."""


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Inline $refs, drop what the model does not need (``_NOT_FOR_THE_MODEL``), and turn
    Optional[X] into X (the field is simply not required)."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                ref = node["$ref"].rsplit("/", 1)[-1]
                merged = {**defs.get(ref, {}), **{k: v for k, v in node.items() if k != "$ref"}}
                return walk(merged)
            out: dict[str, Any] = {}
            for key, value in node.items():
                if key in _NOT_FOR_THE_MODEL:
                    continue
                if key == "properties" and isinstance(value, dict):
                    out[key] = {pk: walk(pv) for pk, pv in value.items()}
                    continue
                out[key] = walk(value)
            any_of = out.get("anyOf")
            if isinstance(any_of, list):
                non_null = [s for s in any_of if s != {"type": "null"}]
                if len(non_null) == 1 and len(non_null) < len(any_of):
                    del out["anyOf"]
                    out = {**non_null[0], **out}
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    cleaned: dict[str, Any] = walk(schema)
    cleaned.setdefault("properties", {})
    cleaned["type"] = "object"
    cleaned.pop("description", None)
    return cleaned
