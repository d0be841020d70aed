"""The evaluation case format (docs/EVALUATION.md): models, validation and the case loader."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import date, datetime
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.eval.checks import Check, CheckError, default_check, parse_check

DOMAINS = ("files", "calendar", "alarms", "email", "weather", "music", "none")
"""The app's domains; cases for a user's own tools may name their own (lower case)."""
CATEGORIES = ("simple", "parallel", "multi_turn", "multi_step", "irrelevance")
Category = Literal["simple", "parallel", "multi_turn", "multi_step", "irrelevance"]


class CaseError(BotpsyError):
    """A case file or case is invalid; the message names the file, the case and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _local_time(value: str) -> str:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a local time YYYY-MM-DDTHH:MM[:SS]") from None
    if moment.tzinfo is not None:
        raise ValueError(f"{value!r}: write local wall time, without an offset")
    return value


def _time_or_day(value: str) -> str:
    if "T" in value:
        return _local_time(value)
    try:
        date.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value!r} is neither YYYY-MM-DD nor YYYY-MM-DDTHH:MM") from None
    return value


# --- conversation -------------------------------------------------------------------------------


class GivenCall(_Strict):
    """A tool call in given history; without ``result`` it is executed on the sandbox."""

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: str | None = None


class GivenReply(_Strict):
    thinking: str = ""
    calls: list[GivenCall] = Field(default_factory=list)
    content: str = ""


class Turn(_Strict):
    user: str = Field(min_length=1)
    assistant: GivenReply | None = None


# --- sandbox ------------------------------------------------------------------------------------


class FileSpec(_Strict):
    path: str = Field(min_length=1)
    text: str | None = None
    size: int | None = Field(None, ge=0, le=50_000_000)
    base64: str | None = None
    modified: str | None = None
    folder: bool = False

    @field_validator("path")
    @classmethod
    def _relative(cls, value: str) -> str:
        if value.startswith(("/", "~")) or ".." in Path(value).parts:
            raise ValueError(f"{value!r}: give the path relative to the home, without .. or ~")
        return value

    @field_validator("modified")
    @classmethod
    def _when(cls, value: str | None) -> str | None:
        return None if value is None else _time_or_day(value)

    @model_validator(mode="after")
    def _one_content(self) -> FileSpec:
        given = [x for x in (self.text, self.size, self.base64) if x is not None]
        if self.folder and given:
            raise ValueError("a folder has no text, size or base64")
        if len(given) > 1:
            raise ValueError("give one of text, size or base64")
        return self


class EventSpec(_Strict):
    title: str = Field(min_length=1)
    start: str
    end: str | None = None
    duration: str | None = None
    location: str = ""
    description: str = ""
    repeat: str = ""
    attendees: list[str] = Field(default_factory=list)

    @field_validator("start", "end")
    @classmethod
    def _times(cls, value: str | None) -> str | None:
        return None if value is None else _time_or_day(value)


class TaskSpec(_Strict):
    title: str = Field(min_length=1)
    due: str | None = None
    done: bool = False

    @field_validator("due")
    @classmethod
    def _due(cls, value: str | None) -> str | None:
        return None if value is None else _time_or_day(value)


class AlarmSpec(_Strict):
    kind: Literal["alarm", "timer", "reminder"]
    time: str | None = None
    duration: str | None = None
    label: str = ""
    text: str = ""
    repeat: str = "never"

    @model_validator(mode="after")
    def _fields(self) -> AlarmSpec:
        if self.kind == "timer":
            if not self.duration:
                raise ValueError("a timer needs duration")
        else:
            if not self.time:
                raise ValueError(f"an {self.kind} needs time")
            _local_time(self.time)
        if self.kind == "reminder" and not self.text:
            raise ValueError("a reminder needs text")
        return self


class AttachmentSpec(_Strict):
    name: str = Field(min_length=1)
    size: int = Field(1000, ge=0, le=20_000_000)
    type: str = "application/octet-stream"


class MailSpec(_Strict):
    folder: str = "INBOX"
    sender: str = Field(alias="from", min_length=3)
    to: str = "me@example.org"
    cc: str = ""
    subject: str = ""
    body: str = ""
    date: str
    unread: bool = True
    attachments: list[AttachmentSpec] = Field(default_factory=list)

    @field_validator("date")
    @classmethod
    def _date(cls, value: str) -> str:
        return _local_time(value)


