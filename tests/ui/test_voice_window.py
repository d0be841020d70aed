"""The microphone button in the real quick box and window (offscreen Qt): a WAV played into a
virtual microphone (a PulseAudio null sink remapped into a source) becomes the request, and it
sets a timer as if typed.

The words come from the "replay" recogniser, a labelled test stand-in behind the same
Recognizer interface (botpsy_desktop/speech/replay.py): no speech model can be downloaded
here, so this checks the button, the microphone, the gate and the agent, not recognition.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.alarms import AlarmKind
from botpsy_desktop.app import App, build_app
from botpsy_desktop.ui import voice as voice_ui
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.quick import QuickCommandBox
from tests.helpers import desktop_session, voice
from tests.helpers.desktop_session import DesktopSession
from tests.helpers.replay import xml_call
from tests.helpers.services import missing

WORDS = "set a timer for five minutes"


@pytest.fixture
def session(tmp_path: Path) -> Iterator[DesktopSession]:
    if not desktop_session.available():
        missing("a desktop session (D-Bus, PulseAudio, gsettings, gio)", desktop_session.INSTALL)
    if not voice.available():
        missing("espeak-ng and paplay", voice.INSTALL)
    with desktop_session.desktop_session(tmp_path / "session") as running:
        voice.add_microphone(running)
        yield running


def make_app(tmp_path: Path, session: DesktopSession, wav: Path) -> App:
    replay = voice.replay_file(tmp_path, (wav, WORDS))
    profile = tmp_path / "profile"
    (profile / "config").mkdir(parents=True)
    config = {
        "files": {"roots": [str(tmp_path)]},
        "device": {"pulse_server": session.pulse_server},
        "alarms": {"time_zone": "UTC"},
        "voice": {"microphone": voice.MIC, "engine": "replay", "replay_file": str(replay)},
    }
    (profile / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return build_app(profile)


def answers(tmp_path: Path) -> str:
    file = tmp_path / "answers.json"
    turns = [xml_call("set_timer", duration="5 minutes"), "A 5-minute timer is set."]
    file.write_text(json.dumps(turns), encoding="utf-8")
    return str(file)


def test_click_speak_click_runs_the_words_in_the_quick_box(
    qtbot: QtBot, tmp_path: Path, session: DesktopSession
) -> None:
    wav = voice.speak(WORDS, tmp_path / "timer.wav")
    app = make_app(tmp_path, session, wav)
    window = MainWindow(app, replay=answers(tmp_path))
    qtbot.addWidget(window)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        quick.popup()
        quick.mic.click()  # a click: recording goes on until the next one
        qtbot.waitUntil(lambda: quick.status.text().startswith("Listening"), timeout=10000)
        assert quick.status.text().startswith("Listening (Test_microphone)")
        voice.play(session, wav)
        quick.mic.click()
        qtbot.waitUntil(lambda: bool(quick.results) and not quick.request_id, timeout=20000)
        assert quick.line.text() == WORDS  # the words, shown in the box
        [result] = quick.results
        assert result.name == "set_timer" and result.ok
        assert quick.answer.text() == "A 5-minute timer is set."
        assert app.alarms is not None
        [timer] = app.alarms.alarms()
        assert timer.kind is AlarmKind.TIMER
    finally:
        window.shutdown()
        app.close()


def test_silence_in_the_window_says_so_and_sends_nothing(
    qtbot: QtBot, tmp_path: Path, session: DesktopSession
) -> None:
    wav = voice.speak(WORDS, tmp_path / "timer.wav")
    app = make_app(tmp_path, session, wav)
    window = MainWindow(app, replay=answers(tmp_path))
    qtbot.addWidget(window)
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        window.mic_button.click()
        qtbot.waitUntil(
            lambda: window.statusBar().currentMessage().startswith("Listening"), timeout=10000
        )
        window.mic_button.click()
        qtbot.waitUntil(
            lambda: window.statusBar().currentMessage().startswith("Nothing was heard"),
            timeout=10000,
        )
        assert "gave only silence" in window.statusBar().currentMessage()
        assert window.chat.bubbles() == [] and not window.busy
        assert window.mic_button.text() == "🎤"
    finally:
        window.shutdown()
        app.close()


def test_hold_speak_release_sends_the_words_from_the_window(
    qtbot: QtBot, tmp_path: Path, session: DesktopSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(voice_ui, "HOLD_S", 0.0)  # every press counts as held: no timing here
    wav = voice.speak(WORDS, tmp_path / "timer.wav")
    app = make_app(tmp_path, session, wav)
    window = MainWindow(app, replay=answers(tmp_path))
    qtbot.addWidget(window)
    window.show()
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        qtbot.mousePress(window.mic_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(
            lambda: window.statusBar().currentMessage().startswith("Listening"), timeout=10000
        )
        voice.play(session, wav)
        qtbot.mouseRelease(window.mic_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: bool(window.chat.bubbles()), timeout=20000)
        qtbot.waitUntil(lambda: not window.busy, timeout=20000)
        assert window.input.toPlainText() == ""  # sent, as Send does
        assert app.alarms is not None
        [timer] = app.alarms.alarms()
        assert timer.kind is AlarmKind.TIMER
    finally:
        window.shutdown()
        app.close()


def test_the_shortcut_can_open_the_box_listening_and_enter_sends(
    qtbot: QtBot, tmp_path: Path, session: DesktopSession
) -> None:
    wav = voice.speak(WORDS, tmp_path / "timer.wav")
    app = make_app(tmp_path, session, wav)
    app.config.voice.listen_on_shortcut = True
    window = MainWindow(app, replay=answers(tmp_path))
    qtbot.addWidget(window)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        quick.shortcut_popup()  # what the global shortcut and `botpsy-desktop --quick` call
        qtbot.waitUntil(lambda: quick.status.text().startswith("Listening"), timeout=10000)
        voice.play(session, wav)
        qtbot.keyClick(quick.line, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: bool(quick.results) and not quick.request_id, timeout=20000)
        [result] = quick.results
        assert result.name == "set_timer" and result.ok
        # Escape while listening drops the recording: nothing is recognised or sent
        quick.shortcut_popup()
        qtbot.waitUntil(lambda: quick.status.text().startswith("Listening"), timeout=10000)
        voice.play(session, wav)
        qtbot.keyClick(quick, Qt.Key.Key_Escape)
        qtbot.waitUntil(lambda: not quick.voice.active, timeout=10000)
        assert not quick.isVisible() and not quick.request_id
        assert app.alarms is not None
        assert quick.results == [result] and len(app.alarms.alarms()) == 1
    finally:
        window.shutdown()
        app.close()
