"""The engine worker warms the model while idle: the prefix after loading, a conversation after
each request, so the follow-up evaluates only its own message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.app import build_app
from botpsy_desktop.llm.engine import PREFIX, LlamaBackend
from botpsy_desktop.ui.bridge import EngineWorker
from tests.helpers.models import tiny_qwen35_gguf

pytestmark = pytest.mark.model


def test_the_worker_warms_the_prefix_then_each_conversation(qtbot: QtBot, tmp_path: Path) -> None:
    app = build_app(tmp_path)
    try:
        # the tiny model's context (4096 tokens) holds a few tools, not the whole set
        app.registry = ToolRegistry([t for t in app.registry if t.name == "list_folder"])
        app.config.model.max_tokens = 6
        app.config.model.temperature = 0.0
        worker = EngineWorker(app)
        worker.load(str(tiny_qwen35_gguf()), "")
        backend = worker.backend
        assert isinstance(backend, LlamaBackend) and backend.states is not None
        (prefix,) = backend.states.checkpoints
        assert prefix.label == PREFIX and prefix.pinned

        started: list[str] = []
        stats: list[Any] = []
        worker.requestStarted.connect(lambda rid, cid: started.append(cid))
        worker.turnFinished.connect(lambda rid, event: stats.append(event.stats))
        worker.cancel_event("one")
        worker.run("one", "", "List my Documents folder.", False)
        assert stats[-1].reused_tokens == prefix.n_tokens  # the warmed prefix, not evaluated
        # after the request the worker warmed the conversation as the next request renders it
        worker.cancel_event("two")
        worker.run("two", started[0], "And the Music folder?", False)
        assert stats[-1].evaluated_tokens < 30, stats[-1].as_dict()

        # a request waiting in the queue goes first: no warm-up then
        backend.reset()
        worker.cancel_event("queued")
        worker._warm(started[0], False)
        assert backend._llama.n_tokens == 0
        worker.run("queued", started[0], "Thanks.", False)  # runs, then warms again
        assert backend._llama.n_tokens > prefix.n_tokens
    finally:
        worker.shutdown()
        app.close()
