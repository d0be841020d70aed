"""The quick-command box answers in place; the tray copes with no tray; one instance runs."""

from __future__ import annotations

import json
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtNetwork import QLocalServer
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.ui.main import hand_over, instance_name
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.quick import QuickCommandBox
from botpsy_desktop.ui.tray import Tray

LIST = (
    "<tool_call>\n<function=list_folder>\n<parameter=path>\nDocuments\n</parameter>\n"
    "</function>\n</tool_call>"
)


def make_app(tmp_path: Path) -> App:
    files = tmp_path / "files"
    (files / "Documents").mkdir(parents=True)
    (files / "Documents" / "a.txt").write_text("a", encoding="utf-8")
    profile = tmp_path / "profile"
    (profile / "config").mkdir(parents=True)
    (profile / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}}), encoding="utf-8"
    )
    return build_app(profile)


def test_a_quick_command_answers_in_place(qtbot: QtBot, tmp_path: Path) -> None:
    app = make_app(tmp_path)
    replay = tmp_path / "r.json"
    replay.write_text(json.dumps([LIST, "One file: a.txt."]), encoding="utf-8")
    window = MainWindow(app, replay=str(replay))
    qtbot.addWidget(window)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
    quick.popup()
    assert quick.isVisible()
    qtbot.keyClicks(quick.line, "list my documents")
    qtbot.keyClick(quick.line, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not quick.request_id, timeout=10000)
    assert quick.answer.isVisible() and quick.answer.text() == "One file: a.txt."
    # the window ignored the quick command's events, but lists its conversation
    assert window.chat.bubbles() == []
    assert window.conversations.count() == 1
    qtbot.keyClick(quick, Qt.Key.Key_Escape)
    assert not quick.isVisible()
    window.shutdown()
    app.close()


def test_no_tray_means_closing_the_window_quits(qtbot: QtBot, tmp_path: Path) -> None:
    app = make_app(tmp_path)
    window = MainWindow(app)
    qtbot.addWidget(window)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    tray = Tray(window, quick)
    assert tray.available is False  # offscreen has no tray
    assert tray.icon is None
    assert tray.pending() == 0 and not tray.pending_action.isEnabled()
    window.hide_on_close = tray.available
    window.show()
    window.close()
    assert window.engine_closed
    app.close()


def test_close_to_tray_hides_instead(qtbot: QtBot, tmp_path: Path) -> None:
    app = make_app(tmp_path)
    window = MainWindow(app)
    qtbot.addWidget(window)
    window.hide_on_close = True
    window.show()
    window.close()
    assert not window.isVisible() and not window.engine_closed
    window.quitting = True
    window.close()
    assert window.engine_closed
    app.close()


def test_a_second_start_hands_over_to_the_running_one(qtbot: QtBot, tmp_path: Path) -> None:
    name = instance_name(Paths.resolve(tmp_path / "p"))
    assert name != instance_name(Paths.resolve(tmp_path / "q"))
    assert hand_over(name, "show") is False  # nobody listening
    server = QLocalServer()
    QLocalServer.removeServer(name)
    assert server.listen(name)
    got: list[bytes] = []

    def on_connection() -> None:
        conn = server.nextPendingConnection()
        conn.waitForReadyRead(500)
        got.append(bytes(conn.readAll().data()))

    server.newConnection.connect(on_connection)
    assert hand_over(name, "quick") is True
    qtbot.waitUntil(lambda: bool(got), timeout=3000)
    assert got == [b"quick"]
    server.close()


def test_the_tray_menu_lists_upcoming_alarms(qtbot: QtBot, tmp_path: Path) -> None:
    from datetime import timedelta

    from botpsy_desktop.adapters.alarms import AlarmKind

    app = make_app(tmp_path)
    assert app.alarms is not None
    app.alarms.add(AlarmKind.ALARM, app.alarms.now() + timedelta(hours=2), label="Stretch")
    window = MainWindow(app)
    qtbot.addWidget(window)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    tray = Tray(window, quick)
    texts = [a.text() for a in tray.alarms_menu.actions()]
    assert any(t.startswith("Stretch — ") for t in texts)
    window.shutdown()
    app.close()
