"""The first-run guide in the real window, with a local Hub stand-in serving a tiny real model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QLabel, QWizard
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import App, build_app
from botpsy_desktop.ui.firstrun import FirstRunWizard, needs_first_run
from botpsy_desktop.ui.main_window import MainWindow
from tests.helpers.hub import HubStandIn
from tests.helpers.models import tiny_qwen35_gguf

REPO = "qvac/BotPsy-0.8B"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStandIn]:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with HubStandIn() as h:
        h.add_file(REPO, "BotPsy-0.8B-Q4_K_M.gguf", tiny_qwen35_gguf())
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    built = build_app(tmp_path / "profile")
    yield built
    built.close()


def saved_config(tmp_path: Path) -> dict[str, dict[str, object]]:
    text = (tmp_path / "profile" / "config" / "config.json").read_text(encoding="utf-8")
    data: dict[str, dict[str, object]] = json.loads(text)
    return data


def the_wizard(qtbot: QtBot, window: MainWindow) -> FirstRunWizard:
    qtbot.waitUntil(lambda: window.findChild(FirstRunWizard) is not None, timeout=10000)
    wizard = window.findChild(FirstRunWizard)
    assert isinstance(wizard, FirstRunWizard)
    qtbot.waitUntil(wizard.isVisible, timeout=5000)
    return wizard


@pytest.mark.model
def test_the_guide_walks_model_folders_accounts_weather(
    qtbot: QtBot, hub: HubStandIn, app: App, tmp_path: Path
) -> None:
    assert needs_first_run(app.config)
    window = MainWindow(app)
    qtbot.addWidget(window)
    window.show()
    wizard = the_wizard(qtbot, window)
    assert wizard.currentPage() is wizard.model_page
    assert window.model_dialog is wizard.model_dialog
    dialog = wizard.model_dialog
    assert dialog.isVisible() and "Download BotPsy-0.8B" in dialog.message.text()

    # 1) the model: downloaded from the Hub stand-in; the guide moves on by itself
    dialog.download_button.click()
    qtbot.waitUntil(lambda: wizard.currentPage() is wizard.folders_page, timeout=30000)
    assert app.config.model.path and Path(app.config.model.path).is_file()
    assert hub.file_requests()
    qtbot.waitUntil(lambda: "F16" in window.model_label.text(), timeout=30000)

    # 2) folders: the defaults are shown; the user picks their own
    page = wizard.folders_page
    assert page.roots.folders() == ["~"] and page.music.folders() == ["~/Music"]
    page.roots.list.clear()
    wizard.next()
    assert wizard.currentPage() is page and "at least one folder" in page.error.text()
    docs, music = tmp_path / "Documents", tmp_path / "Tunes"
    page.roots.add(str(docs))
    page.music.list.clear()
    page.music.add(str(music))
    wizard.next()

    # 3) accounts: the accounts panel, listing the local calendar; skipped here
    assert wizard.currentPage() is wizard.accounts_page
    panel = wizard.accounts_page.panel
    qtbot.waitUntil(lambda: [r.name for r in panel.rows] == ["local"], timeout=10000)
    wizard.next()

    # 4) weather
    assert wizard.currentPage() is wizard.weather_page
    wizard.weather_page.location.setText("Lyon, France")
    wizard.weather_page.units.setCurrentText("metric")
    wizard.button(QWizard.WizardButton.FinishButton).click()
    assert not wizard.isVisible() and wizard.result() == 1

    saved = saved_config(tmp_path)
    assert saved["files"]["roots"] == [str(docs)]
    assert saved["music"]["folders"] == [str(music)]
    assert saved["weather"]["default_location"] == "Lyon, France"
    assert saved["weather"]["units"] == "metric"
    assert saved["ui"]["first_run_done"] is True
    assert saved["model"]["path"] == app.config.model.path
    assert "next start" in wizard.note
    notes = [w.text() for w in window.chat.findChildren(QLabel, "infoNote")]
    assert wizard.note in notes  # the window says what was saved
    window.shutdown()


def test_skipping_marks_the_guide_done_and_it_reopens_from_the_help_menu(
    qtbot: QtBot, app: App, tmp_path: Path
) -> None:
    window = MainWindow(app)
    qtbot.addWidget(window)
    window.show()
    wizard = the_wizard(qtbot, window)
    wizard.next()  # each step can be skipped...
    assert wizard.currentPage() is wizard.folders_page
    wizard.back()
    assert wizard.currentPage() is wizard.model_page
    wizard.model_dialog.later_button.click()  # ...the model step with its own Skip, too
    assert wizard.currentPage() is wizard.folders_page
    wizard.back()  # back on the first page, the model dialog is there to use again
    assert (
        wizard.model_dialog.isVisibleTo(wizard) and wizard.model_dialog.download_button.isEnabled()
    )
    wizard.button(QWizard.WizardButton.CancelButton).click()  # "Skip the guide"
    assert not wizard.isVisible()
    saved = saved_config(tmp_path)
    assert saved["ui"]["first_run_done"] is True
    assert saved["files"]["roots"] == ["~"]  # nothing else changed
    assert not needs_first_run(app.config)

    guide = next(
        a
        for m in window.menuBar().actions()
        if m.menu()
        for a in m.menu().actions()
        if "guide" in a.text()
    )
    guide.trigger()
    reopened = [w for w in window.findChildren(FirstRunWizard) if w.isVisible()]
    assert len(reopened) == 1 and reopened[0].currentPage() is reopened[0].model_page
    reopened[0].reject()
    window.shutdown()


def test_a_later_start_without_a_model_offers_the_download_not_the_guide(
    qtbot: QtBot, tmp_path: Path
) -> None:
    profile = tmp_path / "profile"
    (profile / "config").mkdir(parents=True)
    (profile / "config" / "config.json").write_text(
        json.dumps({"ui": {"first_run_done": True}}), encoding="utf-8"
    )
    app = build_app(profile)
    window = MainWindow(app)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_dialog is not None, timeout=10000)
    assert window.findChild(FirstRunWizard) is None
    window.shutdown()
    app.close()
