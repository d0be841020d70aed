"""The real window, offscreen: streaming, tool cards, approvals, stop, history, responsiveness."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from pydantic import BaseModel, Field
from PySide6.QtCore import QTimer
from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import App, build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.ui.chat_view import ToolCard
from botpsy_desktop.ui.main_window import MainWindow
from tests.helpers.replay import xml_call


class NoteArgs(BaseModel):
    """Write a note file."""

    name: str = Field(description="File name, e.g. todo.txt")
    text: str = Field(description="What to write")


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    (root / "Documents").mkdir(parents=True)
    (root / "Documents" / "report.txt").write_text("numbers", encoding="utf-8")
    return root


@pytest.fixture
def app(tmp_path: Path, files: Path) -> App:
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
    built.close()


def replay_file(tmp_path: Path, *turns: str) -> str:
    f = tmp_path / "replay.json"
    f.write_text(json.dumps(list(turns)), encoding="utf-8")
    return str(f)


def open_window(qtbot: QtBot, app: App, **kw: str) -> MainWindow:
    window = MainWindow(app, **kw)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_label.text() != "Loading model…", timeout=20000)
    return window


def ask(qtbot: QtBot, window: MainWindow, text: str, timeout: int = 20000) -> None:
    window.input.setPlainText(text)
    window.send_button.click()
    qtbot.waitUntil(lambda: not window.busy, timeout=timeout)


def test_a_reply_streams_with_a_tool_card(qtbot: QtBot, app: App, tmp_path: Path) -> None:
    replay = replay_file(
        tmp_path, xml_call("list_folder", path="Documents"), "You have **report.txt** in Documents."
    )
    window = open_window(qtbot, app, replay=replay)
    assert window.model_label.text().startswith("replay:")
    ask(qtbot, window, "what's in Documents?")
    cards = window.chat.widget().findChildren(ToolCard)
    assert len(cards) == 1
    card = cards[0]
    assert card.status == "ok" and card.name == "list_folder"
    assert "report.txt" in card.result
    assert not card.expanded
    card.toggle.click()
    assert card.expanded and "report.txt" in card.body.toPlainText()
    bubbles = window.chat.bubbles()
    assert [b.role for b in bubbles] == ["user", "assistant"]
    assert bubbles[-1].text == "You have **report.txt** in Documents."
    # the conversation is listed, titled by its first request, and can be reopened
    assert window.conversations.count() == 1
    assert window.conversations.item(0).text() == "what's in Documents?"
    window.new_conversation()
    assert window.chat.bubbles() == []
    window.open_conversation(window.app.store.conversations()[0].id)
    assert [b.role for b in window.chat.bubbles()] == ["user", "assistant"]


@pytest.mark.parametrize("choice", ["approve", "deny", "edit"])
def test_the_approval_dialog_paths(
    qtbot: QtBot, app: App, files: Path, tmp_path: Path, choice: str
) -> None:
    replay = replay_file(
        tmp_path, xml_call("write_note", name="todo.txt", text="buy milk"), "Done."
    )
    window = open_window(qtbot, app, replay=replay)
    window.input.setPlainText("note: buy milk")
    window.send_button.click()
    qtbot.waitUntil(lambda: bool(window.open_dialogs), timeout=10000)
    dialog = window.open_dialogs[0]
    assert dialog.request.tool == "write_note"
    assert '"buy milk"' in dialog.arguments.toPlainText()
    assert dialog.deny_button.isDefault()
    card = window.chat.cards[dialog.request.call_id]
    assert card.status == "waiting"
    if choice == "approve":
        dialog.approve_button.click()
    elif choice == "deny":
        dialog.deny_button.click()
    else:
        dialog.edit_button.click()
        dialog.arguments.setPlainText('{"name": "todo.txt", "text": "buy oat milk"}')
        dialog.approve_button.click()
    qtbot.waitUntil(lambda: not window.busy, timeout=10000)
    note = files / "todo.txt"
    if choice == "deny":
        assert not note.exists() and card.status == "denied"
    else:
        expected = "buy milk" if choice == "approve" else "buy oat milk"
        assert note.read_text(encoding="utf-8") == expected and card.status == "ok"


def test_invalid_edited_json_keeps_the_dialog_open(
    qtbot: QtBot, app: App, files: Path, tmp_path: Path
) -> None:
    replay = replay_file(tmp_path, xml_call("write_note", name="a.txt", text="x"), "ok")
    window = open_window(qtbot, app, replay=replay)
    window.input.setPlainText("write")
    window.send_button.click()
    qtbot.waitUntil(lambda: bool(window.open_dialogs), timeout=10000)
    dialog = window.open_dialogs[0]
    dialog.edit_button.click()
    dialog.arguments.setPlainText("{not json")
    dialog.approve_button.click()
    assert dialog.isVisible() and "not valid JSON" in dialog.error.text()
    dialog.deny_button.click()
    qtbot.waitUntil(lambda: not window.busy, timeout=10000)
    assert not (files / "a.txt").exists()


def test_stop_while_waiting_for_approval(
    qtbot: QtBot, app: App, files: Path, tmp_path: Path
) -> None:
    replay = replay_file(tmp_path, xml_call("write_note", name="b.txt", text="x"), "never")
    window = open_window(qtbot, app, replay=replay)
    window.input.setPlainText("write")
    window.send_button.click()
    qtbot.waitUntil(lambda: bool(window.open_dialogs), timeout=10000)
    assert window.stop_button.isVisible()
    window.stop_button.click()
    qtbot.waitUntil(lambda: not window.busy, timeout=5000)
    assert not (files / "b.txt").exists()
    assert not window.open_dialogs


def test_no_model_explains_what_to_do(qtbot: QtBot, app: App) -> None:
    window = open_window(qtbot, app)
    assert window.model_label.text() == "No model"
    assert window.send_button.isEnabled()
    ask(qtbot, window, "hello")
    notes = [w.text() for w in window.chat.widget().findChildren(type(window.model_label))]
    assert any("Open model" in n for n in notes)
    assert any("No model is loaded yet" in n for n in notes)


@pytest.mark.model
def test_the_gui_thread_stays_responsive_while_the_real_model_streams(
    qtbot: QtBot, app: App
) -> None:
    from tests.helpers.models import tiny_qwen35_gguf

    app.config.model.max_tokens = 300
    app.config.model.temperature = 1.0
    app.config.model.seed = 3
    window = open_window(qtbot, app, model=str(tiny_qwen35_gguf()))
    assert window.model_details.get("quantization") == "F16"
    gaps: list[float] = []
    last = [time.perf_counter()]

    def tick() -> None:
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(10)
    # The tiny model's weights are random: at temperature 1 it picks among 248k nearly equal
    # choices, so the last bit of a float (llama.cpp's threads do not give bit-identical logits
    # from run to run) changes which token comes, and about one reply in eight samples an end
    # token within 50 (measured). That is the model's luck, not the window's: a reply cut short
    # is asked again, and one of them must stream more than 50 tokens.
    for _attempt in range(3):
        ask(qtbot, window, "Tell me a long story.", timeout=120000)
        if window.last_stats is not None and window.last_stats.stats.completion_tokens > 50:
            break
    timer.stop()
    bubbles = window.chat.bubbles()
    notes = [w.text() for w in window.chat.widget().findChildren(type(window.model_label))]
    assert bubbles[-1].role == "assistant" and len(bubbles[-1].text) > 0, notes
    assert window.last_stats is not None and window.last_stats.stats.completion_tokens > 50
    assert "tok/s" in window.speed_label.text()
    assert "context" in window.context_label.text()
    # The timer fired throughout. Generation on the GUI thread would show one gap as long as the
    # whole reply (seconds); heavy work per token would show in most gaps. The shared machines
    # preempt any thread now and then for tens of milliseconds, so the test asks for what tells
    # the two apart: 95% of gaps under 50 ms and none reaching half a second.
    assert len(gaps) > 20
    stalls = sorted(gaps[1:])
    p95 = stalls[int(len(stalls) * 0.95) - 1]
    assert p95 < 0.050, f"95th percentile GUI stall {p95 * 1000:.0f} ms"
    assert stalls[-1] < 0.500, f"longest GUI stall {stalls[-1] * 1000:.0f} ms"
