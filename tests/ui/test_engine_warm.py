"""The engine worker warms the model while idle: the prefix after loading, a conversation after
each request, so the follow-up evaluates only its own message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.app import build_app
from botpsy_desktop.llm.engines.engine import PREFIX
from botpsy_desktop.llm.engines.engine_process import EngineProcess
from botpsy_desktop.ui.bridge import EngineWorker
from tests.helpers.models import tiny_qwen35_gguf

pytestmark = pytest.mark.model


def idle(qtbot: QtBot, worker: EngineWorker) -> None:
    """Wait (delivering the engine thread's signals) until nothing runs or waits."""
    qtbot.waitUntil(lambda: worker.wait_idle(0.01), timeout=120_000)
    qtbot.wait(20)


def test_the_worker_warms_the_prefix_then_each_conversation(qtbot: QtBot, tmp_path: Path) -> None:
    app = build_app(tmp_path)
    try:
        # the tiny model's context (4096 tokens) holds a few tools, not the whole set
        app.registry = ToolRegistry([t for t in app.registry if t.name == "list_folder"])
        app.config.model.max_tokens = 6
        app.config.model.n_threads = app.config.model.n_threads_batch = 1  # one thread (loaded CPU)
        app.config.model.temperature = 0.0
        worker = EngineWorker(app)
        worker.load(str(tiny_qwen35_gguf()), "")
        idle(qtbot, worker)  # loaded, then the prefix warmed
        backend = worker.backend
        assert isinstance(backend, EngineProcess)  # the engine in its worker process
        (prefix,) = backend.state()["checkpoints"]
        assert prefix["label"] == PREFIX and prefix["pinned"]

        started: list[str] = []
        stats: list[Any] = []
        worker.requestStarted.connect(lambda rid, cid: started.append(cid))
        worker.turnFinished.connect(lambda rid, event: stats.append(event.stats))
        worker.submit("", "List my Documents folder.", False)
        idle(qtbot, worker)  # the request, then its conversation warmed
        assert stats[-1].reused_tokens == prefix["n_tokens"]  # the warmed prefix, not evaluated
        # after the request the worker warmed the conversation as the next request renders it
        worker.submit(started[0], "And the Music folder?", False)
        idle(qtbot, worker)
        assert stats[-1].evaluated_tokens < 30, stats[-1].as_dict()

        # a warm-up gives way to a request (tests/agent/test_scheduler.py), which then runs
        # and warms its conversation again
        backend.reset()
        worker._warm(started[0], False)
        worker.submit(started[0], "Thanks.", False)
        idle(qtbot, worker)
        assert backend.state()["n_tokens"] > prefix["n_tokens"]
    finally:
        worker.shutdown()
        app.close()


def test_the_window_and_quick_box_show_the_prefix_being_prepared(
    qtbot: QtBot, tmp_path: Path
) -> None:
    from botpsy_desktop.ui.main_window import MainWindow
    from botpsy_desktop.ui.quick import QuickCommandBox

    app = build_app(tmp_path)
    # the files tools: a prefix of some thousand tokens, within the tiny model's context
    app.registry = ToolRegistry([t for t in app.registry if t.name in FILE_TOOLS])
    app.config.agent.tool_selection = False
    app.config.model.max_tokens = 6
    # one thread: llama.cpp threads waiting on each other crawl on a loaded CPU
    app.config.model.n_threads = app.config.model.n_threads_batch = 1
    window = MainWindow(app, model=str(tiny_qwen35_gguf()))
    qtbot.addWidget(window)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    said: list[tuple[str, str]] = []
    window.engine.worker.warmProgress.connect(
        lambda p, what: said.append((window.statusBar().currentMessage(), quick.status.text()))
    )
    try:
        idle(qtbot, window.engine.worker)  # loaded, then the prefix prepared
        shown = [s for s in said if s[0]]
        assert shown, said
        assert shown[0][0].startswith("Preparing the model: 0 of ")
        assert all(w == q for w, q in shown)  # the quick box says the same
        assert said[-1] == ("", "")  # over: nothing is said any more
        # the first request evaluates only its own message: the prefix is ready
        stats: list[Any] = []
        window.engine.worker.turnFinished.connect(lambda rid, event: stats.append(event.stats))
        window.input.setPlainText("List my Documents folder.")
        window.send()
        qtbot.waitUntil(lambda: not window.busy, timeout=120_000)
        assert stats and stats[0].reused_tokens > stats[0].evaluated_tokens
    finally:
        window.shutdown()
        app.close()


FILE_TOOLS = {"list_folder", "find_files", "read_text_file", "file_info", "create_folder"}
