"""Background runs' approvals wait in a visible queue; thinking is kept per conversation; keys."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, Field
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.events import Answer, Event, ToolResult
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import App, build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.llm.engines.replay import ReplayBackend
from botpsy_desktop.ui.approval import ApprovalDialog
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.quick import QuickCommandBox
from botpsy_desktop.ui.tray import Tray
from tests.helpers.replay import xml_call


class NoteArgs(BaseModel):
    """Write a note file."""

    name: str = Field(description="File name, e.g. todo.txt")
    text: str = Field(description="What to write")


NOTE = xml_call("write_note", name="summary.txt", text="3 new mails")


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    root.mkdir()
    return root


@pytest.fixture
def app(tmp_path: Path, files: Path) -> Iterator[App]:
    paths = Paths.resolve(tmp_path / "profile")
    paths.ensure()
    config = Config.model_validate({"files": {"roots": [str(files)]}})
    registry = ToolRegistry(files_tools([files]))

    def write_note(args: NoteArgs) -> str:
        (files / args.name).write_text(args.text, encoding="utf-8")
        return f"wrote {args.name}"

    registry.register(make_tool(write_note, effects=[Effect.LOCAL_WRITE]))
    built = App(paths, config, ConversationStore(paths.database), registry, build_gate(config))
    yield built
    for entry in built.gate.inbox.entries():  # a failed test must not leave a run waiting
        entry.request.deny(by="test teardown")
    built.close()


@pytest.fixture
def window(qtbot: QtBot, app: App, tmp_path: Path) -> Iterator[MainWindow]:
    replay = tmp_path / "window-replay.json"
    replay.write_text(json.dumps(["Hello.", "Hello again."]), encoding="utf-8")
    win = MainWindow(app, replay=str(replay))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: win.model_label.text() != "Loading model…", timeout=20000)
    yield win
    win.shutdown()


class BackgroundRun:
    """A scheduled run (AgentSession(background=True)) on a thread of its own."""

    def __init__(self, app: App, request: str, turns: list[str]) -> None:
        self.session = app.session(ReplayBackend(turns), background=True)
        self.request = request  # the conversation's title too
        self.events: list[Event] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.events.extend(self.session.run(self.request))

    def result(self) -> ToolResult:
        return next(e for e in self.events if isinstance(e, ToolResult))

    def answer(self) -> str:
        return next(e.text for e in self.events if isinstance(e, Answer))


def test_a_background_approval_waits_in_the_queue_and_is_approved_from_the_panel(
    qtbot: QtBot, app: App, window: MainWindow, files: Path
) -> None:
    assert not window.approvals_button.isVisible()
    run = BackgroundRun(app, "Morning summary", [NOTE, "Your note is saved."])
    # the count reaches the status bar through the queued signal, live
    qtbot.waitUntil(lambda: window.approvals_button.isVisible(), timeout=5000)
    assert window.approvals_button.text() == "⚠ 1 approval waiting"
    assert not (files / "summary.txt").exists()  # never auto-approved

    window.approvals_button.click()
    panel = window.approvals_panel
    assert panel is not None and panel.isVisible()
    assert panel.list.count() == 1
    assert "Write a note file" in panel.list.item(0).text()  # plain words; the tool below
    assert "write_note" in panel.technical.text()
    assert "waiting" in panel.list.item(0).text()
    assert panel.what.text() == (
        "Write a note file.\nWith name “summary.txt”, text “3 new mails”.\n"
        "Why it asks: It changes something on this computer."
    )
    assert json.loads(panel.arguments.toPlainText()) == {
        "name": "summary.txt",
        "text": "3 new mails",
    }
    assert "the background run in “Morning summary”" in panel.origin.text()
    assert re.search(r", waiting \d+ s\.$", panel.origin.text()), panel.origin.text()

    panel.approve_button.click()
    run.thread.join(10)
    assert not run.thread.is_alive()
    assert run.result().decision == "approved" and run.result().decided_by == "user"
    assert (files / "summary.txt").read_text(encoding="utf-8") == "3 new mails"
    assert run.answer() == "Your note is saved."
    qtbot.waitUntil(lambda: not window.approvals_button.isVisible(), timeout=5000)
    assert panel.list.count() == 0 and panel.empty.isVisible()


def test_denied_from_the_panel_and_edited_through_the_approval_dialog(
    qtbot: QtBot, app: App, window: MainWindow, files: Path
) -> None:
    first = BackgroundRun(app, "Run A", [NOTE, "Could not save it."])
    qtbot.waitUntil(lambda: window.pending.count() == 1, timeout=5000)
    second = BackgroundRun(app, "Run B", [NOTE, "Saved."])
    qtbot.waitUntil(lambda: window.pending.count() == 2, timeout=5000)
    qtbot.waitUntil(lambda: window.approvals_button.text() == "⚠ 2 approvals waiting", timeout=5000)
    panel = window.show_approvals()
    assert panel.list.count() == 2
    assert "Run A" in panel.origin.text()  # oldest first

    panel.deny_button.click()
    first.thread.join(10)
    assert first.result().decision == "denied" and first.answer() == "Could not save it."
    assert not (files / "summary.txt").exists()
    assert panel.list.count() == 1 and "Run B" in panel.origin.text()

    dialog = panel.edit()
    assert isinstance(dialog, ApprovalDialog) and not dialog.arguments.isReadOnly()
    dialog.arguments.setPlainText(json.dumps({"name": "edited.txt", "text": "changed"}))
    dialog.approve_button.click()
    second.thread.join(10)
    assert second.result().decided_by == "user (edited)"
    assert (files / "edited.txt").read_text(encoding="utf-8") == "changed"
    qtbot.waitUntil(lambda: window.pending.count() == 0 and panel.list.count() == 0, timeout=5000)


def test_the_tray_menu_counts_the_queue_and_opens_the_panel(
    qtbot: QtBot, app: App, window: MainWindow
) -> None:
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    tray = Tray(window, quick)  # offscreen there is no tray: the menu still works
    assert tray.pending_action.text() == "No approvals waiting"
    assert not tray.pending_action.isEnabled()
    window.hide()
    run = BackgroundRun(app, "Nightly", [NOTE, "Done."])
    qtbot.waitUntil(lambda: tray.pending_action.text() == "1 approval waiting", timeout=5000)
    assert tray.pending_action.isEnabled()
    # the window was hidden: the tray announced it (no tray offscreen, so it was only recorded)
    assert tray.last_message is not None
    assert tray.last_message[0] == "BotPsy needs your approval"
    assert "“Nightly” wants to run write_note" in tray.last_message[1]
    tray.pending_action.trigger()
    panel = window.approvals_panel
    assert panel is not None and panel.isVisible() and panel.list.count() == 1
    panel.deny_button.click()
    run.thread.join(10)
    qtbot.waitUntil(lambda: tray.pending_action.text() == "No approvals waiting", timeout=5000)


def test_keyboard_approve_and_deny_in_the_approval_dialog(
    qtbot: QtBot, app: App, window: MainWindow
) -> None:
    runs = []
    for key, modifier in (
        (Qt.Key.Key_Escape, Qt.KeyboardModifier.NoModifier),
        (Qt.Key.Key_Return, Qt.KeyboardModifier.NoModifier),  # Deny has the focus
        (Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier),
    ):
        run = BackgroundRun(app, "Keys", [NOTE, "ok"])
        qtbot.waitUntil(lambda: window.pending.count() == 1, timeout=5000)
        panel = window.show_approvals()
        qtbot.keyClick(panel.list, Qt.Key.Key_Return)  # Enter on the item: the full dialog
        dialog = panel.dialog
        assert dialog is not None and dialog.isVisible()
        dialog.activateWindow()  # shortcuts are window shortcuts: the dialog has the focus
        qtbot.waitUntil(dialog.isActiveWindow, timeout=3000)
        assert dialog.focusWidget() is dialog.deny_button
        qtbot.keyClick(dialog.focusWidget(), key, modifier)
        run.thread.join(10)
        runs.append(run.result().decision)
        qtbot.waitUntil(lambda: window.pending.count() == 0, timeout=5000)
    assert runs == ["denied", "denied", "approved"]


def test_approval_dialog_mnemonics_and_tab_order(
    qtbot: QtBot, app: App, window: MainWindow
) -> None:
    run = BackgroundRun(app, "Tabs", [NOTE, "ok"])
    qtbot.waitUntil(lambda: window.pending.count() == 1, timeout=5000)
    request = window.pending.entries()[0].request
    dialog = ApprovalDialog(request, window)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.activateWindow()
    qtbot.waitUntil(dialog.isActiveWindow, timeout=3000)
    order = [dialog.focusWidget()]
    for _ in range(3):
        qtbot.keyClick(QApplication.focusWidget() or dialog, Qt.Key.Key_Tab)
        order.append(QApplication.focusWidget())
    assert order == [  # the arguments are under Details, collapsed: its toggle comes next
        dialog.deny_button,
        dialog.edit_button,
        dialog.approve_button,
        dialog.details_toggle,
    ]
    assert not dialog.details.isVisible() and not dialog.details_shown
    focused = QApplication.focusWidget()
    assert focused is not None
    # mnemonics click the button (animated: a moment later)
    qtbot.keyClick(focused, Qt.Key.Key_E, Qt.KeyboardModifier.AltModifier)  # Alt+E: edit
    qtbot.waitUntil(lambda: not dialog.arguments.isReadOnly(), timeout=3000)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is dialog.arguments, timeout=3000)
    qtbot.keyClick(dialog.arguments, Qt.Key.Key_A, Qt.KeyboardModifier.AltModifier)  # approve
    qtbot.waitUntil(lambda: request.decided, timeout=3000)
    run.thread.join(10)
    assert run.result().decision == "approved"


def test_thinking_is_kept_per_conversation(qtbot: QtBot, app: App, window: MainWindow) -> None:
    assert app.config.model.think is False and not window.think.isChecked()
    window.think.setChecked(True)
    window.input.setPlainText("first")
    window.send_button.click()
    qtbot.waitUntil(lambda: not window.busy, timeout=20000)
    with_thinking = window.conversation_id
    assert app.store.setting(with_thinking, "think") is True

    window.new_conversation()
    assert not window.think.isChecked()  # a new conversation starts from model.think
    window.input.setPlainText("second")
    window.send_button.click()
    qtbot.waitUntil(lambda: not window.busy, timeout=20000)
    without = window.conversation_id
    assert without != with_thinking and app.store.setting(without, "think") is False

    window.open_conversation(with_thinking)
    assert window.think.isChecked()
    window.open_conversation(without)
    assert not window.think.isChecked()
    window.think.setChecked(True)  # toggled in an open conversation: saved at once
    window.open_conversation(with_thinking)
    window.open_conversation(without)
    assert window.think.isChecked()

    # across a restart: a new window over the same database
    window.shutdown()
    again = MainWindow(app)
    qtbot.addWidget(again)
    again.open_conversation(with_thinking)
    assert again.think.isChecked()
    again.new_conversation()
    assert not again.think.isChecked()
    again.shutdown()


def test_the_status_bar_shows_model_context_speed_and_memory(qtbot: QtBot, app: App) -> None:
    from tests.helpers.models import tiny_qwen35_gguf

    app.config.model.max_tokens = 12
    app.config.model.n_ctx = 4096
    window = MainWindow(app, model=str(tiny_qwen35_gguf()))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_label.text() != "Loading model…", timeout=30000)
    # the model's name and its quantization, the context before anything was said
    assert window.model_label.text().endswith(" · F16"), window.model_label.text()
    assert window.context_label.text() == "context 0/4,096"
    window.input.setPlainText("hi")
    window.send_button.click()
    qtbot.waitUntil(lambda: not window.busy, timeout=60000)
    stats = window.last_stats
    assert stats is not None and stats.stats.completion_tokens > 0
    used = stats.stats.prompt_tokens + stats.stats.completion_tokens
    assert window.context_label.text() == f"context {used:,}/4,096"
    assert window.speed_label.text() == (
        f"first token {stats.stats.time_to_first_token_s:.2f} s · "
        f"{stats.stats.decode_tokens_per_s:.1f} tok/s"
    )
    mib = int(
        window.memory_label.text().removeprefix("memory ").removesuffix(" MiB").replace(",", "")
    )
    assert 50 < mib < 64 * 1024
    window.shutdown()


def test_missed_alarms_are_listed_above_the_chat(window: MainWindow) -> None:
    assert not window.banner.isVisible()
    window.show_missed("alarm 1 'Wake up' rang at 07:00 (missed)")
    assert window.banner.isVisible()
    assert "Wake up" in window.banner_text.text()
    window.new_conversation()  # stays while the user works
    assert window.banner.isVisible()
    window.banner_close.click()
    assert not window.banner.isVisible()