class TrackSpec(_Strict):
    path: str = Field(min_length=1)
    title: str = ""
    artist: str = ""
    album: str = ""
    genre: str = ""
    year: int | None = None
    track: int | None = None
    seconds: float = Field(1.0, gt=0, le=30)

    @field_validator("path")
    @classmethod
    def _in_music(cls, value: str) -> str:
        if not value.startswith("Music/") or ".." in Path(value).parts:
            raise ValueError(f"{value!r}: tracks live under Music/ (relative to the home)")
        return value


class PlaceSpec(_Strict):
    name: str = Field(min_length=1)
    country: str = ""
    country_code: str = ""
    admin1: str = ""
    latitude: float = Field(ge=-90, le=90)
    longitude: float = Field(ge=-180, le=180)
    timezone: str = "UTC"
    population: int = 100000


class DaySpec(_Strict):
    max: float | None = None
    min: float | None = None
    code: int | None = None
    precipitation: float | None = None
    rain_chance: int | None = None
    wind: float | None = None


class CurrentSpec(_Strict):
    temperature: float | None = None
    feels_like: float | None = None
    code: int | None = None
    wind: float | None = None
    humidity: int | None = None
    precipitation: float | None = None


class WeatherSpec(_Strict):
    places: list[PlaceSpec] = Field(default_factory=list)
    current: CurrentSpec = Field(default_factory=CurrentSpec)
    daily: list[DaySpec] = Field(default_factory=list)
    default_location: str | None = None


class Sandbox(_Strict):
    files: list[FileSpec] = Field(default_factory=list)
    events: list[EventSpec] = Field(default_factory=list)
    tasks: list[TaskSpec] = Field(default_factory=list)
    alarms: list[AlarmSpec] = Field(default_factory=list)
    mail: list[MailSpec] = Field(default_factory=list)
    music: list[TrackSpec] = Field(default_factory=list)
    weather: WeatherSpec = Field(default_factory=WeatherSpec)


# --- expectations -------------------------------------------------------------------------------


class ExpectedCall(_Strict):
    """One expected call: the canonical ``arguments`` and how each argument is judged."""

    tool: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    checks: dict[str, dict[str, Any]] = Field(default_factory=dict)
    extra_arguments: Literal["defaults", "any", "none"] = "defaults"

    @model_validator(mode="after")
    def _checks_parse(self) -> ExpectedCall:
        for name, spec in self.checks.items():
            parse_check(spec, f"{self.tool}.{name}")
        return self

    def parsed_checks(self) -> dict[str, Check]:
        """Every judged argument: its check (exact against the canonical value by default)."""
        out = {name: default_check(value) for name, value in self.arguments.items()}
        for name, spec in self.checks.items():
            out[name] = parse_check(spec, f"{self.tool}.{name}")
        return out


class Group(_Strict):
    any_order: list[ExpectedCall] = Field(min_length=1)


Step = ExpectedCall | Group

_STATE_KINDS = ("file", "event", "task", "alarm", "approval", "player", "mail")


