"""Tools declared once: an arguments model, a handler and declared effects give everything else."""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
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


class Tier(StrEnum):
    """How much the user is asked before a call runs; declared on the tool (see :class:`Tool`).

    * ``READ``: looks, changes nothing, sends nothing the user did not type: runs.
    * ``REVERSIBLE``: a local change with a declared inverse (a timer, a note, a folder, a
      personal event): runs at once while the request's context is clean (only the user's own
      typing in it); its result says what happened and offers Undo. Once content the user did
      not type is in the context, runs at once only when the person typed it, tool and values,
      in this request (agent/grounding.py), and asks otherwise.
    * ``ASK``: always asks and is never allowed for the whole conversation: anything outbound,
      money, personal data leaving, destructive or bulk changes, scheduling unattended runs,
      the gate's own settings.
    """

    READ = "read"
    REVERSIBLE = "reversible"
    ASK = "ask"


TIER_ORDER = {Tier.READ: 0, Tier.REVERSIBLE: 1, Tier.ASK: 2}


def stricter(a: Tier, b: Tier) -> Tier:
    """The more cautious of two tiers."""
    return a if TIER_ORDER[a] >= TIER_ORDER[b] else b


@dataclass(frozen=True)
class Inverse:
    """The call that reverses an action. ``group``: actions of one group are undone newest first.

    ``tier``: what the inverse call itself is, when its declaration knows better than the inverse
    tool's own tier for those arguments (cancelling the very timer an action set is reversible
    housekeeping, though ``cancel_alarm`` in general always asks). The gate still adds caution
    from the inverse's arguments (recipients, web addresses), never less.
    """

    tool: str
    arguments: dict[str, Any]
    group: str | None = None
    tier: Tier | None = None
    expect: Mapping[str, Any] | None = None
    """What the action left, as the inverse tool's ``state`` reports it (an event's SEQUENCE,
    LAST-MODIFIED, attendees...): before the undo runs, the state now is compared with it, and
    an undo of something that changed since asks (see agent/undo.py). None: nothing to check."""

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.tool, "arguments": self.arguments}
        if self.group:
            out["group"] = self.group
        if self.tier is not None:
            out["tier"] = self.tier.value
        if self.expect is not None:
            out["expect"] = dict(self.expect)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Inverse:
        tier = data.get("tier")
        expect = data.get("expect")
        return cls(
            str(data["tool"]),
            dict(data.get("arguments") or {}),
            data.get("group"),
            Tier(tier) if tier in {t.value for t in Tier} else None,
            dict(expect) if isinstance(expect, Mapping) else None,
        )


def result_inverse(result: Any, tier: Tier | None = None) -> Inverse | None:
    """The inverse an adapter put in its result (``{"inverse": {"tool": ..., "arguments":
    {...}}}``), with ``tier`` as its declared tier when given."""
    if isinstance(result, Mapping) and isinstance(result.get("inverse"), Mapping):
        inv = result["inverse"]
        if isinstance(inv.get("tool"), str) and isinstance(inv.get("arguments", {}), Mapping):
            found = Inverse.from_dict(inv)
            return (
                found
                if tier is None
                else Inverse(found.tool, found.arguments, found.group, tier, found.expect)
            )
    return None


def from_result(tier: Tier | None = None, missing: str = "") -> InverseRule:
    """An inverse rule: the inverse the adapter returned in its result (see
    :func:`result_inverse`), else ``missing`` as the reason there is none."""

    def rule(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
        found = result_inverse(result, tier)
        return found if found is not None else (missing or "the result names no way to undo it")

    return rule


TierRule = Callable[[Mapping[str, Any]], Tier]
"""An argument-dependent tier: from the call's arguments (an event with attendees is ASK)."""

InverseRule = Callable[[Mapping[str, Any], Any], "Inverse | str"]
"""From an action's arguments and result: its inverse, or a sentence saying why there is none."""

SummaryRule = Callable[[Mapping[str, Any]], str]
"""A call in plain words for the person deciding: "Set a timer for 5 minutes"."""

StateRule = Callable[[Mapping[str, Any]], "Mapping[str, Any] | None"]
"""From a call's arguments: the current state of what it acts on (None: it is not there any
more), in the terms an :class:`Inverse`'s ``expect`` uses. Raises nothing but ToolError."""

OutcomeRule = Callable[[str, Mapping[str, Any]], "Mapping[str, Any] | bool | None"]
"""For an action whose ending was never recorded (the audit log could not be written, e.g. a
full disk): from its call id and arguments, what the tool's own record says: the result it
returned (it happened), False (it never happened: nothing of it is there), None (cannot tell)."""


@dataclass(frozen=True)
class Resolved:
    """One thing a call acts on, resolved the way the tool will resolve it (changing nothing):
    how a receipt names it (``shown``: "alarm 3 “Wake up”, rings tomorrow 07:00, set") and its
    state now (``state``: what an approval binds to; the call runs only while it is unchanged).
    ``shown`` may hold text from outside (a mail's subject): receipts defuse it."""

    kind: str
    ref: str
    shown: str
    state: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "ref": self.ref, "shown": self.shown, "state": dict(self.state)}


