"""Running cases through the full app path: sandbox profile, real loop, gate in record-only mode."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from botpsy_desktop.agent.events import Answer, ApprovalNeeded, Error
from botpsy_desktop.agent.loop import AgentSession
from botpsy_desktop.agent.tools import Effect, Tool, ToolArgumentsError, ToolRegistry
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.eval.sandbox import (
    Sandbox,
    SandboxError,
    SandboxSettings,
    open_sandbox,
    run_tool,
)
from botpsy_desktop.eval.scoring import (
    ActualCall,
    Approval,
    World,
    score_calls,
    score_state,
    tool_schema,
)
from botpsy_desktop.eval.spec import Case, CaseError, Group, Step
from botpsy_desktop.eval.weather import WeatherStandIn
from botpsy_desktop.llm.backend import Backend, BackendWrapper, Message
from botpsy_desktop.llm.language.parser import parse_turn
from botpsy_desktop.llm.types import Completion, PromptProgress, TextPiece

ToolSet = Literal["app", "domain"]
APPROVER = "evaluation (record-only: approved after recording)"


def tool_domain(tool: Tool) -> str | None:
    """The adapter folder a tool comes from (files, calendar, ...), if it is one of the app's."""
    module = str(getattr(tool.handler, "__module__", "") or "")
    parts = module.split(".")
    if "adapters" in parts and parts.index("adapters") + 1 < len(parts):
        return parts[parts.index("adapters") + 1]
    return None


@dataclass
class TurnRecord:
    text: str
    calls: int
    malformed: int
    ttft_s: float
    prompt_tokens: int
    completion_tokens: int


class RecordingBackend(BackendWrapper[Backend]):
    """Wraps a backend and keeps what each model turn wrote, its parse and its timing."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.turns: list[TurnRecord] = []
        self.calls: list[ActualCall] = []

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        may_call: Collection[str] | None = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        started = time.perf_counter()
        first: float | None = None
        for item in self.inner.complete(
            messages, tools, enable_thinking=enable_thinking, cancel=cancel, may_call=may_call
        ):
            if isinstance(item, TextPiece) and first is None:
                first = time.perf_counter() - started
            if isinstance(item, Completion):
                parsed = parse_turn(item.text, tools, started_in_thinking=item.started_in_thinking)
                self.calls += [ActualCall(c.name, dict(c.arguments)) for c in parsed.tool_calls]
                ttft = item.stats.time_to_first_token_s or first
                self.turns.append(
                    TurnRecord(
                        item.text,
                        len(parsed.tool_calls),
                        len(parsed.errors),
                        ttft if ttft is not None else time.perf_counter() - started,
                        item.stats.prompt_tokens,
                        item.stats.completion_tokens,
                    )
                )
            yield item


@dataclass
class CaseResult:
    """How one case went."""

    id: str
    domain: str
    category: str
    language: str
    tool_ok: bool | None
    args_ok: bool | None
    state_ok: bool | None
    no_call_expected: bool
    calls: list[dict[str, Any]] = field(default_factory=list)
    written_calls: int = 0
    malformed: int = 0
    approvals: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    answer: str = ""
    error: str | None = None
    ttft_s: float | None = None
    wall_s: float = 0.0
    model_turns: int = 0
    prompt_tokens: int = 0

    @classmethod
    def unscored(cls, case: Case, error: str | None = None) -> CaseResult:
        """The result of ``case`` before anything is scored (or when nothing could be)."""
        return cls(
            case.id,
            case.domain,
            case.category,
            case.language,
            None,
            None,
            None,
            case.expect.no_call,
            error=error,
        )

    @property
    def passed(self) -> bool:
        return self.error is None and all(
            v is not False for v in (self.tool_ok, self.args_ok, self.state_ok)
        )

    @property
    def made_call(self) -> bool:
        return bool(self.calls) or self.malformed > 0

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        return out


class OfferedTools(ToolRegistry):
    """The app's tools offered in a case's prompt; the same declarations, schemas cached."""

    def schemas(self) -> list[dict[str, Any]]:
        return [tool_schema(t) for t in self]


def offered_tools(case: Case, registry: ToolRegistry, tool_set: ToolSet) -> ToolRegistry:
    """The tools in the prompt: the case's list, else the app's, or only the case's domain."""
    if case.tools is not None:
        names = list(case.tools)
    elif tool_set == "app":
        names = registry.names()
    else:
        domain = case.domain if case.domain != "none" else "weather"
        names = [t.name for t in registry if tool_domain(t) == domain]
        names += [c.tool for s in case.expect.script for c in _calls(s)] + case.expect.tolerate
    out = OfferedTools()
    for name in dict.fromkeys(names):
        tool = registry.get(name)
        if tool is None:
            raise CaseError(
                f"Case {case.id} offers the tool {name!r}, which the app does not have."
            )
        out.register(tool)
    return out


def _calls(step: Step) -> list[Any]:
    return list(step.any_order) if isinstance(step, Group) else [step]


def check_cases(cases: Sequence[Case], registry: ToolRegistry) -> None:
    """Check the cases against the app's tools: names, read-only tolerated tools, canonical
    arguments the tool accepts. Raises CaseError naming the case."""
    for case in cases:
        used = [c for s in case.expect.script for c in _calls(s)]
        for call in used:
            tool = registry.get(call.tool)
            if tool is None:
                raise CaseError(
                    f"Case {case.id} expects the tool {call.tool!r}, which the app does not have.",
                    "Use a tool listed by `botpsy tools`.",
                )
            try:
                tool.validate(call.arguments)
            except ToolArgumentsError as exc:
                raise CaseError(
                    f"Case {case.id}: the canonical arguments of {call.tool} are invalid: {exc}",
                    "The oracle replays them, so they must be valid.",
                ) from None
        for name in case.expect.tolerate:
            tool = registry.get(name)
            if tool is None or tool.effects != frozenset({Effect.READ}):
                raise CaseError(
                    f"Case {case.id} tolerates {name!r}, which is not a read-only tool of the app.",
                    "Only tools whose effect is read can be tolerated.",
                )
        for name in case.tools or []:
            if registry.get(name) is None:
                raise CaseError(f"Case {case.id} offers the unknown tool {name!r}.")