class StateCheck(_Strict):
    """One end-state check; the fields used depend on ``kind`` (docs/EVALUATION.md 1.4)."""

    model_config = ConfigDict(extra="allow", frozen=True)
    kind: Literal["file", "event", "task", "alarm", "approval", "player", "mail"]

    _FIELDS: dict[str, tuple[str, ...]] = {
        "file": ("path", "exists", "contains", "folder"),
        "event": (
            "title",
            "start",
            "end",
            "day",
            "location",
            "description",
            "attendees",
            "count",
        ),
        "task": ("title", "due", "done", "count"),
        "alarm": ("type", "time", "label", "repeat", "count"),
        "approval": ("tool", "arguments", "count"),
        "player": ("state", "title", "artist", "volume"),
        "mail": ("folder", "from", "to", "cc", "subject", "body", "unread", "count"),
    }

    @model_validator(mode="after")
    def _known_fields(self) -> StateCheck:
        extra = dict(self.model_extra or {})
        allowed = self._FIELDS[self.kind]
        unknown = sorted(set(extra) - set(allowed))
        if unknown:
            raise ValueError(f"{self.kind} checks take {', '.join(allowed)}; not {unknown}")
        if self.kind == "file" and not isinstance(extra.get("path"), str):
            raise ValueError("a file check needs path")
        if self.kind == "approval":
            if not isinstance(extra.get("tool"), str):
                raise ValueError("an approval check needs tool")
            args = extra.get("arguments", {})
            if not isinstance(args, dict):
                raise ValueError("approval arguments are an object of checks")
            for name, spec in args.items():
                _value_check(spec, f"approval.arguments.{name}", "exact")
        if self.kind == "mail":
            if not isinstance(extra.get("folder", "INBOX"), str):
                raise ValueError("a mail check's folder is a folder name")
            if not isinstance(extra.get("unread", False), bool):
                raise ValueError("a mail check's unread is true or false")
        count = extra.get("count")
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise ValueError("count must be a whole number")
        for name in allowed:
            if name in ("count", "arguments", "exists", "folder", "done", "path", "unread"):
                continue
            if name in extra:
                _value_check(extra[name], f"{self.kind}.{name}", _default_kind(name))
        return self

    @property
    def fields(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    def check(self, name: str) -> Check | None:
        """The check of one field (a plain value becomes the field's default check)."""
        if name not in self.fields:
            return None
        return _value_check(self.fields[name], f"{self.kind}.{name}", _default_kind(name))


def _default_kind(field_name: str) -> str:
    if field_name in ("title", "label", "location", "description", "subject"):
        return "text"
    if field_name == "body":
        return "contains"
    if field_name in ("from", "to", "cc"):
        return "email"
    if field_name in ("start", "end", "time", "due", "day"):
        return "time"
    if field_name == "attendees":
        return "email"
    return "exact"


def _value_check(spec: Any, where: str, default_kind: str) -> Check:
    if isinstance(spec, dict):
        return parse_check(spec, where)
    if default_kind == "time" and isinstance(spec, str) and "T" not in spec:
        return parse_check({"date": spec}, where)
    return parse_check({default_kind: spec}, where)


class Expect(_Strict):
    calls: list[Step] = Field(default_factory=list)
    tolerate: list[str] = Field(default_factory=list)
    end_state: list[StateCheck] = Field(default_factory=list)
    no_call: bool = False
    oracle: list[Step] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self) -> Expect:
        if self.no_call and (self.calls or self.end_state or self.oracle):
            raise ValueError("no_call excludes calls, end_state and oracle")
        if not self.no_call and not self.calls and not self.end_state:
            raise ValueError("give calls, end_state, or no_call: true")
        if self.calls and self.oracle:
            raise ValueError("oracle is only for a case without calls (calls are the oracle)")
        if self.end_state and not self.calls and not self.oracle:
            raise ValueError("a case judged by its end state alone needs oracle calls")
        return self

    @property
    def scored(self) -> bool:
        """Whether tool choice and arguments are scored (calls given, or no call expected)."""
        return bool(self.calls) or self.no_call

    @property
    def script(self) -> list[Step]:
        """The steps the oracle replays."""
        return list(self.calls or self.oracle)

    def flat_calls(self) -> list[ExpectedCall]:
        out: list[ExpectedCall] = []
        for step in self.calls:
            out.extend(step.any_order if isinstance(step, Group) else [step])
        return out


# --- the case -----------------------------------------------------------------------------------

_ID = re.compile(r"[a-z0-9][a-z0-9_.-]*")