DoneRule = Callable[[Mapping[str, Any], Any], str]
"""From a change's arguments and result: what it did, in words (see :attr:`Tool.done`)."""

ResolveRule = Callable[[Mapping[str, Any]], "Sequence[Resolved]"]
"""From a call's arguments: what it would act on now (which alarms, which event, which mail,
which file), read-only. Raises ToolError when the reference names nothing (or is ambiguous)."""

ALL_ARGUMENTS = "*"
"""``sends=(ALL_ARGUMENTS,)``: every argument of the call leaves the computer, named in the
schema or not (a tool server's tool receives all it is given)."""


def given(arguments: Mapping[str, Any], key: str, words: str) -> str:
    """A receipt's optional part: ``words`` with the argument ``key`` in place of ``{}`` when the
    call gives it (``given(a, "cc", ", with a copy to {}")``), else ''."""
    value = arguments.get(key)
    return words.format(value) if value else ""


@dataclass(frozen=True)
class CallContext:
    """What the gate knew about the request a tool call runs in, for tools that store requests.

    ``sources`` names the untrusted content in the context (empty: only the user's own typing);
    a tool that stores something to act on later (a routine) keeps it as the stored origin.
    """

    sources: tuple[str, ...] = ()
    call_id: str = ""
    """The call's id, as its audit entry names it: a tool's own record of what it did (the
    file-change log) keeps it, so an entry whose ending was never recorded can be settled."""
    stop: threading.Event = field(default_factory=threading.Event, compare=False)
    """Set when the call was abandoned (past its time limit, or the user pressed Stop): a tool
    doing long work checks it (:func:`check_stopped`) and ends, instead of running on unseen."""

    @property
    def tainted(self) -> bool:
        return bool(self.sources)


_CALL_CONTEXT: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "botpsy_call_context", default=None
)


def current_call_context() -> CallContext:
    """The context of the tool call running now (clean when none is set)."""
    return _CALL_CONTEXT.get() or CallContext()


class CallStopped(BotpsyError):
    """The tool call was abandoned while it ran; raised by :func:`check_stopped`."""


def check_stopped() -> None:
    """Raise CallStopped if the tool call running now was abandoned (see CallContext.stop)."""
    if current_call_context().stop.is_set():
        raise CallStopped(
            "The call was stopped: it ran past its time limit or the user stopped it."
        )


