"""What the window shows is true: what ran, what was refused, what the model only claimed, the
progress of a long prompt, readable model names and settings that exist (the real window, the
quick box and the composition root, with replayed model output)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from botpsy_desktop.agent.claims import NOTE
from botpsy_desktop.app import App, build_app
from botpsy_desktop.ui.chat_view import PromptProgressRow
from botpsy_desktop.ui.main_window import CUT_OFF, MainWindow
from botpsy_desktop.ui.quick import QuickCommandBox
from tests.helpers.replay import xml_call

TRASH = xml_call("move_to_trash", path="Documents/a.txt")
# recorded progress of a first request: the tool prefix is evaluated, 128 tokens a batch
PROGRESS = [[0, 5598, 0.0], [1536, 5598, 0.2], [3072, 5598, 0.4], [5598, 5598, 0.6]]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    (root / "Documents").mkdir(parents=True)
    (root / "Documents" / "a.txt").write_text("a", encoding="utf-8")
    return root


@pytest.fixture
def app(tmp_path: Path, files: Path) -> Iterator[App]:
    profile = tmp_path / "profile"
    (profile / "config").mkdir(parents=True)
    (profile / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}}), encoding="utf-8"
    )
    built = build_app(profile)
    yield built
    built.close()


def open_window(qtbot: QtBot, app: App, tmp_path: Path, *turns: object) -> MainWindow:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(list(turns)), encoding="utf-8")
    window = MainWindow(app, replay=str(replay))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
    return window


def send(window: MainWindow, text: str) -> None:
    window.input.setPlainText(text)
    window.send_button.click()


def notes(window: MainWindow, name: str) -> list[str]:
    inner = window.chat.widget()
    assert inner is not None
    return [label.text() for label in inner.findChildren(QLabel, name)]


def test_a_claimed_action_that_did_not_run_is_said_plainly_live_and_reopened(
    qtbot: QtBot, app: App, tmp_path: Path
) -> None:
    window = open_window(qtbot, app, tmp_path, "Done! The timer will ring 10 minutes later.")
    try:
        send(window, "timer 10 minutes")
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        assert window.chat.cards == {}  # no tool ran
        assert notes(window, "warningNote") == [NOTE]
        assert app.alarms is not None and app.alarms.alarms() == []
        conversation = window.conversation_id
        window.new_conversation()
        assert notes(window, "warningNote") == []
        window.open_conversation(conversation)
        assert notes(window, "warningNote") == [NOTE]  # the reloaded answer says it too
    finally:
        window.shutdown()


def test_an_answer_after_a_change_that_ran_gets_no_note(
    qtbot: QtBot, app: App, tmp_path: Path
) -> None:
    timer = xml_call("set_timer", duration="10 minutes")
    window = open_window(qtbot, app, tmp_path, timer, "Done! The timer will ring in 10 minutes.")
    try:
        send(window, "timer 10 minutes")
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        [card] = window.chat.cards.values()
        assert card.status == "ok" and notes(window, "warningNote") == []
        # Undo names what it undid, not the inverse's own words ("for good, cannot be undone")
        card.undo_button.click()
        qtbot.waitUntil(lambda: card.summary.text().startswith("↶ Undone"), timeout=10000)
        assert card.summary.text() == "↶ Undone: Set a timer for 10 minutes."
    finally:
        window.shutdown()


def test_a_refused_call_stays_not_approved_when_the_conversation_is_reopened(
    qtbot: QtBot, app: App, tmp_path: Path, files: Path
) -> None:
    window = open_window(qtbot, app, tmp_path, TRASH, "Done.")
    try:
        send(window, "trash a.txt")
        qtbot.waitUntil(lambda: bool(window.open_dialogs), timeout=10000)
        window.open_dialogs[-1].deny_button.click()
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        [card] = window.chat.cards.values()
        assert card.status == "denied" and "not approved" in card.toggle.text()
        assert notes(window, "warningNote") == [NOTE]  # "Done." with nothing carried out
        assert (files / "Documents" / "a.txt").exists()
        conversation = window.conversation_id
        window.new_conversation()
        window.open_conversation(conversation)
        [again] = window.chat.cards.values()
        assert again.status == "denied"
        assert "not approved" in again.toggle.text() and "done" not in again.toggle.text()
        assert notes(window, "warningNote") == [NOTE]
    finally:
        window.shutdown()


def test_a_failed_call_stays_failed_when_reopened(qtbot: QtBot, app: App, tmp_path: Path) -> None:
    missing = xml_call("read_text_file", path="Documents/missing.txt")
    window = open_window(qtbot, app, tmp_path, missing, "It is not there.")
    try:
        send(window, "read missing.txt")
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        [card] = window.chat.cards.values()
        assert card.status == "failed"
        conversation = window.conversation_id
        window.new_conversation()
        window.open_conversation(conversation)
        [again] = window.chat.cards.values()
        assert again.status == "failed" and "failed" in again.toggle.text()
    finally:
        window.shutdown()


def test_the_first_request_shows_the_progress_of_its_prompt(
    qtbot: QtBot, app: App, tmp_path: Path
) -> None:
    turn = {"text": "Hello! How can I help?", "prompt_progress": PROGRESS}
    window = open_window(qtbot, app, tmp_path, turn)
    try:
        send(window, "hello")
        qtbot.waitUntil(lambda: window.chat.progress is not None, timeout=10000)
        qtbot.waitUntil(
            lambda: (
                window.chat.progress is not None
                and "3,072 of 5,598 tokens" in window.chat.progress.text.text()
            ),
            timeout=10000,
        )
        row = window.chat.progress
        assert row is not None and "s left" in row.text.text()
        assert row.bar.value() == int(3072 / 5598 * 1000)
        assert window.speed_label.text().startswith("reading the request")
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        # the reply replaced the progress
        inner = window.chat.widget()
        assert window.chat.progress is None and inner is not None
        qtbot.waitUntil(lambda: inner.findChildren(PromptProgressRow) == [], timeout=5000)
        assert window.chat.bubbles()[-1].text == "Hello! How can I help?"
    finally:
        window.shutdown()


def test_stop_while_the_prompt_is_read_stops_at_once(
    qtbot: QtBot, app: App, tmp_path: Path
) -> None:
    slow = [[0, 5598, 0.0], [128, 5598, 0.1], [5598, 5598, 30.0]]
    window = open_window(qtbot, app, tmp_path, {"text": "Hi.", "prompt_progress": slow})
    try:
        send(window, "hello")
        qtbot.waitUntil(lambda: window.chat.progress is not None, timeout=10000)
        window.stop_button.click()
        qtbot.waitUntil(lambda: not window.busy, timeout=5000)
        assert window.chat.progress is None and "Stopped." in notes(window, "infoNote")
    finally:
        window.shutdown()


def test_the_status_bar_follows_the_stream_and_the_conversation(
    qtbot: QtBot, app: App, tmp_path: Path
) -> None:
    long_answer = " ".join(f"word{i}" for i in range(400)) + "."
    window = open_window(qtbot, app, tmp_path, long_answer, "Other.")
    seen: list[str] = []
    window.engine.worker.streamed.connect(lambda *_: seen.append(window.speed_label.text()))
    try:
        send(window, "write a lot")
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        assert seen and all(s.startswith("replying · ") for s in seen)
        assert "tokens" in seen[-1]
        window.figures[window.conversation_id] = ("context 120/8,192", "first token 0.10 s")
        first = window.conversation_id
        window.new_conversation()  # a new conversation shows none of the other's figures
        assert window.speed_label.text() == ""
        window.open_conversation(first)
        assert window.speed_label.text() == "first token 0.10 s"
        assert window.context_label.text() == "context 120/8,192"
    finally:
        window.shutdown()


def test_the_quick_box_shows_what_was_refused_and_what_was_only_claimed(
    qtbot: QtBot, app: App, tmp_path: Path, files: Path
) -> None:
    turns = [
        {"text": TRASH, "prompt_progress": PROGRESS},
        "Done.",
        xml_call("list_folder", path="Documents"),
        "One file: a.txt.",
    ]
    window = open_window(qtbot, app, tmp_path, *turns)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    statuses: list[str] = []
    window.engine.worker.promptProgress.connect(lambda *_: statuses.append(quick.status.text()))
    try:
        quick.popup()
        qtbot.keyClicks(quick.line, "trash a.txt")
        qtbot.keyClick(quick.line, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: bool(quick.dialogs), timeout=10000)
        assert any("Reading the request: 1,536 of 5,598 tokens" in s for s in statuses)
        quick.dialogs[-1].deny_button.click()
        qtbot.waitUntil(lambda: not quick.request_id, timeout=10000)
        assert quick.answer.text() == "Done."
        assert quick.note.isVisible() and quick.note.text() == NOTE
        assert quick.outcomes.isVisible()
        assert quick.outcomes.text().startswith("✗ Not approved, not carried out: move_to_trash")
        assert (files / "Documents" / "a.txt").exists()
        # a second command: what ran is listed, no note; and one conversation holds both
        quick.line.setText("list my documents")
        qtbot.keyClick(quick.line, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: not quick.request_id, timeout=10000)
        assert quick.outcomes.text().startswith("✓ Ran: list_folder(")
        assert not quick.note.isVisible()
        listed = app.store.conversations()
        assert len(listed) == 1 and listed[0].title.startswith("Quick commands · ")
        assert window.conversations.count() == 1
    finally:
        window.shutdown()


def test_the_cut_off_note_names_a_setting_that_settings_has(
    qtbot: QtBot, app: App, tmp_path: Path
) -> None:
    window = open_window(qtbot, app, tmp_path, "Hi.")
    try:
        window.model_details["n_ctx"] = 8192  # the model runs at its file's limit
        app.config.model.n_ctx = 16384
        dialog = window.open_settings()
        assert "Longest reply" in CUT_OFF
        assert dialog.max_tokens.value() == app.config.model.max_tokens
        assert dialog.n_ctx_note.isVisibleTo(dialog) and "8,192" in dialog.n_ctx_note.text()
        dialog.max_tokens.setValue(3000)
        dialog.save()
        assert app.config.model.max_tokens == 3000
    finally:
        window.shutdown()