def _write_history(box: Sandbox, session: AgentSession) -> None:
    store, cid = box.app.store, session.conversation_id
    for n, turn in enumerate(box.case.conversation[:-1], start=1):
        store.append(cid, {"role": "user", "content": turn.user})
        reply = turn.assistant
        assert reply is not None  # validated: every turn but the last has one
        if not reply.calls:
            store.append(
                cid,
                {
                    "role": "assistant",
                    "content": reply.content,
                    "reasoning_content": reply.thinking,
                },
            )
            continue
        ids = [f"call_hist{n}_{i}" for i in range(len(reply.calls))]
        store.append(
            cid,
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": reply.thinking,
                "tool_calls": [
                    {
                        "id": i,
                        "type": "function",
                        "function": {"name": c.tool, "arguments": c.arguments},
                    }
                    for i, c in zip(ids, reply.calls, strict=True)
                ],
            },
        )
        for call_id, call in zip(ids, reply.calls, strict=True):
            result = call.result
            if result is None:
                result = run_tool(box, call.tool, call.arguments, f"turn {n}'s call of {call.tool}")
            store.append(
                cid,
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": call.tool,
                    "content": result,
                    "data": True,
                },
            )
        if reply.content:
            store.append(
                cid, {"role": "assistant", "content": reply.content, "reasoning_content": ""}
            )


def run_case(
    case: Case,
    backend: Backend,
    settings: SandboxSettings,
    *,
    tool_set: ToolSet = "app",
    think: bool = False,
) -> CaseResult:
    """Run one case on a fresh sandbox and score it. Errors of the model become the result's
    ``error``; a case whose sandbox cannot be built raises SandboxError."""
    result = CaseResult.unscored(case)
    with open_sandbox(case, settings) as box:
        app = box.app
        registry = offered_tools(case, app.registry, tool_set)
        recorder = RecordingBackend(backend)
        session = AgentSession(recorder, registry, app.gate, app.store, app.loop_settings())
        _write_history(box, session)
        approvals: list[Approval] = []
        started = time.perf_counter()
        try:
            for event in session.run(case.conversation[-1].user, think=think):
                if isinstance(event, ApprovalNeeded):
                    req = event.request
                    approvals.append(Approval(req.tool, dict(req.arguments)))
                    req.approve(by=APPROVER)
                elif isinstance(event, Answer):
                    result.answer = event.text
                elif isinstance(event, Error):
                    result.error = f"{event.kind}: {event.message}"
        except BotpsyError as exc:
            result.error = f"model: {exc}"
        result.wall_s = time.perf_counter() - started
        turns = recorder.turns
        result.model_turns = len(turns)
        result.ttft_s = turns[0].ttft_s if turns else None
        result.prompt_tokens = turns[0].prompt_tokens if turns else 0
        result.malformed = sum(t.malformed for t in turns)
        result.written_calls = sum(t.calls + t.malformed for t in turns)
        result.calls = [{"name": c.name, "arguments": c.arguments} for c in recorder.calls]
        result.approvals = [{"tool": a.tool, "arguments": a.arguments} for a in approvals]
        tool_ok, args_ok, problems = score_calls(
            case, recorder.calls, result.malformed, app.registry, box.context
        )
        player = box.player
        track = box.tracks.get(player.loaded) if player.loaded is not None else None
        world = World(
            box.context,
            app.paths.data_dir / "calendar",
            app.alarms.alarms() if app.alarms is not None else [],
            approvals,
            player.state().value,
            (
                {"title": track.title, "artist": track.artist}
                if track is not None
                else {"title": player.loaded.stem, "artist": ""}
                if player.loaded is not None
                else None
            ),
            round(player.volume * 100) if player.volume is not None else None,
            box.mailbox,
        )
        state_ok, state_problems = score_state(case, world)
        result.tool_ok, result.args_ok, result.state_ok = tool_ok, args_ok, state_ok
        result.problems = problems + state_problems
    return result


def run_cases(
    cases: Sequence[Case],
    backend_for: Callable[[Case, int], Backend],
    *,
    settings: Mapping[str, Any] | None = None,
    tool_set: ToolSet = "app",
    think: bool = False,
    progress: Callable[[CaseResult, int, int], None] | None = None,
) -> list[CaseResult]:
    """Run every case (in order) with the backend ``backend_for(case, index)`` gives."""
    from botpsy_desktop.eval.weather import weather_stand_in

    results: list[CaseResult] = []
    with ExitStack() as stack:
        stand_in: WeatherStandIn = stack.enter_context(weather_stand_in())
        sandbox = SandboxSettings(
            stand_in,
            model=dict((settings or {}).get("model", {})),
            agent=dict((settings or {}).get("agent", {})),
        )
        for index, case in enumerate(cases):
            backend = backend_for(case, index)
            try:
                result = run_case(case, backend, sandbox, tool_set=tool_set, think=think)
            except SandboxError as exc:
                result = CaseResult.unscored(case, f"sandbox: {exc}")
            results.append(result)
            if progress is not None:
                progress(result, index + 1, len(cases))
    return results
