"""Scoring one case: tool choice, arguments (with order groups), end state, irrelevance."""

from __future__ import annotations

import copy
import weakref
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from email import policy
from email.parser import BytesParser
from pathlib import Path
from typing import Any

import icalendar
from pydantic import BaseModel

from botpsy_desktop.adapters.alarms.when import parse_repeat
from botpsy_desktop.agent.tools import Tool, ToolRegistry
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.eval.checks import (
    Check,
    Context,
    addresses,
    fold,
    normal_path,
    parse_check,
    same,
)
from botpsy_desktop.eval.imap import Mailbox, Message
from botpsy_desktop.eval.spec import Case, ExpectedCall, Group, StateCheck


@dataclass(frozen=True)
class ActualCall:
    """A well-formed call the model made (malformed ones are counted, not matched)."""

    name: str
    arguments: dict[str, Any]


@dataclass
class Approval:
    tool: str
    arguments: dict[str, Any]


@dataclass
class World:
    """What the end-state checks look at after the run."""

    context: Context
    calendar_dir: Path
    alarms: list[Any] = field(default_factory=list)
    approvals: list[Approval] = field(default_factory=list)
    player_state: str = "stopped"
    player_track: Mapping[str, str] | None = None
    player_volume: int | None = None
    mailbox: Mailbox | None = None


@dataclass
class Score:
    tool_ok: bool | None
    args_ok: bool | None
    state_ok: bool | None
    problems: list[str] = field(default_factory=list)


_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]] = weakref.WeakKeyDictionary()


def tool_schema(tool: Tool) -> dict[str, Any]:
    """``tool.schema()``, with the arguments' JSON schema built once per arguments model (the
    loop asks for every schema on every model turn; hundreds of cases make that add up)."""
    params = _SCHEMAS.get(tool.args_model)
    if params is None:
        params = _SCHEMAS[tool.args_model] = tool.parameters_schema()
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": copy.deepcopy(params),
        },
    }


