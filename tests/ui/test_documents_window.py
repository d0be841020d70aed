"""The documents index in the real window: its progress in the status bar (paused while the model
is busy, then done, with the files it could not read), and a found document's Open on its tool
card, which opens only files inside the allowed folders."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import QUrl
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import build_app
from botpsy_desktop.core.busy import ANSWERING
from botpsy_desktop.ui.main_window import MainWindow
from tests.helpers.documents import write_encrypted_pdf, write_pdf
from tests.helpers.replay import xml_call


def test_the_window_shows_indexing_progress_and_opens_a_found_document(
    qtbot: QtBot, tmp_path: Path
) -> None:
    docs = tmp_path / "home" / "Documents"
    docs.mkdir(parents=True)
    lease = write_pdf(docs / "lease.pdf", ["Tenancy agreement", "The lease ends on 31 March 2027."])
    (docs / "notes.md").write_text("# Car\nTyres changed at 84000 km.\n", encoding="utf-8")
    write_encrypted_pdf(docs / "locked.pdf", ["A secret lease"])
    elsewhere = write_pdf(tmp_path / "elsewhere.pdf", ["Not one of the allowed folders"])
    profile = tmp_path / "profile"
    (profile / "config").mkdir(parents=True)
    config = {"files": {"roots": [str(tmp_path / "home")]}}
    (profile / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    replay = tmp_path / "replay.json"
    turns = [
        xml_call("search_documents", query="lease ends"),
        xml_call("read_document", path="Documents/lease.pdf", where="page 2"),
        "On 31 March 2027 (lease.pdf, page 2).",
    ]
    replay.write_text(json.dumps(turns), encoding="utf-8")
    opened: list[QUrl] = []

    def opener(url: QUrl) -> bool:
        opened.append(url)
        return True

    app = build_app(profile)
    window = MainWindow(app, replay=str(replay), opener=opener)
    qtbot.addWidget(window)
    window.show()
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        assert not window.index_label.isVisible()  # nothing indexes yet
        with app.busy.hold(ANSWERING):  # the model is writing: the indexer waits
            assert app.start_indexing()
            qtbot.waitUntil(
                lambda: window.index_label.text().startswith("Indexing paused while the model"),
                timeout=20000,
            )
            assert window.index_label.isVisible()
            assert window.index_label.text() == (
                "Indexing paused while the model answers: 0 files so far"
            )
        qtbot.waitUntil(
            lambda: window.index_label.text().startswith("Documents indexed"), timeout=60000
        )
        assert window.index_label.text() == "Documents indexed: 3 files, 1 not readable"

        window.input.setPlainText("when does my lease end?")
        window.send_button.click()
        qtbot.waitUntil(lambda: not window.busy, timeout=30000)
        [card, read] = window.chat.cards.values()
        assert card.name == "search_documents" and card.status == "ok"
        assert list(card.open_buttons) == [str(lease)]  # not the unreadable locked.pdf
        assert read.name == "read_document" and list(read.open_buttons) == [str(lease)]
        card.open_buttons[str(lease)].click()
        assert opened == [QUrl.fromLocalFile(str(lease))]

        # a path outside the allowed folders is never opened, whatever names it
        assert window.open_document(str(elsewhere)) is False
        assert window.open_document(str(docs / "missing.pdf")) is False
        assert opened == [QUrl.fromLocalFile(str(lease))]
        assert "is not a file in the folders the assistant may use" in (
            window.statusBar().currentMessage()
        )
        assert (
            window.document_sources(
                "search_documents", json.dumps({"results": [{"file": str(elsewhere)}]})
            )
            == []
        )
    finally:
        window.shutdown()
        app.close()
