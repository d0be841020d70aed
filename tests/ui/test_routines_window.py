"""A routine fired by an injected clock runs in the window as a background run: its own
conversation, SCHEDULED priority, its write waiting in the approvals queue, its answer notified."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel, Field
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService, alarms_tools
from botpsy_desktop.agent.scheduler import Priority
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import App, build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.ui.desktop_notify import FreedesktopNotifications
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.notify import AlarmNotifier
from botpsy_desktop.ui.routines import RoutineRun, RoutineRunner
from tests.helpers.clock import Clock
from tests.helpers.notification_server import notification_server
from tests.helpers.replay import xml_call
from tests.helpers.services import needs, programs

PARIS = ZoneInfo("Europe/Paris")
REQUEST = "Write my morning summary"


class NoteArgs(BaseModel):
    """Write a note file."""

    name: str = Field(description="File name, e.g. todo.txt")
    text: str = Field(description="What to write")


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 12, 7, 7, 0, tzinfo=PARIS))


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    root.mkdir()
    return root


@pytest.fixture
def app(tmp_path: Path, files: Path, clock: Clock) -> Iterator[App]:
    paths = Paths.resolve(tmp_path / "profile")
    paths.ensure()
    alarms = AlarmService(paths.data_dir / "alarms.sqlite3", tz=PARIS, now=clock)
    registry = ToolRegistry(alarms_tools(alarms))

    def write_note(args: NoteArgs) -> str:
        (files / args.name).write_text(args.text, encoding="utf-8")
        return f"wrote {args.name}"

    registry.register(make_tool(write_note, effects=[Effect.LOCAL_WRITE]))
    config = Config.model_validate({"files": {"roots": [str(files)]}})
    store = ConversationStore(paths.database)
    built = App(paths, config, store, registry, build_gate(config), alarms=alarms)
    yield built
    for entry in built.gate.inbox.entries():  # a failed test must not leave a run waiting
        entry.request.deny(by="test teardown")
    built.close()


@pytest.fixture
def window(qtbot: QtBot, app: App, tmp_path: Path) -> Iterator[MainWindow]:
    turns = [
        xml_call("write_note", name="summary.txt", text="2 meetings, sunny"),
        "Your summary is saved in summary.txt.\nIt lists 2 meetings.",
        "Nothing new since yesterday.",
    ]
    replay = tmp_path / "routine-replay.json"
    replay.write_text(json.dumps(turns), encoding="utf-8")
    win = MainWindow(app, replay=str(replay))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.model_label.text() != "Loading model…", timeout=20000)
    yield win
    win.shutdown()


def test_a_fired_routine_runs_in_the_background_and_its_answer_is_notified(
    qtbot: QtBot, app: App, window: MainWindow, files: Path, clock: Clock, tmp_path: Path
) -> None:
    alarms = app.alarms
    assert alarms is not None
    notifier = AlarmNotifier(alarms, tmp_path / "chime.wav", None, window)
    runner = RoutineRunner(window.engine, notifier, app.store, alarms, parent=window)
    finished: list[RoutineRun] = []
    runner.finished.connect(finished.append)
    routine = alarms.add(
        AlarmKind.ROUTINE, clock.current + timedelta(hours=1), label=REQUEST, days=range(7)
    )

    clock.current += timedelta(hours=1)
    [event] = alarms.fire_due()  # what the scheduler thread calls; the signal is queued
    assert event.kind is AlarmKind.ROUTINE
    qtbot.waitUntil(lambda: bool(runner.runs), timeout=5000)
    [run] = runner.runs.values()
    assert notifier.windows == []  # it does not ring

    # the write waits in the pending-approvals queue; the SCHEDULED run is parked meanwhile
    # (it does not hold the engine: see tests/ui/test_engine_queue.py)
    qtbot.waitUntil(lambda: window.approvals_button.isVisible(), timeout=10000)
    scheduler = window.engine.worker.scheduler
    qtbot.waitUntil(lambda: bool(scheduler.parked()), timeout=10000)
    [parked] = scheduler.parked()
    assert parked.id == run.request_id and parked.state == "parked"
    assert parked.priority is Priority.SCHEDULED
    assert window.approvals_button.text() == "⚠ 1 approval waiting"
    assert window.open_dialogs == []  # no dialog: nobody is watching a routine
    assert not (files / "summary.txt").exists()
    [entry] = window.pending.entries()
    assert entry.request.tool == "write_note" and entry.request.background
    assert entry.origin == run.conversation
    origin = window.pending.origin_text(entry)
    assert f"the background run in “Routine: {REQUEST}”" in origin, origin

    panel = window.show_approvals()
    panel.approve_button.click()
    qtbot.waitUntil(lambda: bool(finished), timeout=10000)
    assert (files / "summary.txt").read_text(encoding="utf-8") == "2 meetings, sunny"
    # the answer, and what the run actually carried out (never only what it says it did)
    assert notifier.sent[-1] == (
        "status",
        f"Routine: {REQUEST}",
        "Your summary is saved in summary.txt.\n✓ Done (approved by you): Write a note file.",
    )
    assert window.statusBar().currentMessage() == (
        f"Routine: {REQUEST}: Your summary is saved in summary.txt. · "
        "✓ Done (approved by you): Write a note file."
    )
    assert app.store.title(run.conversation) == f"Routine: {REQUEST}"
    messages = app.store.messages(run.conversation)
    assert messages[0] == {"role": "user", "content": REQUEST}
    assert messages[-1]["content"].startswith("Your summary is saved")
    assert window.conversation_id == ""  # the user's own conversation was left alone

    # the next day: the same conversation, a second run, no approval needed this time
    clock.current += timedelta(days=1)
    [second] = alarms.fire_due()
    assert second.conversation == run.conversation and second.id == routine.id
    qtbot.waitUntil(lambda: len(finished) == 2, timeout=10000)
    assert finished[1].conversation == run.conversation
    assert notifier.sent[-1][2] == "Nothing new since yesterday."
    titles = [c.title for c in app.store.conversations()]
    assert titles == [f"Routine: {REQUEST}"]
    assert len(app.store.messages(run.conversation)) > len(messages)


@needs(programs("dbus-daemon"), "dbus-daemon (a private D-Bus)", "apt install dbus")
def test_the_answer_goes_to_the_desktop_notification_server(
    qtbot: QtBot, app: App, tmp_path: Path
) -> None:
    alarms = app.alarms
    assert alarms is not None
    with notification_server() as server:
        desktop = FreedesktopNotifications(server.address)
        assert desktop.wait_ready()
        window = QWidget()  # the main window, hidden in the tray
        qtbot.addWidget(window)
        notifier = AlarmNotifier(alarms, tmp_path / "chime.wav", None, window, desktop)
        try:
            assert notifier.notify(f"Routine: {REQUEST}", "Sunny, 2 meetings.") == "dbus"
            shown = server.wait_for(lambda _e: bool(server.notifications()), 5)
            assert shown is not None
            [note] = server.notifications()
            assert note["summary"] == f"Routine: {REQUEST}"
            assert note["body"] == "Sunny, 2 meetings."
            qtbot.waitUntil(lambda: bool(notifier.notes), timeout=5000)
            assert not window.isVisible()
            server.invoke(int(str(note["id"])), "default")  # the user clicks the notification
            qtbot.waitUntil(window.isVisible, timeout=5000)
        finally:
            notifier.close()
            desktop.shutdown()