def schema_defaults(registry: ToolRegistry) -> dict[str, dict[str, Any]]:
    """Each tool's argument defaults, from its arguments model's JSON schema (the prompt's
    schemas leave defaults out), worked out once per arguments model: pydantic builds the schema
    anew on each call, and every case scores against a new app's registry of the same models
    (a third of `botpsy eval --replay-oracle`'s time before)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in registry:
        defaults = _DEFAULTS.get(tool.args_model)
        if defaults is None:
            props = tool.args_model.model_json_schema().get("properties", {})
            defaults = {k: v["default"] for k, v in props.items() if "default" in v}
            _DEFAULTS[tool.args_model] = defaults
        out[tool.name] = copy.deepcopy(defaults)
    return out


_DEFAULTS: weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]] = weakref.WeakKeyDictionary()


def call_problems(
    expected: ExpectedCall, actual: ActualCall, defaults: Mapping[str, Any], ctx: Context
) -> list[str]:
    """Why ``actual`` is not ``expected`` (empty: it matches)."""
    if actual.name != expected.tool:
        return [f"called {actual.name}, not {expected.tool}"]
    problems: list[str] = []
    checks = expected.parsed_checks()
    given = {k: v for k, v in actual.arguments.items() if v is not None}
    for name, check in checks.items():
        if name not in given:
            if not (check.optional or check.kind == "absent"):
                problems.append(f"{expected.tool}: {name} is missing")
            continue
        value = given[name]
        if check.kind == "absent":
            if not (name in defaults and same(value, defaults[name])):
                problems.append(f"{expected.tool}: {name}={value!r} should be left out")
        elif not check.passes(value, ctx):
            problems.append(f"{expected.tool}: {name}={value!r} fails {_describe(check)}")
    for name, value in given.items():
        if name in checks or expected.extra_arguments == "any":
            continue
        if (
            expected.extra_arguments == "defaults"
            and name in defaults
            and same(value, defaults[name])
        ):
            continue
        problems.append(f"{expected.tool}: unexpected argument {name}={value!r}")
    return problems


def _describe(check: Check) -> str:
    if check.kind == "number":
        return f"number {check.value}±{check.tolerance:g}"
    return f"{check.kind} {check.value!r}"


def score_calls(
    case: Case,
    actual: Sequence[ActualCall],
    malformed: int,
    registry: ToolRegistry,
    ctx: Context,
) -> tuple[bool | None, bool | None, list[str]]:
    """Tool choice and arguments of one run; None for a case judged by its end state alone."""
    expect = case.expect
    if expect.no_call:
        ok = not actual and malformed == 0
        why = [] if ok else [f"called {', '.join(a.name for a in actual) or 'a malformed call'}"]
        return ok, ok, why
    if not expect.calls:
        return None, None, []
    wanted = Counter(c.tool for c in expect.flat_calls())
    made = Counter(a.name for a in actual)
    missing = wanted - made
    extra = made - wanted
    problems = [f"no call of {name}" for name in sorted(missing)]
    problems += [f"extra call of {name}" for name in sorted(extra) if name not in expect.tolerate]
    if problems:
        return False, False, problems
    defaults = schema_defaults(registry)
    steps = [s.any_order if isinstance(s, Group) else [s] for s in expect.calls]
    if _assign(steps, 0, list(actual), set(), 0, defaults, ctx):
        return True, True, []
    return True, False, _argument_problems(expect.flat_calls(), actual, defaults, ctx)


def _assign(
    steps: list[list[ExpectedCall]],
    i: int,
    actual: list[ActualCall],
    used: set[int],
    floor: int,
    defaults: Mapping[str, Mapping[str, Any]],
    ctx: Context,
) -> bool:
    """Whether steps ``i``.. can be matched to unused calls at index ``floor`` or later, each step
    after the previous one; the calls of one step in any order."""
    if i == len(steps):
        return True
    group = steps[i]

    def place(j: int, taken: list[int]) -> bool:
        if j == len(group):
            return _assign(steps, i + 1, actual, used | set(taken), max(taken) + 1, defaults, ctx)
        exp = group[j]
        for k in range(floor, len(actual)):
            if k in used or k in taken:
                continue
            fits = not call_problems(exp, actual[k], defaults.get(exp.tool, {}), ctx)
            if fits and place(j + 1, [*taken, k]):
                return True
        return False

    return place(0, [])


def _argument_problems(
    expected: list[ExpectedCall],
    actual: Sequence[ActualCall],
    defaults: Mapping[str, Mapping[str, Any]],
    ctx: Context,
) -> list[str]:
    out: list[str] = []
    for exp in expected:
        tries: list[list[str]] = [
            call_problems(exp, a, defaults.get(exp.tool, {}), ctx)
            for a in actual
            if a.name == exp.tool
        ]
        if tries and all(tries):
            out += sorted(tries, key=len)[0]
    return out or ["the calls are right but not in the expected order"]


# --- end state ----------------------------------------------------------------------------------


def score_state(case: Case, world: World) -> tuple[bool | None, list[str]]:
    if not case.expect.end_state:
        return None, []
    problems: list[str] = []
    for i, check in enumerate(case.expect.end_state):
        try:
            why = _state_problem(check, world)
        except (BotpsyError, ValueError, OSError) as exc:
            why = f"could not be checked: {exc}"
        if why:
            problems.append(f"end state #{i + 1} ({check.kind}): {why}")
    return not problems, problems


def _count_problem(check: StateCheck, found: int, what: str) -> str | None:
    count = check.fields.get("count")
    if count is None:
        return None if found >= 1 else f"no {what} matches"
    return None if found == count else f"{found} {what}s match, not {count}"


def _state_problem(check: StateCheck, world: World) -> str | None:
    kind, f, ctx = check.kind, check.fields, world.context
    if kind == "file":
        path = Path(normal_path(str(f["path"]), ctx.home))
        exists = path.exists() or path.is_symlink()
        if exists != f.get("exists", True):
            return f"{f['path']} {'exists' if exists else 'does not exist'}"
        if exists and "folder" in f and path.is_dir() != f["folder"]:
            return f"{f['path']} is {'a folder' if path.is_dir() else 'a file'}"
        if exists and "contains" in f:
            text = path.read_text(encoding="utf-8", errors="replace")
            if fold(str(f["contains"])) not in fold(text):
                return f"{f['path']} does not contain {f['contains']!r}"
        return None
    if kind in ("event", "task"):
        items = _calendar_items(world.calendar_dir, "VEVENT" if kind == "event" else "VTODO")
        found = sum(1 for item in items if _item_matches(check, item, ctx))
        return _count_problem(check, found, kind)
    if kind == "alarm":
        found = sum(1 for a in world.alarms if _alarm_matches(check, a, ctx))
        return _count_problem(check, found, "alarm")
    if kind == "approval":
        args = {k: check_of(v) for k, v in dict(f.get("arguments", {})).items()}
        found = sum(
            1
            for a in world.approvals
            if a.tool == f["tool"]
            and all(
                (n in a.arguments and c.passes(a.arguments[n], ctx))
                or (c.optional and n not in a.arguments)
                for n, c in args.items()
            )
        )
        return _count_problem(check, found, "approval")
    if kind == "mail":
        if world.mailbox is None:
            return "the run has no mailbox to look at"
        messages = world.mailbox.messages(str(f.get("folder", "INBOX")))
        found = sum(1 for m in messages if _mail_matches(check, m, ctx))
        return _count_problem(check, found, "message")
    # player
    if "state" in f and world.player_state != f["state"]:
        return f"the player is {world.player_state}, not {f['state']}"
    for name in ("title", "artist"):
        c = check.check(name)
        track = world.player_track or {}
        if c is not None and not c.passes(track.get(name, ""), ctx):
            return f"the {name} loaded is {track.get(name)!r}"
    if "volume" in f:
        c = check.check("volume")
        if c is None or world.player_volume is None or not c.passes(world.player_volume, ctx):
            return f"the volume is {world.player_volume}"
    return None


def check_of(spec: Any) -> Check:
    """An approval argument's check: a check object, or a plain value compared exactly."""
    return parse_check(spec if isinstance(spec, dict) else {"exact": spec}, "approval")