def run_in_context(context: CallContext, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` with :func:`current_call_context` returning ``context``."""
    token = _CALL_CONTEXT.set(context)
    try:
        return fn()
    finally:
        _CALL_CONTEXT.reset(token)


class ToolArgumentsError(BotpsyError):
    """The model's arguments do not fit the tool's schema; the message is written for the model."""


Handler = Callable[[Any], Any]


@dataclass(frozen=True)
class Tool:
    """One tool: its name, the model-facing description, arguments model, handler and effects.

    The gate's declaration (one place drives schema, gate, receipt and undo):

    * ``tier``: a :class:`Tier`, or a function of the arguments returning one (argument-
      dependent: cancelling "all" is ASK). None: READ for a read-only tool, else ASK.
    * ``targets``: the argument names that say *what or whom* a call acts on (recipients, a
      path, an alarm, an event id). "Allow for this conversation" binds to their values; with
      none declared it binds to identical arguments.
    * ``inverse``: from (arguments, result) the call that undoes it (or why there is none);
      required for a static REVERSIBLE tier.
    * ``summary``: the call in plain words for the receipt ("Set a timer for 5 minutes").
    * ``sends``: the arguments whose text leaves the computer even though the tool only reads
      (a place name geocoded by a web service): in a tainted context such a call asks.
      ``(ALL_ARGUMENTS,)``: every argument given, also those its schema does not name.
    * ``untrusted_output``: whether what it returns may hold content from outside (a file, a
      message, an event, a music tag, a web page, a tool server's answer). Such output makes
      the request's context untrusted. False only for a tool whose result just confirms what
      it did with its own arguments (a timer set, a folder made): the app's confirmations are
      not content someone else wrote. A failed call's output always counts as untrusted, and
      so does a result that holds a value marked where it was made as set by someone else
      (core/outside.py ``Outside``: a shared calendar's name), whatever this says.
    * ``author``: whose words its description and schema are: '' for this app's tools, else
      who wrote them (a tool server). A prompt that offers it holds that text, untrusted.
    * ``state``: the current state of what a call acts on, to check an inverse's ``expect``.
    * ``outcome``: how a call whose ending the audit log never recorded ended, from the tool's
      own record (:data:`OutcomeRule`): such an entry is then completed, so it can be undone
      (it happened) or passed over by a plain undo (it never happened).
    * ``resolve``: what a call's references name now (:class:`Resolved`): the receipt shows
      them, and an approval is bound to them (agent/gate.py ``Effect``), checked again just
      before the approved call runs.
    * ``stores``: arguments holding addresses the tool keeps, not people it contacts (a new
      contact's emails): the policy infers no sending from them. Honoured for this app's own
      tools only (a tool server's declaration is its author's word).
    """

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
    tier: Tier | TierRule | None = None
    targets: tuple[str, ...] = ()
    inverse: InverseRule | None = None
    summary: SummaryRule | None = None
    sends: tuple[str, ...] = field(default=())
    untrusted_output: bool = True
    author: str = ""
    state: StateRule | None = None
    outcome: OutcomeRule | None = None
    resolve: ResolveRule | None = None
    stores: tuple[str, ...] = ()
    done: DoneRule | None = None
    """What a change that ran did, in words, from its arguments and result ("Volume 60% →
    40%"): the card and the request's "Done" line say it instead of the summary. Only the app's
    own tools declare one (a tool server's result is not trusted to describe itself)."""

    def __post_init__(self) -> None:
        if not self.effects:
            raise ValueError(f"tool {self.name!r} must declare at least one effect")
        if not self.name.isidentifier() or not self.name.isascii():
            raise ValueError(f"tool name {self.name!r} must be an ASCII identifier")
        fields = set(self.args_model.model_fields)
        if self.input_schema is not None:
            fields = set(self.input_schema.get("properties") or {})
        for key in (*self.targets, *self.sends, *self.stores):
            if key not in fields and key != ALL_ARGUMENTS:
                raise ValueError(f"tool {self.name!r} declares {key!r}, which is not a parameter")
        if self.tier is Tier.REVERSIBLE and self.inverse is None:
            raise ValueError(f"tool {self.name!r} is declared reversible but has no inverse")
        if self.tier is Tier.READ and not self.read_only:
            raise ValueError(f"tool {self.name!r} is declared read but has effects beyond read")

    @property
    def read_only(self) -> bool:
        return self.effects == frozenset({Effect.READ})

    def sent(self, arguments: Mapping[str, Any]) -> list[str]:
        """The arguments of this call whose text leaves the computer (``sends``), given."""
        keys = list(arguments) if ALL_ARGUMENTS in self.sends else list(self.sends)
        return [k for k in keys if arguments.get(k) not in (None, "", [], {})]

    def tier_for(self, arguments: Mapping[str, Any]) -> Tier:
        """The declared tier of this call (its arguments decide where the tier is a rule)."""
        if self.tier is None:
            return Tier.READ if self.read_only else Tier.ASK
        if isinstance(self.tier, Tier):
            return self.tier
        try:
            tier = self.tier(arguments)
        except Exception:  # a rule that fails on odd arguments: the most cautious tier
            return Tier.ASK
        return tier if isinstance(tier, Tier) else Tier.ASK

    def summarize(self, arguments: Mapping[str, Any]) -> str:
        """The call in plain words (its declared summary), else a generic sentence."""
        if self.summary is not None:
            try:
                text = self.summary(arguments).strip()
            except Exception:
                text = ""
            if text:
                return text
        first = self.description.strip().splitlines()[0] if self.description.strip() else ""
        return first.rstrip(".") or f"Run {self.name}"

    def describe_done(self, arguments: Mapping[str, Any], result: Any) -> str:
        """What the change did (its ``done`` rule), else '' (the summary says it then)."""
        if self.done is None or self.author:
            return ""
        try:
            return str(self.done(arguments, result) or "").strip()
        except Exception:
            return ""

    def inverse_of(self, arguments: Mapping[str, Any], result: Any) -> Inverse | str:
        """The call that undoes this executed call, or why there is none.

        An adapter may also return ``{"inverse": {"tool": ..., "arguments": {...}}}`` in a
        result (e.g. the created event's delete call); that wins over the declaration.
        """
        if self.inverse is not None:
            return self.inverse(arguments, result)
        found = result_inverse(result)
        return found if found is not None else f"{self.name} has no known inverse"

    def target_values(
        self, arguments: Mapping[str, Any]
    ) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """The declared target fields and their values in this call (what an allowance binds)."""
        out: list[tuple[str, tuple[str, ...]]] = []
        for key in self.targets:
            value = arguments.get(key)
            items = value if isinstance(value, list | tuple) else [value]
            texts = sorted(
                {
                    (v if isinstance(v, str) else json.dumps(v, sort_keys=True)).strip()
                    for v in items
                    if v is not None
                }
            )
            out.append((key, tuple(texts)))
        return tuple(out)

    def parameters_schema(self) -> dict[str, Any]:
        """The JSON schema of the arguments, simplified to what a small model reads well (a
        fresh copy each time: the caller may change it)."""
        return dict(json.loads(self._parameters_json))

    @functools.cached_property
    def _parameters_json(self) -> str:
        # built once per tool: pydantic's schema generation costs about 7 ms a tool, and every
        # request renders every tool's schema (0.8 s a request for 55 tools before)
        if self.input_schema is not None:
            return json.dumps(_clean_schema(json.loads(json.dumps(self.input_schema))))
        return _model_schema_json(self.args_model)

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


@functools.lru_cache(maxsize=1024)
def _model_schema_json(model: type[BaseModel]) -> str:
    """An arguments model's cleaned JSON schema, built once per model class for the process:
    every app built (a window's, each test's) makes new Tool objects over the same classes."""
    return json.dumps(_clean_schema(model.model_json_schema()))


def make_tool(
    handler: Handler,
    *,
    effects: Iterable[Effect],
    name: str | None = None,
    description: str | None = None,
    domain: str | None = None,
    tier: Tier | TierRule | None = None,
    targets: Iterable[str] = (),
    inverse: InverseRule | None = None,
    summary: SummaryRule | None = None,
    sends: Iterable[str] = (),
    untrusted_output: bool = True,
    state: StateRule | None = None,
    outcome: OutcomeRule | None = None,
    resolve: ResolveRule | None = None,
    stores: Iterable[str] = (),
    done: DoneRule | None = None,
) -> Tool:
    """Build a Tool from a handler whose single parameter is annotated with a pydantic model.

    The tool's description is the model's docstring unless given; field descriptions become the
    parameter descriptions the model reads. ``domain`` defaults to the adapter the handler
    comes from (``botpsy_desktop.adapters.weather...`` -> ``weather``). ``tier``, ``targets``,
    ``inverse``, ``summary``, ``sends``, ``untrusted_output``, ``state``, ``resolve``,
    ``outcome`` and ``stores`` are the gate's declaration (see :class:`Tool`).
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
    return Tool(
        tool_name,
        doc,
        model,
        handler,
        frozenset(effects),
        area,
        tier=tier,
        targets=tuple(targets),
        inverse=inverse,
        summary=summary,
        sends=tuple(sends),
        untrusted_output=untrusted_output,
        state=state,
        outcome=outcome,
        resolve=resolve,
        stores=tuple(stores),
        done=done,
    )


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


_NOT_FOR_THE_MODEL = frozenset({"title", "$defs", "default", "maxLength", "maximum", "examples"})
"""Schema keys left out of the prompt: every token of a schema is read on every request, and
these cost tokens without helping the model choose or fill a call. Defaults are what happens
when a field is left out (it is not required); upper bounds are still checked when the call is
validated, and a value out of range goes back to the model with the reason (``validate``).
``minLength`` and ``minimum`` stay: the tool-call grammar (llm/language/grammar.py) reads them
(no empty required text, no sign on a count)."""


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
