"""One queue, whichever process runs: the window lists and decides the approvals `botpsy daemon`
waits for, and takes over a run the daemon parked before it was killed."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any
from zoneinfo import ZoneInfo

from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.app import App, build_app
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.notify import AlarmNotifier
from botpsy_desktop.ui.routines import RoutineRun, RoutineRunner
from tests.helpers.replay import xml_call

PARIS = ZoneInfo("Europe/Paris")
ROOT = Path(__file__).resolve().parents[2]
REQUEST = "Cancel all my alarms"


def profile_with_routine(tmp_path: Path) -> tuple[Path, int]:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    config = {
        "files": {"roots": [str(tmp_path / "files")]},
        "music": {"folders": [], "player": "none"},
        "alarms": {"time_zone": "Europe/Paris"},
        "agent": {"background_approval_timeout_s": 300},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    service = AlarmService(home / "data" / "alarms.sqlite3", tz=PARIS)
    try:
        soon = datetime.now(UTC) + timedelta(seconds=2)
        wake = service.add(AlarmKind.ALARM, soon + timedelta(hours=8), label="Wake up")
        service.add(AlarmKind.ROUTINE, soon, label=REQUEST)
    finally:
        service.shutdown()
    return home, wake.id


class Daemon:
    """`botpsy daemon --json` on replayed model output; its events read on a thread."""

    def __init__(self, home: Path, turns: list[str], tmp_path: Path) -> None:
        replay = tmp_path / "daemon.json"
        replay.write_text(json.dumps(turns), encoding="utf-8")
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "botpsy_desktop", "--home", str(home), "daemon"),
                *("--replay", str(replay), "--json"),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "DBUS_SESSION_BUS_ADDRESS": ""},
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.err: list[str] = []
        self._threads = [
            threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True),
            threading.Thread(target=self._errors, args=(self.proc.stderr,), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _read(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.events.put(json.loads(line))

    def _errors(self, pipe: IO[str]) -> None:
        for line in pipe:
            self.err.append(line)

    def until(self, event: str, timeout: float = 30) -> dict[str, Any]:
        while True:
            got = self.events.get(timeout=timeout)
            if got["event"] == event:
                return got

    def end(self, sig: signal.Signals) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(20)
        for thread in self._threads:
            thread.join(10)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stdout.close()
        self.proc.stderr.close()
        return code


class Window:
    """The shipped app (build_app) in a window, with its routine runner and the stored queue
    watched, as ui/main.py composes them."""

    def __init__(self, qtbot: QtBot, home: Path, tmp_path: Path, turns: list[str]) -> None:
        self.app: App = build_app(home)
        replay = tmp_path / "window.json"
        replay.write_text(json.dumps(turns), encoding="utf-8")
        self.window = MainWindow(self.app, replay=str(replay))
        qtbot.addWidget(self.window)
        self.window.show()
        qtbot.waitUntil(lambda: self.window.model_label.text().startswith("replay:"), timeout=10000)
        assert self.app.alarms is not None
        self.notifier = AlarmNotifier(self.app.alarms, tmp_path / "chime.wav", None, self.window)
        self.queue = self.app.approvals()
        self.runner = RoutineRunner(
            self.window.engine,
            self.notifier,
            self.app.store,
            self.app.alarms,
            parent=self.window,
            queue=self.queue,
        )
        self.finished: list[RoutineRun] = []
        self.runner.finished.connect(self.finished.append)
        self.queue.poll_s = 0.2
        self.queue.watch(adopt=True)

    def close(self) -> None:
        self.window.shutdown()
        self.notifier.close()
        self.app.close()


def cancel_actions(app: App) -> list[dict[str, Any]]:
    return [a for a in app.store.actions() if a["tool"] == "cancel_alarm"]


def test_the_window_takes_over_a_run_the_killed_daemon_parked_and_runs_it_once_approved(
    qtbot: QtBot, tmp_path: Path
) -> None:
    home, _ = profile_with_routine(tmp_path)
    daemon = Daemon(home, [xml_call("cancel_alarm", alarm="all"), "not reached"], tmp_path)
    try:
        asked = daemon.until("routine_approval")
    finally:
        daemon.end(signal.SIGKILL)
    w = Window(qtbot, home, tmp_path, ["Cancelled all your alarms."])
    try:
        # the window adopted the run: its queue lists the approval with the same receipt
        qtbot.waitUntil(lambda: w.window.pending.count() == 1, timeout=15000)
        qtbot.waitUntil(lambda: w.window.approvals_button.isVisible(), timeout=5000)
        panel = w.window.show_approvals()
        [entry] = panel.entries
        assert entry.request.receipt == asked["receipt"]
        assert entry.request.arguments == {"alarm": "all"}
        assert "Routine: " + REQUEST in panel.origin.text()
        panel.approve()
        qtbot.waitUntil(lambda: bool(w.finished), timeout=20000)
        [run] = w.finished
        assert run.answer == "Cancelled all your alarms."
        stored = w.queue.get(asked["approval"])
        assert stored is not None and stored.state == "taken"
        assert run.conversation == stored.conversation_id
        assert w.app.alarms is not None and w.app.alarms.alarms() == []
        [action] = cancel_actions(w.app)
        assert action["approved_by"] == "user"
        assert w.queue.waiting() == [] and w.window.pending.count() == 0
    finally:
        w.close()


def test_the_window_decides_an_approval_the_running_daemon_waits_for(
    qtbot: QtBot, tmp_path: Path
) -> None:
    home, wake_id = profile_with_routine(tmp_path)
    daemon = Daemon(
        home, [xml_call("cancel_alarm", alarm="all"), "Nothing was cancelled."], tmp_path
    )
    w: Window | None = None
    try:
        asked = daemon.until("routine_approval")
        w = Window(qtbot, home, tmp_path, ["never used: the daemon holds the run"])
        window = w
        qtbot.waitUntil(lambda: window.window.pending.count() == 1, timeout=15000)
        panel = w.window.show_approvals()
        assert panel.entries[0].request.receipt == asked["receipt"]
        panel.deny()
        denied = daemon.until("routine_denied")
        finished = daemon.until("routine_finished")
        qtbot.waitUntil(lambda: window.window.pending.count() == 0, timeout=5000)
    finally:
        code = daemon.end(signal.SIGTERM)
        if w is not None:
            w.close()
    assert code == 0, "".join(daemon.err)
    assert denied["by"] == "user" and finished["answer"] == "Nothing was cancelled."
    assert w.finished == []  # the daemon ran it; the window only decided
    service = AlarmService(home / "data" / "alarms.sqlite3", tz=PARIS)
    try:
        assert [a.id for a in service.alarms()] == [wake_id]
    finally:
        service.shutdown()


def test_writing_in_the_conversation_of_a_run_taken_over_ends_it_without_running_it(
    qtbot: QtBot, tmp_path: Path
) -> None:
    home, wake_id = profile_with_routine(tmp_path)
    daemon = Daemon(home, [xml_call("cancel_alarm", alarm="all"), "not reached"], tmp_path)
    try:
        asked = daemon.until("routine_approval")
    finally:
        daemon.end(signal.SIGKILL)
    w = Window(qtbot, home, tmp_path, ["Hello again."])
    try:
        qtbot.waitUntil(lambda: w.window.pending.count() == 1, timeout=15000)
        stored = w.queue.get(asked["approval"])
        assert stored is not None
        answers: list[str] = []
        w.window.engine.worker.answer.connect(lambda _rid, answer: answers.append(answer.text))
        w.window.engine.submit(stored.conversation_id, "Never mind, hello", False)
        qtbot.waitUntil(lambda: answers == ["Hello again."], timeout=15000)
        assert w.window.pending.count() == 0 and w.queue.waiting() == []
        messages = w.app.store.messages(stored.conversation_id)
        assert [m["role"] for m in messages[-5:]] == [
            "assistant",  # the routine's turn, with its call
            "tool",  # the call, not run
            "assistant",  # the sentence that ended the routine's run
            "user",
            "assistant",
        ]
        assert "was not run: the user wrote in this conversation" in messages[-4]["content"]
        assert messages[-3]["content"].startswith("Stopped: you wrote in this conversation")
        assert cancel_actions(w.app) == []
        assert w.app.alarms is not None
        assert [a.id for a in w.app.alarms.alarms()] == [wake_id]
    finally:
        w.close()


def test_a_routine_parked_in_the_window_waits_through_a_restart_of_the_window(
    qtbot: QtBot, tmp_path: Path
) -> None:
    home, _ = profile_with_routine(tmp_path)
    first = Window(qtbot, home, tmp_path, [xml_call("cancel_alarm", alarm="all"), "not reached"])
    try:
        alarms = first.app.alarms
        assert alarms is not None
        qtbot.waitUntil(lambda: bool(alarms.fire_due()), timeout=10000)  # the routine is due
        qtbot.waitUntil(lambda: first.window.pending.count() == 1, timeout=15000)
        # the gate shows the request as it asks; the run stores it, then parks (a window quit
        # before the run is parked stops the run, as its Stop would)
        qtbot.waitUntil(lambda: len(first.queue.waiting()) == 1, timeout=5000)
        scheduler = first.window.engine.worker.scheduler
        qtbot.waitUntil(lambda: bool(scheduler.parked()), timeout=10000)
        [waiting] = first.queue.waiting()
        assert waiting.owner == first.queue.me
    finally:
        first.close()  # quitting the window neither denies nor runs it
    second = Window(qtbot, home, tmp_path, ["Cancelled all your alarms."])
    try:
        qtbot.waitUntil(lambda: second.window.pending.count() == 1, timeout=15000)
        stored = second.queue.get(waiting.id)
        assert stored is not None and stored.state == "waiting"
        assert stored.owner == second.queue.me  # taken over by the window started again
        second.window.show_approvals().approve()
        qtbot.waitUntil(lambda: bool(second.finished), timeout=20000)
        assert second.finished[0].answer == "Cancelled all your alarms."
        [action] = cancel_actions(second.app)
        assert action["approved_by"] == "user"
        assert second.app.alarms is not None and second.app.alarms.alarms() == []
    finally:
        second.close()
