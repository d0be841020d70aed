"""The agent loop driven by replayed model output: real parser, gate, store and files adapter."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    Error,
    Event,
    Thinking,
    Token,
    ToolResult,
    ToolStarted,
    TurnFinished,
)
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.llm.engines.replay import ReplayBackend
from botpsy_desktop.llm.language.parser import CUT_OFF_MESSAGE
from tests.agent.gate_tools import shipped_gate
from tests.helpers.replay import xml_call


class NoteArgs(BaseModel):
    """Write a note file in the notes folder."""

    name: str = Field(description="File name, e.g. todo.txt")
    text: str = Field(description="What to write")


class SleepArgs(BaseModel):
    """Wait a while."""

    seconds: float


class BoomArgs(BaseModel):
    """Always fails."""


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    (root / "Documents").mkdir(parents=True)
    (root / "Documents" / "report.txt").write_text("quarterly numbers", encoding="utf-8")
    (root / "notes").mkdir()
    return root


@pytest.fixture
def registry(home: Path) -> ToolRegistry:
    reg = ToolRegistry(files_tools([home]))

    def write_note(args: NoteArgs) -> str:
        (home / "notes" / args.name).write_text(args.text, encoding="utf-8")
        return f"wrote {args.name}"

    def sleep(args: SleepArgs) -> str:
        time.sleep(args.seconds)
        return "slept"

    def boom(args: BoomArgs) -> str:
        raise ToolError("The disk is on fire.")

    reg.register(make_tool(write_note, effects=[Effect.LOCAL_WRITE]))
    reg.register(make_tool(sleep, effects=[Effect.READ]))
    reg.register(make_tool(boom, effects=[Effect.READ]))
    return reg


def session_for(
    turns: list[str], registry: ToolRegistry, tmp_path: Path, **settings: Any
) -> tuple[AgentSession, ReplayBackend]:
    backend = ReplayBackend(turns)
    store = ConversationStore(tmp_path / "db.sqlite3")
    opts: dict[str, Any] = {
        "system_prompt": "You are a test.",
        "max_steps": 4,
        "tool_timeout_s": 5.0,
    }
    opts.update(settings)
    session = AgentSession(backend, registry, shipped_gate(), store, LoopSettings(**opts))
    return session, backend


def drain(events: Iterator[Event], approve: bool | None = None) -> list[Event]:
    out = []
    for event in events:
        if isinstance(event, ApprovalNeeded) and approve is not None:
            if approve:
                event.request.approve()
            else:
                event.request.deny()
        out.append(event)
    return out


def of(kind: type, events: list[Event]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def test_a_files_call_is_executed_and_its_result_fed_back(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    session, backend = session_for(
        [xml_call("list_folder", path="Documents"), "You have report.txt."], registry, tmp_path
    )
    events = drain(session.run("what's in my Documents folder?"))
    started = of(ToolStarted, events)
    assert [(s.name, s.arguments) for s in started] == [("list_folder", {"path": "Documents"})]
    result = of(ToolResult, events)[0]
    assert result.ok and result.decision == "allowed"
    assert "report.txt" in result.output
    answers = of(Answer, events)
    assert answers[0].text == "You have report.txt." and answers[0].steps == 2
    # the second model turn saw the tool result as a tool message after its own call
    second = backend.prompts[1]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert second[2]["tool_calls"][0]["function"] == {
        "name": "list_folder",
        "arguments": {"path": "Documents"},
    }
    assert "report.txt" in second[3]["content"]
    # and the conversation is stored
    stored = session.store.messages(session.conversation_id)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert session.store.tool_calls(session.conversation_id)[0]["name"] == "list_folder"


def test_a_malformed_call_is_reported_to_the_model(registry: ToolRegistry, tmp_path: Path) -> None:
    truncated = "<tool_call>\n<function=list_folder>\n<parameter=path>\nDocu"
    session, backend = session_for(
        [truncated, "Sorry, let me answer directly."], registry, tmp_path
    )
    events = drain(session.run("list my documents"))
    result = of(ToolResult, events)[0]
    assert not result.ok and result.decision == "not-run"
    assert result.output == CUT_OFF_MESSAGE
    assert not of(ToolStarted, events)
    assert backend.prompts[1][-1] == {
        "role": "tool",
        "tool_call_id": result.call_id,
        "name": "list_folder",
        "content": CUT_OFF_MESSAGE,
    }
    assert of(Answer, events)[0].text == "Sorry, let me answer directly."


def test_an_unknown_tool_is_an_observation(registry: ToolRegistry, tmp_path: Path) -> None:
    session, _ = session_for(
        [xml_call("delete_everything", path="/"), "I can't do that."], registry, tmp_path
    )
    events = drain(session.run("clean up"))
    result = of(ToolResult, events)[0]
    assert not result.ok
    assert "no tool named 'delete_everything'" in result.output
    assert "list_folder" in result.output  # tells the model what exists


def test_invalid_arguments_are_an_observation(registry: ToolRegistry, tmp_path: Path) -> None:
    session, _ = session_for(
        [xml_call("list_folder", path="Documents", colour="red"), "ok"], registry, tmp_path
    )
    result = of(ToolResult, drain(session.run("list")))[0]
    assert not result.ok and "has no parameter(s) colour" in result.output


def test_an_adapter_error_and_a_path_escape_are_observations(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    session, _ = session_for(
        [xml_call("boom") + "\n" + xml_call("read_text_file", path="../../etc/passwd"), "done"],
        registry,
        tmp_path,
    )
    results = of(ToolResult, drain(session.run("go")))
    assert [r.ok for r in results] == [False, False]
    assert results[0].output == "The disk is on fire."
    assert ".." in results[1].output


def test_a_slow_tool_times_out_and_the_loop_goes_on(registry: ToolRegistry, tmp_path: Path) -> None:
    session, _ = session_for(
        [xml_call("sleep", seconds=3), "gave up"], registry, tmp_path, tool_timeout_s=0.3
    )
    started = time.perf_counter()
    events = drain(session.run("wait"))
    assert time.perf_counter() - started < 2.0
    result = of(ToolResult, events)[0]
    assert not result.ok and "did not finish within 0.3 s" in result.output
    assert of(Answer, events)[0].text == "gave up"


def test_the_step_limit_ends_the_request(registry: ToolRegistry, tmp_path: Path) -> None:
    call = xml_call("list_folder", path="Documents")
    session, backend = session_for([call, call, call], registry, tmp_path, max_steps=2)
    events = drain(session.run("loop forever"))
    errors = of(Error, events)
    assert [e.kind for e in errors] == ["step_limit"]
    assert "2 model turns" in errors[0].message
    assert not of(Answer, events)
    assert backend.remaining == 1


def test_a_denied_approval_does_not_run_the_tool(
    registry: ToolRegistry, home: Path, tmp_path: Path
) -> None:
    session, _ = session_for(
        [xml_call("write_note", name="todo.txt", text="buy milk"), "Okay, I did not write it."],
        registry,
        tmp_path,
    )
    events = drain(session.run("note: buy milk"), approve=False)
    approval = of(ApprovalNeeded, events)[0].request
    assert approval.tool == "write_note"
    assert approval.arguments == {"name": "todo.txt", "text": "buy milk"}
    assert "“todo.txt”" in approval.receipt and "“buy milk”" in approval.receipt
    assert "write_note(" not in approval.receipt  # the tool and JSON are under Details
    assert "Tool: write_note" in approval.details and '"name": "todo.txt"' in approval.details
    result = of(ToolResult, events)[0]
    assert not result.ok and result.decision == "denied"
    assert "declined" in result.output
    assert not (home / "notes" / "todo.txt").exists()


def test_an_undecided_approval_counts_as_denied(
    registry: ToolRegistry, home: Path, tmp_path: Path
) -> None:
    session, _ = session_for(
        [xml_call("write_note", name="a.txt", text="x"), "ok"], registry, tmp_path
    )
    events = drain(session.run("write"), approve=None)
    assert of(ToolResult, events)[0].decision == "denied"
    assert not (home / "notes" / "a.txt").exists()


def test_an_approved_call_runs(registry: ToolRegistry, home: Path, tmp_path: Path) -> None:
    session, _ = session_for(
        [xml_call("write_note", name="todo.txt", text="buy milk"), "Done."], registry, tmp_path
    )
    events = drain(session.run("note: buy milk"), approve=True)
    result = of(ToolResult, events)[0]
    assert result.ok and result.decision == "approved"
    assert (home / "notes" / "todo.txt").read_text(encoding="utf-8") == "buy milk"


def test_thinking_and_tokens_are_streamed_separately(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    session, _ = session_for(
        ["<think>\nThe user greets me.\n</think>\n\nHello there, friend!"], registry, tmp_path
    )
    events = drain(session.run("hi"))
    assert "".join(e.text for e in of(Thinking, events)).strip() == "The user greets me."
    assert "".join(e.text for e in of(Token, events)) == "Hello there, friend!"
    answer = of(Answer, events)[0]
    assert answer.text == "Hello there, friend!" and answer.thinking == "The user greets me."
    assert len(of(TurnFinished, events)) == 1


def test_cancel_stops_the_request(registry: ToolRegistry, tmp_path: Path) -> None:
    session, _ = session_for(["one two three four five six seven"], registry, tmp_path)
    cancel = threading.Event()
    events = []
    for event in session.run("count", cancel=cancel):
        events.append(event)
        if isinstance(event, Token):
            cancel.set()
    errors = of(Error, events)
    assert [e.kind for e in errors] == ["cancelled"]
    assert len(of(Token, events)) <= 2


def test_a_follow_up_request_sees_the_history(registry: ToolRegistry, tmp_path: Path) -> None:
    session, backend = session_for(["First answer.", "Second answer."], registry, tmp_path)
    drain(session.run("first"))
    drain(session.run("second"))
    roles = [(m["role"], m["content"]) for m in backend.prompts[1]]
    assert roles == [
        ("system", "You are a test."),
        ("user", "first"),
        ("assistant", "First answer."),
        ("user", "second"),
    ]


def test_a_replay_that_runs_out_is_a_clear_error(registry: ToolRegistry, tmp_path: Path) -> None:
    session, _ = session_for([xml_call("list_folder", path="Documents")], registry, tmp_path)
    errors = of(Error, drain(session.run("list")))
    assert errors[0].kind == "model"
    assert "no completion for model turn 2" in errors[0].message


def test_a_prompt_that_opens_thinking_streams_thinking_first(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    backend = ReplayBackend(
        [{"text": "Check the time.\n</think>\n\nIt is noon.", "thinking_open": True}]
    )
    session = AgentSession(
        backend,
        registry,
        shipped_gate(),
        ConversationStore(tmp_path / "d.sqlite3"),
        LoopSettings(system_prompt="test"),
    )
    events = drain(session.run("time?", think=True))
    assert "".join(e.text for e in of(Thinking, events)).strip() == "Check the time."
    assert "".join(e.text for e in of(Token, events)) == "It is noon."
    assert of(Answer, events)[0].thinking == "Check the time."


def test_an_approval_with_edited_arguments_runs_the_edited_call(
    registry: ToolRegistry, home: Path, tmp_path: Path
) -> None:
    session, backend = session_for(
        [xml_call("write_note", name="todo.txt", text="buy milk"), "Done."], registry, tmp_path
    )
    events = []
    for event in session.run("note: buy milk"):
        if isinstance(event, ApprovalNeeded):
            event.request.approve(arguments={"name": "todo.txt", "text": "buy oat milk"})
        events.append(event)
    result = of(ToolResult, events)[0]
    assert result.ok and result.arguments == {"name": "todo.txt", "text": "buy oat milk"}
    assert (home / "notes" / "todo.txt").read_text(encoding="utf-8") == "buy oat milk"
    assert "changed the arguments" in backend.prompts[1][-1]["content"]


def test_invalid_edited_arguments_do_not_run(
    registry: ToolRegistry, home: Path, tmp_path: Path
) -> None:
    session, _ = session_for(
        [xml_call("write_note", name="a.txt", text="x"), "ok"], registry, tmp_path
    )
    events = []
    for event in session.run("write"):
        if isinstance(event, ApprovalNeeded):
            event.request.approve(arguments={"name": "a.txt"})
        events.append(event)
    result = of(ToolResult, events)[0]
    assert not result.ok and "edited arguments were invalid" in result.output
    assert not (home / "notes" / "a.txt").exists()
