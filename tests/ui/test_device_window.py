"""The computer itself in the real window: a volume change's card says what changed, and its
Undo sets the sound server's volume back (PulseAudio null sinks on a private session)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import build_app
from botpsy_desktop.ui.main_window import MainWindow
from tests.helpers import desktop_session
from tests.helpers.desktop_session import DesktopSession
from tests.helpers.replay import xml_call
from tests.helpers.services import missing


@pytest.fixture
def session(tmp_path: Path) -> Iterator[DesktopSession]:
    if not desktop_session.available():
        missing("a desktop session (D-Bus, PulseAudio, gsettings, gio)", desktop_session.INSTALL)
    with desktop_session.desktop_session(tmp_path / "session") as running:
        yield running


def volume(session: DesktopSession) -> int:
    import pulsectl

    with pulsectl.Pulse("botpsy-tests", server=session.pulse_server) as pulse:
        return round(pulse.get_sink_by_name("speakers").volume.value_flat * 100)


def test_a_volume_card_says_what_changed_and_undo_sets_it_back(
    qtbot: QtBot, tmp_path: Path, session: DesktopSession
) -> None:
    profile = tmp_path / "profile"
    (profile / "config").mkdir(parents=True)
    config = {"files": {"roots": [str(tmp_path)]}, "device": {"pulse_server": session.pulse_server}}
    (profile / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    replay = tmp_path / "replay.json"
    turns = [xml_call("set_volume", change="-10"), "Turned it down."]
    replay.write_text(json.dumps(turns), encoding="utf-8")
    app = build_app(profile)
    window = MainWindow(app, replay=str(replay))
    qtbot.addWidget(window)
    window.show()
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        window.input.setPlainText("turn it down a bit")
        window.send_button.click()
        qtbot.waitUntil(lambda: not window.busy, timeout=10000)
        [card] = window.chat.cards.values()
        assert card.summary.text() == (
            "✓ Volume 50% → 40%. (done at once: you asked for it, and it can be undone)"
        )
        assert volume(session) == 40
        card.undo_button.click()
        qtbot.waitUntil(lambda: card.summary.text().startswith("↶ Undone"), timeout=10000)
        assert volume(session) == 50
    finally:
        window.shutdown()
        app.close()