class Case(_Strict):
    """One evaluation case (docs/EVALUATION.md)."""

    id: str
    domain: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    category: Category
    language: str = Field(pattern=r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
    now: str
    time_zone: str
    request: str | None = Field(None, min_length=1)
    turns: list[Turn] | None = None
    sandbox: Sandbox = Field(default_factory=Sandbox)
    expect: Expect
    tools: list[str] | None = None
    notes: str = ""

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID.fullmatch(value):
            raise ValueError("an id is lower case letters, digits, '-', '_' and '.'")
        return value

    @field_validator("now")
    @classmethod
    def _now(cls, value: str) -> str:
        return _local_time(value)

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r} (an IANA name)") from None
        return value

    @model_validator(mode="after")
    def _rules(self) -> Case:
        if (self.request is None) == (self.turns is None):
            raise ValueError("give exactly one of request and turns")
        turns = self.conversation
        if not turns:
            raise ValueError("turns is empty")
        for i, turn in enumerate(turns[:-1]):
            if turn.assistant is None:
                raise ValueError(f"turn {i + 1}: every turn but the last needs assistant")
        if turns[-1].assistant is not None:
            raise ValueError("the last turn is the one answered: it has no assistant")
        expect = self.expect
        calls = [c for s in expect.script for c in (s.any_order if isinstance(s, Group) else [s])]
        cat = self.category
        if (cat == "irrelevance") != expect.no_call:
            raise ValueError('irrelevance cases, and only they, have "no_call": true')
        if cat == "irrelevance" and self.domain != "none":
            raise ValueError('irrelevance cases have domain "none"')
        if self.domain == "none" and cat != "irrelevance":
            raise ValueError('domain "none" is for irrelevance cases')
        if cat == "simple" and len(calls) != 1:
            raise ValueError("a simple case expects exactly one call")
        if cat == "parallel" and not any(
            isinstance(s, Group) and len(s.any_order) >= 2 for s in expect.script
        ):
            raise ValueError("a parallel case expects an any_order group of two or more calls")
        if cat == "multi_turn" and len(turns) < 2:
            raise ValueError("a multi_turn case has at least two turns")
        if cat == "multi_step" and len(expect.script) < 2:
            raise ValueError("a multi_step case expects at least two steps in sequence")
        return self

    @property
    def conversation(self) -> list[Turn]:
        if self.turns is not None:
            return list(self.turns)
        return [Turn(user=self.request or "")]

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone)

    @property
    def moment(self) -> datetime:
        """``now`` as an aware datetime in the case's zone."""
        return datetime.fromisoformat(self.now).replace(tzinfo=self.zone)


# --- loading ------------------------------------------------------------------------------------


def shipped_cases_dir() -> Path:
    """The folder of the cases shipped with the package."""
    return Path(str(resources.files("botpsy_desktop.eval") / "cases"))


def case_files(source: str | Path | None = None) -> list[Path]:
    """The case files: every ``*.json`` in a folder (sorted), or one file."""
    path = Path(source) if source is not None else shipped_cases_dir()
    if path.is_dir():
        files = sorted(p for p in path.glob("*.json") if p.is_file())
        if not files:
            raise CaseError(f"There are no *.json case files in {path}.", "Check --cases.")
        return files
    if path.is_file():
        return [path]
    raise CaseError(f"{path} does not exist.", "Give a case file or a folder of *.json files.")


def load_file(path: Path) -> list[Case]:
    """Every case in one file, each validated; an error names the file, the case and the field."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CaseError(f"Cannot read the case file {path}: {exc}.", "Fix the JSON.") from exc
    items = data if isinstance(data, list) else [data]
    cases: list[Case] = []
    for i, item in enumerate(items):
        label = item.get("id") if isinstance(item, dict) else None
        where = f"{path.name}, case {label!r}" if label else f"{path.name}, case #{i + 1}"
        if not isinstance(item, dict):
            raise CaseError(f"{where} is not a JSON object.", "Each case is an object.")
        try:
            cases.append(Case.model_validate(item))
        except (ValidationError, CheckError) as exc:
            raise CaseError(
                f"{where} is invalid: {_explain(exc)}.", "See docs/EVALUATION.md, section 1."
            ) from None
    return cases


def _explain(exc: ValidationError | CheckError) -> str:
    if isinstance(exc, CheckError):
        return str(exc)
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts[:4]) + (f" (and {len(parts) - 4} more)" if len(parts) > 4 else "")


def load_cases(
    source: str | Path | None = None,
    *,
    domains: Sequence[str] = (),
    ids: Iterable[str] = (),
    limit: int | None = None,
) -> list[Case]:
    """Cases from ``source`` (default: the shipped set), filtered by domain or id, in order."""
    seen: dict[str, Path] = {}
    cases: list[Case] = []
    for file in case_files(source):
        for case in load_file(file):
            if case.id in seen:
                raise CaseError(
                    f"Case id {case.id!r} is in both {seen[case.id].name} and {file.name}.",
                    "Give every case a unique id.",
                )
            seen[case.id] = file
            cases.append(case)
    wanted = set(ids)
    if wanted:
        missing = sorted(wanted - set(seen))
        if missing:
            raise CaseError(f"No case has the id {missing[0]!r}.", "Check --case.")
        cases = [c for c in cases if c.id in wanted]
    if domains:
        known = {c.domain for c in cases}
        for d in domains:
            if d not in known:
                raise CaseError(
                    f"No case has the domain {d!r}.", f"Use one of {', '.join(sorted(known))}."
                )
        cases = [c for c in cases if c.domain in domains]
    if limit is not None:
        cases = cases[:limit]
    return cases
