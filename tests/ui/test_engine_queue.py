"""The window and the quick-command box share one engine: a waiting request shows its place."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from botpsy_desktop.agent.events import ApprovalRequest
from botpsy_desktop.agent.gate import Gate
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import App
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.quick import QuickCommandBox


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
    app = App(paths, Config(), ConversationStore(paths.database), registry, Gate())
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
