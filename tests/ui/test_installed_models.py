"""Settings > Model lists the installed models: Use checks and loads one, Remove removes one."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import build_app
from botpsy_desktop.ui.settings import SettingsDialog
from tests.helpers.models import smollm2_gguf, tiny_qwen35_gguf


def _item_texts(dialog: SettingsDialog) -> list[str]:
    lst = dialog.installed.list
    return [lst.item(i).text() for i in range(lst.count())]


def test_use_checks_the_file_and_asks_the_window_to_load_it(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = build_app(tmp_path / "profile")
    service = app.models()
    first = service.import_file(tiny_qwen35_gguf(), name="first", use=True)
    second = service.import_file(smollm2_gguf(), name="second", use=False)
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    texts = _item_texts(dialog)
    assert len(texts) == 2
    assert texts[[first.id in t for t in texts].index(True)].startswith("● ")  # the active one
    row = [second.id in t for t in texts].index(True)
    dialog.installed.list.setCurrentRow(row)
    with qtbot.waitSignal(dialog.modelChosen, timeout=20000) as chosen:
        dialog.installed.use_button.click()
        assert not dialog.installed.use_button.isEnabled()  # busy while it hashes
    assert chosen.args == [str(service.path_of(second))]
    assert app.config.model.path == str(service.path_of(second))
    assert _item_texts(dialog)[row].startswith("● ")
    assert dialog.installed.status.text() == f"Using {second.id}."

    # a file damaged after install is refused, and the active model stays
    path = service.path_of(first)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    dialog.installed.list.setCurrentRow([first.id in t for t in _item_texts(dialog)].index(True))
    dialog.installed.use_button.click()
    qtbot.waitUntil(lambda: not dialog.installed.busy, timeout=20000)
    assert "cannot be used" in dialog.installed.status.text()
    assert app.config.model.path == str(service.path_of(second))

    # remove (confirmed): gone from the list and from the models folder
    monkeypatch.setattr(
        QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes
    )  # the user's click on Yes
    dialog.installed.remove_button.click()
    qtbot.waitUntil(lambda: not dialog.installed.busy, timeout=20000)
    assert len(_item_texts(dialog)) == 1 and not path.exists()
    dialog.close()
    app.close()


def test_with_no_model_installed_it_says_how_to_get_one(qtbot: QtBot, tmp_path: Path) -> None:
    app = build_app(tmp_path / "profile")
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    assert _item_texts(dialog) == []
    assert "Get a model" in dialog.installed.status.text()
    assert not dialog.installed.use_button.isEnabled()
    dialog.close()
    app.close()
