"""The window survives the engine: its worker crashes mid-answer (a real SIGSEGV, then SIGKILL),
the window stays up and shows the error, and the next request answers with a new worker."""

from __future__ import annotations

from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.app import build_app
from botpsy_desktop.llm.engines.engine_process import EngineProcess
from botpsy_desktop.llm.engines.worker_protocol import CRASH_FILE_ENV
from botpsy_desktop.ui.main_window import MainWindow
from tests.helpers.models import tiny_qwen35_gguf

pytestmark = pytest.mark.model


def notes(window: MainWindow) -> list[str]:
    return [w.text() for w in window.chat.widget().findChildren(type(window.model_label))]


def ask(qtbot: QtBot, window: MainWindow, text: str) -> None:
    window.input.setPlainText(text)
    window.send_button.click()
    qtbot.waitUntil(lambda: not window.busy, timeout=120_000)


def test_the_window_stays_up_when_the_engine_crashes_and_the_next_request_answers(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash = tmp_path / "crash-now"
    monkeypatch.setenv(CRASH_FILE_ENV, str(crash))
    app = build_app(tmp_path / "profile")
    # the tiny model's context (4096 tokens) holds a few tools, not the whole set
    app.registry = ToolRegistry([t for t in app.registry if t.name == "list_folder"])
    app.config.model.max_tokens = 24
    # one thread: llama.cpp threads waiting on each other crawl on a loaded CPU
    app.config.model.n_threads = app.config.model.n_threads_batch = 1
    app.config.model.temperature = 1.0  # sampled: the random-weight model writes visible text
    app.config.model.seed = 3
    try:
        window = MainWindow(app, model=str(tiny_qwen35_gguf()))
        qtbot.addWidget(window)
        window.show()
        qtbot.waitUntil(lambda: window.model_label.text() != "Loading model…", timeout=60_000)
        backend = window.engine.worker.backend
        assert isinstance(backend, EngineProcess)
        qtbot.waitUntil(lambda: window.engine.worker.wait_idle(0.01), timeout=120_000)  # warmed
        for how, reason in (("SIGSEGV", "segmentation fault"), ("SIGKILL", "killed")):
            crash.write_text(f"{how} 8", encoding="utf-8")  # after 8 streamed pieces
            ask(qtbot, window, "Tell me a story.")
            assert window.isVisible()
            assert any(
                f"The model engine stopped unexpectedly ({reason}" in n for n in notes(window)
            ), notes(window)
            assert not crash.exists()
            ask(qtbot, window, "Tell me another one.")
            bubbles = window.chat.bubbles()
            assert bubbles[-1].role == "assistant" and bubbles[-1].text, notes(window)
        assert backend.restarts == 2
    finally:
        window.close()
        app.close()


def test_stop_ends_a_request_whose_engine_hangs_and_the_next_request_answers(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker stops sending and ignores the cancel (the test hook's ``hang``, as a decode
    stuck in native code): Stop kills it within a second, the window says what was kept, and
    the next request starts a new worker."""
    hang = tmp_path / "hang-now"
    monkeypatch.setenv(CRASH_FILE_ENV, str(hang))
    app = build_app(tmp_path / "profile")
    app.registry = ToolRegistry([t for t in app.registry if t.name == "list_folder"])
    app.config.model.max_tokens = 200
    # one thread: llama.cpp threads waiting on each other crawl on a loaded CPU
    app.config.model.n_threads = app.config.model.n_threads_batch = 1
    app.config.model.temperature = 1.0
    app.config.model.seed = 3
    try:
        window = MainWindow(app, model=str(tiny_qwen35_gguf()))
        qtbot.addWidget(window)
        window.show()
        qtbot.waitUntil(lambda: window.model_label.text() != "Loading model…", timeout=60_000)
        backend = window.engine.worker.backend
        assert isinstance(backend, EngineProcess)
        qtbot.waitUntil(lambda: window.engine.worker.wait_idle(0.01), timeout=120_000)  # warmed
        hung_pid = backend.pid
        hang.write_text("hang 4", encoding="utf-8")  # after 4 streamed pieces
        window.input.setPlainText("Tell me a story.")
        window.send_button.click()
        qtbot.waitUntil(lambda: not hang.exists(), timeout=120_000)  # the worker hangs now
        qtbot.wait(500)
        assert window.busy
        window.stop_button.click()
        # (before: the window stayed busy for good, waiting on the hung worker)
        qtbot.waitUntil(lambda: not window.busy, timeout=30_000)
        shown = notes(window)
        assert "Stopped." in shown, shown
        assert any("kept in the conversation" in n for n in shown), shown
        ask(qtbot, window, "Tell me another one.")
        bubbles = window.chat.bubbles()
        assert bubbles[-1].role == "assistant" and bubbles[-1].text, notes(window)
        assert backend.restarts == 1 and backend.pid != hung_pid  # the hung one was killed
    finally:
        window.close()
        app.close()
