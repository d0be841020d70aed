"""The audit log of executed actions with their inverses, `botpsy log` and `botpsy undo`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from botpsy_desktop.adapters.alarms import AlarmService, alarms_tools
from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.audit import AuditLog, Undone, format_entry
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.agent.undo import carry_out, plan_undo
from botpsy_desktop.cli import main
from botpsy_desktop.core.errors import BotpsyError, ToolError
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from tests.agent.gate_tools import drive, make_session, shipped_gate, xml_call


class ThingArgs(BaseModel):
    """Create or delete a thing."""

    name: str


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "home"
    (root / "Documents").mkdir(parents=True)
    (root / "Documents" / "report.txt").write_text("numbers", encoding="utf-8")
    return root


@pytest.fixture
def alarms(tmp_path: Path) -> Iterator[AlarmService]:
    service = AlarmService(tmp_path / "data" / "alarms.sqlite3")
    yield service
    service.shutdown()


@pytest.fixture
def registry(home: Path, tmp_path: Path, alarms: AlarmService) -> ToolRegistry:
    reg = ToolRegistry(files_tools([home], data_dir=tmp_path / "data", trash=None))
    for tool in alarms_tools(alarms):
        reg.register(tool)
    made: set[str] = set()

    def create_thing(args: ThingArgs) -> dict[str, Any]:
        made.add(args.name)
        return {"created": args.name, "inverse": {"tool": "delete_thing", "arguments": {}}}

    def delete_thing(args: ThingArgs) -> str:
        made.discard(args.name)
        return "deleted"

    def break_thing(args: ThingArgs) -> str:
        raise ToolError("It would not break.")

    reg.register(make_tool(create_thing, effects={Effect.LOCAL_WRITE}))
    reg.register(make_tool(delete_thing, effects={Effect.DESTRUCTIVE}))
    reg.register(make_tool(break_thing, effects={Effect.LOCAL_WRITE}))
    return reg


@pytest.fixture
def store(tmp_path: Path) -> ConversationStore:
    return ConversationStore(tmp_path / "db.sqlite3")


def undo(store: ConversationStore, registry: ToolRegistry) -> Undone:
    """Undo the newest reversible action the way the app does: through the shipped gate."""
    audit = AuditLog(store)
    return carry_out(audit, plan_undo(audit, registry, shipped_gate()), "user (botpsy undo)")


def run(turns: list[str], registry: ToolRegistry, store: ConversationStore, decide: str) -> None:
    drive(make_session([*turns, "Done."], registry, store).run("do it"), decide)


def test_an_approved_change_is_logged_with_its_inverse_and_undone(
    home: Path, registry: ToolRegistry, store: ConversationStore
) -> None:
    run(
        [xml_call("write_text_note", path="Documents/todo.md", text="milk")],
        registry,
        store,
        "approve",
    )
    assert (home / "Documents" / "todo.md").exists()
    [entry] = store.actions()
    assert entry["tool"] == "write_text_note" and entry["ok"]
    assert entry["arguments"] == {"path": "Documents/todo.md", "text": "milk"}
    # a reversible change the user asked for in a clean context runs at once, and is logged
    assert entry["approved_by"].startswith("ran at once")
    assert entry["effects"] == ["local-write"]
    change = entry["inverse"]["arguments"]["change"]  # exactly this change, by its log id
    assert isinstance(change, str) and change
    assert entry["inverse"] == {
        "tool": "undo_last_file_change",
        "arguments": {"change": change},
        "group": "files",
        "tier": "reversible",
    }
    line = format_entry(entry)
    assert "approved by ran at once" in line
    assert f'undo: undo_last_file_change(change="{change}")' in line

    done = undo(store, registry)
    assert not (home / "Documents" / "todo.md").exists()
    assert done.action["id"] == entry["id"] and "Removed the note" in done.result
    newest, original = store.actions()
    assert newest["undoes"] == entry["id"] and newest["approved_by"] == "user (botpsy undo)"
    assert original["undone_by"] == newest["id"]
    with pytest.raises(BotpsyError, match="no action left to undo"):
        undo(store, registry)


def test_reads_and_denied_calls_are_not_logged(
    registry: ToolRegistry, store: ConversationStore
) -> None:
    run(
        [
            xml_call("read_text_file", path="Documents/report.txt"),
            xml_call("move_to_trash", path="Documents/report.txt"),
        ],
        registry,
        store,
        "deny",
    )
    assert store.actions() == []


def test_an_undo_the_model_ran_is_not_undone_twice(
    home: Path, registry: ToolRegistry, store: ConversationStore
) -> None:
    run(
        [
            xml_call("write_text_note", path="Documents/a.md", text="a"),
            xml_call("write_text_note", path="Documents/b.md", text="b"),
            xml_call("undo_last_file_change"),
        ],
        registry,
        store,
        "approve",
    )
    assert (home / "Documents" / "a.md").exists() and not (home / "Documents" / "b.md").exists()
    undo(store, registry)  # takes back a.md, not b.md a second time
    assert not (home / "Documents" / "a.md").exists()


def test_a_set_alarm_is_undone_by_cancelling_it(
    registry: ToolRegistry, store: ConversationStore, alarms: AlarmService
) -> None:
    run([xml_call("set_alarm", time="7:30", label="Gym")], registry, store, "approve")
    [alarm] = alarms.alarms()
    [entry] = store.actions()
    assert entry["inverse"] == {
        "tool": "cancel_alarm",
        "arguments": {"alarm": str(alarm.id)},
        "tier": "reversible",
    }
    undo(store, registry)
    assert [a for a in alarms.alarms() if a.next_ring is not None] == []


def test_an_inverse_the_tool_returns_is_used_and_failures_are_logged(
    registry: ToolRegistry, store: ConversationStore
) -> None:
    run(
        [xml_call("create_thing", name="x"), xml_call("break_thing", name="y")],
        registry,
        store,
        "approve",
    )
    broken, created = store.actions()
    assert not broken["ok"] and broken["inverse"] is None
    assert "nothing to undo" in broken["not_reversible"]
    assert created["inverse"] == {"tool": "delete_thing", "arguments": {}}
    # the recorded inverse lacks the name: undo says so and changes nothing
    with pytest.raises(BotpsyError, match=r"recorded inverse .* is invalid"):
        undo(store, registry)
    assert store.actions()[0]["undone_by"] is None


def test_an_entry_survives_deleting_its_conversation(
    registry: ToolRegistry, store: ConversationStore
) -> None:
    session = make_session([xml_call("set_timer", duration="10 minutes"), "ok"], registry, store)
    drive(session.run("timer"), "approve")
    store.delete(session.conversation_id)
    assert [e["tool"] for e in store.actions()] == ["set_timer"]


# --- the commands ------------------------------------------------------------------------------


@pytest.fixture
def profile(tmp_path: Path) -> tuple[Path, Path]:
    home, files = tmp_path / "profile", tmp_path / "files"
    (files / "Documents").mkdir(parents=True)
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}}), encoding="utf-8"
    )
    return home, files


def test_botpsy_log_and_undo(
    profile: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, files = profile
    (files / "Documents" / "draft.txt").write_text("the plan", encoding="utf-8")
    replay = tmp_path / "replay.json"
    turns = [  # after reading a file (content the user did not type) the note asks
        xml_call("read_text_file", path="Documents/draft.txt"),
        xml_call("write_text_note", path="Documents/plan.md", text="the plan"),
        "Written.",
    ]
    replay.write_text(json.dumps(turns), encoding="utf-8")
    base = ["--home", str(home)]
    assert main([*base, "log"]) == 0
    assert "has not carried out any action" in capsys.readouterr().out
    assert main([*base, "ask", "--replay", str(replay), "--approve", "deny", "note"]) == 0
    capsys.readouterr()
    assert main([*base, "log", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main([*base, "ask", "--replay", str(replay), "--approve", "all", "note"]) == 0
    assert (files / "Documents" / "plan.md").exists()
    capsys.readouterr()
    assert main([*base, "log"]) == 0
    out = capsys.readouterr().out
    assert "write_text_note" in out and "approved by --approve all" in out
    assert "undo: undo_last_file_change(change=" in out  # exactly this change
    assert main([*base, "undo"]) == 0
    assert "Undid #1 write_text_note" in capsys.readouterr().out
    assert not (files / "Documents" / "plan.md").exists()
    assert main([*base, "log", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    assert [(e["tool"], e["undone_by"], e["undoes"]) for e in entries] == [
        ("undo_last_file_change", None, 1),
        ("write_text_note", 2, None),
    ]
    assert main([*base, "undo"]) == 1
    assert "There is no action left to undo" in capsys.readouterr().err


def test_botpsy_undo_id_undoes_exactly_the_action_it_names(
    profile: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a note and an approved trashing, `botpsy undo ID` of the note removes the note:
    the trashed file stays in the trash, and the note's entry is the one marked undone."""
    home, files = profile
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    (files / "Documents" / "old.txt").write_text("old", encoding="utf-8")
    base = ["--home", str(home)]
    replay = tmp_path / "replay.json"

    def ask(turn: str, approve: str) -> None:
        replay.write_text(json.dumps([turn, "Done."]), encoding="utf-8")
        assert main([*base, "ask", "--replay", str(replay), "--approve", approve, "go"]) == 0
        capsys.readouterr()

    ask(xml_call("write_text_note", path="Documents/list.md", text="eggs"), "deny")  # at once
    ask(xml_call("move_to_trash", path="Documents/old.txt"), "all")
    assert (files / "Documents" / "list.md").exists()
    assert not (files / "Documents" / "old.txt").exists()
    assert main([*base, "log", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    note = next(e for e in entries if e["tool"] == "write_text_note")
    assert main([*base, "undo", str(note["id"]), "--approve", "deny"]) == 0
    assert f"Undid #{note['id']} write_text_note" in capsys.readouterr().out
    assert not (files / "Documents" / "list.md").exists()  # the note is gone
    assert not (files / "Documents" / "old.txt").exists()  # the trashing stands
    assert (tmp_path / "xdg" / "Trash" / "files" / "old.txt").exists()
    assert main([*base, "log", "--json"]) == 0
    after = {e["id"]: e for e in json.loads(capsys.readouterr().out)}
    assert after[note["id"]]["undone_by"] is not None


def test_undo_of_an_event_changed_since_asks(
    profile: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An event created at once, then given an attendee by another app (its .ics edited):
    undoing it would delete a meeting, so it asks, says why, and denied it stays."""
    home, _ = profile
    base = ["--home", str(home)]
    replay = tmp_path / "replay.json"
    turn = xml_call("create_event", title="Lunch", start="tomorrow 12:00")
    replay.write_text(json.dumps([turn, "Done."]), encoding="utf-8")
    assert main([*base, "ask", "--replay", str(replay), "--approve", "deny", "go"]) == 0
    capsys.readouterr()
    [ics] = list(home.rglob("*.ics"))
    text = ics.read_text(encoding="utf-8")
    ics.write_text(
        text.replace("END:VEVENT", "ATTENDEE:mailto:bob@example.com\r\nEND:VEVENT", 1),
        encoding="utf-8",
    )
    assert main([*base, "undo", "--approve", "ask"]) == 1  # no terminal: shown, then denied
    said = capsys.readouterr().err
    assert "it was changed since" in said and "its attendees" in said
    assert "it now has attendees (bob@example.com)" in said
    assert "Nothing was undone" in said
    assert ics.exists()


def test_botpsy_undo_goes_through_the_gate(
    profile: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Undoing a personal event (deleting exactly it) runs at once; undoing a meeting deletes
    an event with attendees: its receipt is shown and it asks, and denied nothing changes."""
    home, _ = profile
    base = ["--home", str(home)]
    replay = tmp_path / "replay.json"

    def ask(turn: str, approve: str) -> None:
        replay.write_text(json.dumps([turn, "Done."]), encoding="utf-8")
        assert main([*base, "ask", "--replay", str(replay), "--approve", approve, "go"]) == 0
        capsys.readouterr()

    def events() -> list[str]:
        assert main([*base, "log", "--json"]) == 0
        return [e["tool"] for e in json.loads(capsys.readouterr().out)]

    ask(xml_call("create_event", title="Dentist", start="tomorrow 15:00"), "deny")  # runs at once
    assert events() == ["create_event"]
    assert main([*base, "undo", "--approve", "deny", "--json"]) == 0  # reversible: no asking
    done = json.loads(capsys.readouterr().out)
    assert done["inverse"]["tool"] == "delete_event" and done["inverse"]["tier"] == "reversible"

    meeting = xml_call(
        "create_meeting", title="Review", start="tomorrow 10:00", attendees="bob@x.org"
    )
    ask(meeting, "all")
    assert main([*base, "undo", "--approve", "deny"]) == 1
    said = capsys.readouterr().err
    assert "Delete the event" in said and "Nothing was undone" in said
    assert events()[0] == "create_meeting"  # nothing new in the log: the meeting stays
    assert main([*base, "undo", "--approve", "all"]) == 0
    assert "Undid #" in capsys.readouterr().out
    assert events()[0] == "delete_event"