def _calendar_items(folder: Path, kind: str) -> list[Any]:
    out: list[Any] = []
    for path in sorted(folder.glob("*.ics")) if folder.is_dir() else []:
        try:
            cal = icalendar.Calendar.from_ical(path.read_bytes())
        except ValueError:
            continue
        out.extend(c for c in cal.walk(kind))
    return out


def _moment(value: Any) -> datetime | date | None:
    if value is None:
        return None
    dt = getattr(value, "dt", value)
    return dt if isinstance(dt, datetime | date) else None


def _time_field(check: Check, actual: datetime | date | None, ctx: Context) -> bool:
    if actual is None:
        return False
    if check.kind == "time":
        if not isinstance(actual, datetime):
            return False
        local = actual.astimezone(ctx.tz) if actual.tzinfo else actual
        return local.replace(tzinfo=None, second=0, microsecond=0) == datetime.fromisoformat(
            str(check.value)
        )
    if check.kind == "date":
        day = actual.astimezone(ctx.tz).date() if isinstance(actual, datetime) else actual
        return day == date.fromisoformat(str(check.value))
    text = actual.isoformat() if isinstance(actual, date) else str(actual)
    return check.passes(text, ctx)


def _item_matches(check: StateCheck, item: Any, ctx: Context) -> bool:
    f = check.fields
    for name in ("title", "location", "description"):
        c = check.check(name)
        prop = {"title": "SUMMARY", "location": "LOCATION", "description": "DESCRIPTION"}[name]
        if c is not None and not c.passes(str(item.get(prop, "")), ctx):
            return False
    for name, prop in (("start", "DTSTART"), ("end", "DTEND"), ("day", "DTSTART"), ("due", "DUE")):
        c = check.check(name)
        if c is not None and not _time_field(c, _moment(item.get(prop)), ctx):
            return False
    if "done" in f:
        done = str(item.get("STATUS", "")).upper() == "COMPLETED"
        if done != f["done"]:
            return False
    c = check.check("attendees")
    if c is not None:
        raw = item.get("ATTENDEE")
        people = raw if isinstance(raw, list) else [raw] if raw is not None else []
        found = addresses(
            ", ".join(str(p).removeprefix("mailto:").removeprefix("MAILTO:") for p in people)
        )
        if c.kind == "email":
            if found != c.value:
                return False
        elif not c.passes(", ".join(found or []), ctx):
            return False
    return True


def _mail_matches(check: StateCheck, stored: Message, ctx: Context) -> bool:
    if "unread" in check.fields and stored.has("\\Seen") == check.fields["unread"]:
        return False
    msg = BytesParser(policy=policy.default).parsebytes(stored.raw)
    for name, header in (("from", "From"), ("to", "To"), ("cc", "Cc"), ("subject", "Subject")):
        c = check.check(name)
        if c is not None and not c.passes(str(msg.get(header, "")), ctx):
            return False
    c = check.check("body")
    if c is not None:
        part = msg.get_body(("plain", "html"))
        text = str(part.get_content()) if part is not None else ""
        if not c.passes(text, ctx):
            return False
    return True


def _alarm_matches(check: StateCheck, alarm: Any, ctx: Context) -> bool:
    f = check.fields
    if "type" in f and str(getattr(alarm.kind, "value", alarm.kind)) != f["type"]:
        return False
    c = check.check("label")
    if c is not None and not c.passes(alarm.label, ctx):
        return False
    c = check.check("time")
    if c is not None and not _time_field(c, alarm.next_ring or alarm.due, ctx):
        return False
    if "repeat" in f:
        want = f["repeat"]
        try:
            days = parse_repeat(str(want)) if isinstance(want, str) else None
        except BotpsyError:
            days = None
        if days is None or frozenset(days) != frozenset(alarm.days):
            return False
    return True
