"""The settings dialog edits the real config file and reloads the model when its settings change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import build_app
from botpsy_desktop.core.secrets import engine_entry
from botpsy_desktop.ui.settings import SettingsDialog
from tests.helpers.keyring_service import SecretService
from tests.helpers.services import keyring_env, secret_service  # noqa: F401


def test_saving_writes_the_config_and_asks_for_a_model_reload(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # where login items live
    app = build_app(tmp_path / "profile")
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    dialog.n_threads.setValue(1)
    dialog.n_ctx.setValue(4096)
    dialog.roots.add(str(tmp_path))
    dialog.theme.setCurrentText("dark")
    dialog.location.setText("Lyon, France")
    dialog.autostart.setChecked(True)
    with qtbot.waitSignal(dialog.modelSettingsChanged, timeout=2000):
        dialog.save_button.click()
    saved = json.loads((tmp_path / "profile" / "config" / "config.json").read_text("utf-8"))
    assert saved["model"]["n_threads"] == 1 and saved["model"]["n_ctx"] == 4096
    assert str(tmp_path) in saved["files"]["roots"]
    assert saved["ui"]["theme"] == "dark"
    assert saved["weather"]["default_location"] == "Lyon, France"
    assert app.config.model.n_ctx == 4096
    assert (tmp_path / "xdg" / "autostart" / "botpsy-desktop.desktop").is_file(), (
        dialog.error.text()
    )
    app.close()


def test_invalid_settings_are_not_saved(qtbot: QtBot, tmp_path: Path) -> None:
    app = build_app(tmp_path / "profile")
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.roots.list.clear()
    dialog.save_button.click()
    assert dialog.isVisible() and "at least one folder" in dialog.error.text()
    assert not (tmp_path / "profile" / "config" / "config.json").exists()
    app.close()


def test_the_model_can_run_on_a_llama_server_with_its_key_in_the_keyring(
    qtbot: QtBot,
    tmp_path: Path,
    keyring_env: SecretService,  # noqa: F811
) -> None:
    app = build_app(tmp_path / "profile")
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.engine_kind.currentIndex() == 0 and not dialog.engine_url.isEnabled()
    dialog.engine_kind.setCurrentIndex(1)
    assert dialog.engine_url.isEnabled() and dialog.engine_key.isEnabled()
    # plain http to another computer: refused, saying what would travel unencrypted
    dialog.engine_url.setText("http://192.168.1.20:8080")
    dialog.save_button.click()
    assert dialog.isVisible() and "unencrypted" in dialog.error.text()
    assert not (tmp_path / "profile" / "config" / "config.json").exists()
    dialog.engine_url.setText("https://gpu-box:8080")
    dialog.engine_key.setText("engine-key-123")
    with qtbot.waitSignal(dialog.modelSettingsChanged, timeout=2000):
        dialog.save_button.click()
    text = (tmp_path / "profile" / "config" / "config.json").read_text("utf-8")
    assert json.loads(text)["engine"]["url"] == "https://gpu-box:8080"
    assert "engine-key-123" not in text  # the key went to the keyring only
    assert app.secrets.get("", entry=engine_entry("https://gpu-box:8080")) == "engine-key-123"
    app.close()


def test_the_model_tab_shows_where_the_model_runs_and_saves_the_device(
    qtbot: QtBot, tmp_path: Path
) -> None:
    from botpsy_desktop.llm.models import gpu_device

    app = build_app(tmp_path / "profile")
    # where the engine placed a model with no Vulkan module to load (what the window passes on)
    placement = gpu_device.place(
        "auto",
        libggml=None,
        folders=[tmp_path],
        need={"weights": 1, "kv_cache": 1, "recurrent_state": 0, "total": 2},
        n_layers=24,
    )
    dialog = SettingsDialog(app, running_device=placement.describe())
    qtbot.addWidget(dialog)
    assert dialog.device.currentText() == "auto"
    assert dialog.device_note.text() == (
        f"Now: on the CPU (no Vulkan backend ({gpu_device.VULKAN_MODULE} not in {tmp_path}))"
    )
    dialog.device.setCurrentText("cpu")
    with qtbot.waitSignal(dialog.modelSettingsChanged, timeout=2000):
        dialog.save_button.click()
    saved = json.loads((tmp_path / "profile" / "config" / "config.json").read_text("utf-8"))
    assert saved["model"]["device"] == "cpu" and app.config.model.device == "cpu"
    app.close()
