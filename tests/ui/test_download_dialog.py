"""The window's model dialog against a local Hub stand-in: download, cancel, resume, load."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import App, build_app
from botpsy_desktop.llm.models.download import Progress
from botpsy_desktop.ui.download import ModelDialog, progress_text
from botpsy_desktop.ui.main_window import MainWindow
from tests.helpers.hub import Faults, HubStandIn
from tests.helpers.models import tiny_qwen35_gguf

REPO = "qvac/BotPsy-0.8B"


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubStandIn]:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token"))
    with HubStandIn() as h:
        # a real (tiny, random-weight) qwen35 model, so the window can load what it downloads
        h.add_file(REPO, "BotPsy-0.8B-Q4_K_M.gguf", tiny_qwen35_gguf())
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    built = build_app(tmp_path / "profile")
    yield built
    built.close()


@pytest.mark.model
def test_first_run_offers_the_download_and_loads_the_model(
    qtbot: QtBot, hub: HubStandIn, app: App
) -> None:
    window = MainWindow(app)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.model_dialog is not None, timeout=10000)
    dialog = window.model_dialog
    assert dialog is not None and "Download BotPsy-0.8B" in dialog.message.text()
    assert "botpsy model" not in dialog.message.text()  # the window speaks of its buttons
    # a first try is cut half way; "Download again" resumes from where it stopped
    faults = Faults()
    faults.cut_after = 8 << 20
    hub.faults = faults
    app.config.downloads.retries = 0
    dialog.download_button.click()
    qtbot.waitUntil(lambda: not dialog.busy, timeout=20000)
    assert "again" in dialog.download_button.text()
    assert dialog.status.text()
    dialog.download_button.click()
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=20000)
    ranges = [r.range for r in hub.file_requests() if r.range]
    assert ranges and ranges[-1].startswith("bytes=")
    # the window loads what was downloaded
    qtbot.waitUntil(
        lambda: window.model_label.text() not in ("Loading model…", "No model"), timeout=20000
    )
    assert app.config.model.path and Path(app.config.model.path).is_file()
    assert "F16" in window.model_label.text()
    window.shutdown()


def test_cancel_keeps_the_dialog_usable(qtbot: QtBot, hub: HubStandIn, app: App) -> None:
    faults = Faults()
    faults.trickle = True
    hub.faults = faults
    dialog = ModelDialog(app)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.download_button.click()
    assert dialog.cancel_button.isVisible()
    qtbot.wait(300)
    dialog.cancel_button.click()
    qtbot.waitUntil(lambda: not dialog.busy, timeout=10000)
    assert dialog.download_button.isEnabled()
    dialog.later_button.click()


def test_progress_text() -> None:
    p = Progress("download", "f.gguf", 100 * 2**20, 500 * 2**20, bytes_per_s=8 * 2**20)
    assert progress_text(p) == "100.0 MiB of 500.0 MiB · 8.0 MiB/s · about 50 s left"
