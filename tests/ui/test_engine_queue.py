"""The window and the quick-command box share one engine: a waiting request shows its place."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.alarms import AlarmKind
from botpsy_desktop.agent.events import ApprovalRequest
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import App, build_app, build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.notify import AlarmNotifier
from botpsy_desktop.ui.quick import QuickCommandBox
from botpsy_desktop.ui.routines import RoutineRun, RoutineRunner
from tests.helpers.clock import Clock
from tests.helpers.replay import xml_call


class NoteArgs(BaseModel):
    """Write a note."""

    text: str = Field(description="What to write")


def test_a_window_message_waits_behind_a_quick_command_and_says_so(
    qtbot: QtBot, tmp_path: Path
) -> None:
    paths = Paths.resolve(tmp_path / "profile")
    paths.ensure()
    notes: list[str] = []

    def write_note(args: NoteArgs) -> str:
        notes.append(args.text)
        return "written"

    registry = ToolRegistry([make_tool(write_note, effects=[Effect.LOCAL_WRITE])])
    config = Config()
    app = App(paths, config, ConversationStore(paths.database), registry, build_gate(config))
    call = (
        "<tool_call>\n<function=write_note>\n<parameter=text>\nmilk\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    replay = tmp_path / "r.json"
    replay.write_text(json.dumps([call, "Noted.", "Hello from the window."]), encoding="utf-8")
    window = MainWindow(app, replay=str(replay))
    qtbot.addWidget(window)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        asked: list[ApprovalRequest] = []
        window.engine.worker.approvalNeeded.connect(lambda _rid, req: asked.append(req))
        # the quick command holds the engine while its approval waits
        quick.popup()
        qtbot.keyClicks(quick.line, "note milk")
        qtbot.keyClick(quick.line, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: bool(asked), timeout=10000)
        # a message typed in the window now waits, and the status bar says where it stands
        window.input.setPlainText("hello")
        window.send_button.click()
        qtbot.waitUntil(lambda: window.statusBar().currentMessage() == "queued (1 ahead)")
        assert window.busy and window.chat.bubbles()[-1].role == "user"
        asked[0].approve()
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        qtbot.waitUntil(lambda: not quick.request_id, timeout=10000)
        assert window.statusBar().currentMessage() == ""
        assert window.chat.bubbles()[-1].text == "Hello from the window."
        assert quick.answer.text() == "Noted." and notes == ["milk"]
    finally:
        for dialog in quick.dialogs:
            dialog.close()
        window.shutdown()
        app.close()


# --- a routine waiting for approval is parked: the user's requests go on ----------------------

PARIS = ZoneInfo("Europe/Paris")
ROUTINE = "Cancel my wake-up alarm"


class Routine:
    """The shipped app (build_app) in a window, with a wake-up alarm and a routine that wants to
    cancel it; ``fire`` makes the routine due and hands it to the window's routine runner."""

    def __init__(self, qtbot: QtBot, tmp_path: Path, turns: list[str], **agent: Any) -> None:
        home = tmp_path / "profile"
        (home / "config").mkdir(parents=True)
        (tmp_path / "files").mkdir()
        config = {
            "files": {"roots": [str(tmp_path / "files")]},
            "music": {"folders": [], "player": "none"},
            "alarms": {"time_zone": "Europe/Paris"},
            "agent": agent,
        }
        (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
        self.clock = Clock(datetime(2026, 12, 7, 7, 0, tzinfo=PARIS))
        self.app = build_app(home, now=self.clock)
        alarms = self.app.alarms
        assert alarms is not None
        self.alarms = alarms
        self.wake = alarms.add(
            AlarmKind.ALARM, self.clock.current + timedelta(minutes=30), label="Wake up"
        )
        alarms.add(AlarmKind.ROUTINE, self.clock.current + timedelta(minutes=5), label=ROUTINE)
        replay = tmp_path / "replay.json"
        replay.write_text(json.dumps(turns), encoding="utf-8")
        self.window = MainWindow(self.app, replay=str(replay))
        qtbot.addWidget(self.window)
        self.window.show()
        qtbot.waitUntil(lambda: self.window.model_label.text().startswith("replay:"), timeout=10000)
        self.notifier = AlarmNotifier(alarms, tmp_path / "chime.wav", None, self.window)
        self.runner = RoutineRunner(
            self.window.engine, self.notifier, self.app.store, alarms, parent=self.window
        )
        self.finished: list[RoutineRun] = []
        self.runner.finished.connect(self.finished.append)
        # what the engine thread did, in its order
        self.seen: list[tuple[str, str]] = []
        w = self.window.engine.worker
        w.parked.connect(lambda rid, _call: self.seen.append(("parked", rid)))
        w.answer.connect(lambda rid, answer: self.seen.append(("answer", answer.text)))

    def fire(self, qtbot: QtBot) -> RoutineRun:
        self.clock.current += timedelta(minutes=5)
        [fired] = self.alarms.fire_due()  # what the alarms' scheduler thread calls
        assert fired.kind is AlarmKind.ROUTINE
        qtbot.waitUntil(lambda: bool(self.runner.runs), timeout=5000)
        [run] = self.runner.runs.values()
        return run

    def alarm_ids(self) -> list[int]:
        return [a.id for a in self.alarms.alarms() if a.kind is AlarmKind.ALARM]

    def close(self) -> None:
        for entry in self.app.gate.inbox.entries():  # a failed test must not leave a run waiting
            entry.request.deny(by="test teardown")
        self.window.shutdown()
        self.app.close()


def test_a_routine_waiting_for_approval_never_delays_the_users_own_request(
    qtbot: QtBot, tmp_path: Path
) -> None:
    turns = [
        xml_call("cancel_alarm", alarm="Wake up"),
        "Hello from the window.",
        "Your wake-up alarm is cancelled.",
    ]
    r = Routine(qtbot, tmp_path, turns)  # the default wait (an hour)
    window = r.window
    try:
        assert r.app.config.agent.background_approval_timeout_s == 3600
        run = r.fire(qtbot)
        # the cancellation waits in the approvals queue; the routine gave the engine up
        qtbot.waitUntil(lambda: ("parked", run.request_id) in r.seen, timeout=10000)
        assert window.approvals_button.text() == "⚠ 1 approval waiting"
        scheduler = window.engine.worker.scheduler
        assert [p.id for p in scheduler.parked()] == [run.request_id]
        # the user asks something meanwhile and is answered while the routine still waits
        window.input.setPlainText("hello")
        window.send_button.click()
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        assert window.chat.bubbles()[-1].text == "Hello from the window."
        assert r.runner.runs.get(run.request_id) is run and not r.finished
        assert r.alarm_ids() == [r.wake.id]  # nothing was cancelled without the user
        # approved later: the routine goes on where it stopped, and really cancels the alarm
        panel = window.show_approvals()
        [entry] = window.pending.entries()
        assert entry.request.tool == "cancel_alarm" and entry.origin == run.conversation
        panel.approve_button.click()
        qtbot.waitUntil(lambda: bool(r.finished), timeout=10000)
        assert r.alarm_ids() == []
        assert r.seen == [
            ("parked", run.request_id),
            ("answer", "Hello from the window."),
            ("answer", "Your wake-up alarm is cancelled."),
        ]
        assert r.notifier.sent[-1] == (  # the answer, and what the run carried out
            "status",
            f"Routine: {ROUTINE}",
            "Your wake-up alarm is cancelled.\n"
            "✓ Done (approved by you): Cancel alarm 1 (alarm “Wake up”) for good "
            "(it cannot be undone).",
        )
        tool_rows = [m for m in r.app.store.messages(run.conversation) if m["role"] == "tool"]
        assert [m["name"] for m in tool_rows] == ["cancel_alarm"]
        assert "Cancelled alarm" in str(tool_rows[0]["content"])
        assert not window.approvals_button.isVisible()
    finally:
        r.close()


def test_a_routine_nobody_approves_gives_up_after_the_timeout_and_says_so(
    qtbot: QtBot, tmp_path: Path
) -> None:
    # the model is not asked again: the run ends with a sentence saying what it gave up on
    turns = [xml_call("cancel_alarm", alarm="Wake up"), xml_call("cancel_alarm", alarm="all")]
    r = Routine(qtbot, tmp_path, turns, background_approval_timeout_s=0.5)
    gave_up = (
        "I did not do it: cancel_alarm waited 0.5 s for your approval and nobody answered, so "
        "nothing was run. Ask again when you are back."
    )
    try:
        run = r.fire(qtbot)
        qtbot.waitUntil(lambda: bool(r.finished), timeout=15000)
        assert r.seen == [("parked", run.request_id), ("answer", gave_up)]
        assert r.alarm_ids() == [r.wake.id]  # it never ran
        assert r.notifier.sent[-1] == ("status", f"Routine: {ROUTINE}", gave_up)
        # and so does its conversation
        [tool_row] = [m for m in r.app.store.messages(run.conversation) if m["role"] == "tool"]
        assert str(tool_row["content"]).startswith(
            "cancel_alarm was not run: it waited for the user's approval for 0.5 s and nobody "
            "answered (agent.background_approval_timeout_s)."
        )
        assert r.app.gate.inbox.entries() == []
        assert not r.window.approvals_button.isVisible()
    finally:
        r.close()


def test_writing_in_a_parked_routines_conversation_stops_it_first(
    qtbot: QtBot, tmp_path: Path
) -> None:
    r = Routine(qtbot, tmp_path, [xml_call("cancel_alarm", alarm="Wake up"), "Hello."])
    window = r.window
    try:
        run = r.fire(qtbot)
        qtbot.waitUntil(lambda: ("parked", run.request_id) in r.seen, timeout=10000)
        [entry] = window.pending.entries()
        window.open_conversation(run.conversation)
        window.input.setPlainText("hello")
        window.send_button.click()
        qtbot.waitUntil(lambda: not window.busy and bool(r.finished), timeout=10000)
        # the routine wound up first (its approval denied, nothing cancelled), then the reply
        assert entry.request.decided_by == "stopped" and not entry.request.approved
        assert r.alarm_ids() == [r.wake.id]
        rows = [
            (m["role"], str(m.get("content") or "")) for m in r.app.store.messages(run.conversation)
        ]
        assert [role for role, _ in rows] == ["user", "assistant", "tool", "user", "assistant"]
        assert rows[2][1].startswith("cancel_alarm was not run: the request was stopped")
        assert rows[3:] == [("user", "hello"), ("assistant", "Hello.")]
        assert window.chat.bubbles()[-1].text == "Hello."
    finally:
        r.close()
