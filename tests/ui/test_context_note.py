"""The window says when older turns were left out of the prompt to fit the model's context."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import App, build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.tools import ToolRegistry
from botpsy_desktop.ui.main_window import MainWindow


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    paths = Paths.resolve(tmp_path / "profile")
    paths.ensure()
    config = Config.model_validate({"model": {"n_ctx": 1024, "max_tokens": 64}})
    built = App(
        paths, config, ConversationStore(paths.database), ToolRegistry(), build_gate(config)
    )
    yield built
    built.close()


def test_the_window_notes_what_was_left_out(qtbot: QtBot, app: App, tmp_path: Path) -> None:
    answers = [f"Answer {i}: " + "a long and detailed reply " * 25 for i in range(6)]
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(answers), encoding="utf-8")
    window = MainWindow(app, replay=str(replay))
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_label.text() != "Loading model…", timeout=20000)
    for i in range(6):
        window.input.setPlainText(f"question {i}")
        window.send_button.click()
        qtbot.waitUntil(lambda: not window.busy, timeout=20000)
    notes = [
        label.text()
        for label in window.chat.widget().findChildren(QLabel)
        if label.objectName() == "infoNote"
    ]
    trimmed = [n for n in notes if n.startswith("Left out the oldest")]
    assert trimmed, notes
    assert "context of 1024 tokens; they are still saved." in trimmed[-1]
    assert [b.role for b in window.chat.bubbles()].count("assistant") == 6
