"""Spoken replies in the real quick box and window (offscreen Qt): the final answer, its markup
left out, is synthesised by espeak-ng and goes to the player (a WAV written through the same
Player interface as the loudspeaker, so its length can be measured; the loudspeaker itself, a
null sink of the test's PulseAudio, where stopping is checked); push-to-talk and a new request
stop it; off, nothing is spoken; without espeak-ng the answer stays and says what to install.

(Recording the null sink's monitor was tried for the length check: on a loaded machine the
monitor drops most of what is played, so the length is measured on the WAV instead.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import App, build_app
from botpsy_desktop.speech.tts import WavPlayer, speakable
from botpsy_desktop.ui.main_window import MainWindow
from botpsy_desktop.ui.quick import QuickCommandBox
from botpsy_desktop.ui.settings import SettingsDialog
from tests.helpers import desktop_session, voice
from tests.helpers.desktop_session import DesktopSession
from tests.helpers.replay import xml_call
from tests.helpers.services import missing

ANSWER = (
    "A **5-minute** timer is set: it rings at `12:05`. See [the alarms](https://example.org/a)."
)
LONG = " ".join(["This answer goes on for a long while, sentence after sentence."] * 8)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[DesktopSession]:
    if not desktop_session.available():
        missing("a desktop session (D-Bus, PulseAudio, gsettings, gio)", desktop_session.INSTALL)
    if not voice.available():
        missing("espeak-ng and paplay", voice.INSTALL)
    with desktop_session.desktop_session(tmp_path / "session") as running:
        voice.add_microphone(running)
        yield running


def make_app(tmp_path: Path, session: DesktopSession | None, **settings: object) -> App:
    wav = voice.speak("set a timer for five minutes", tmp_path / "timer.wav")
    replay = voice.replay_file(tmp_path, (wav, "set a timer for five minutes"))
    profile = tmp_path / "profile"
    (profile / "config").mkdir(parents=True)
    config: dict[str, object] = {
        "files": {"roots": [str(tmp_path)]},
        "alarms": {"time_zone": "UTC"},
        "voice": {"engine": "replay", "replay_file": str(replay), **settings},
    }
    if session is not None:
        config["device"] = {"pulse_server": session.pulse_server}
        config["voice"] = {**config["voice"], "microphone": voice.MIC}  # type: ignore[dict-item]
    (profile / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return build_app(profile)


def answers(tmp_path: Path, *turns: str) -> str:
    file = tmp_path / "answers.json"
    file.write_text(json.dumps(list(turns)), encoding="utf-8")
    return str(file)


def spoken_s(app: App, text: str) -> float:
    """Seconds of speech in ``text`` read aloud as a reply (its words, not its markup)."""
    samples, rate = app.speaker().synthesise(speakable(text))
    return voice.voiced_s(samples, rate)


def raw_s(app: App, text: str) -> float:
    """The same, were ``text`` read as it is written (markup and all)."""
    samples, rate = app.speaker().synthesise(text)
    return voice.voiced_s(samples, rate)


def test_the_quick_box_reads_the_answer_aloud_and_push_to_talk_stops_it(
    qtbot: QtBot, tmp_path: Path, session: DesktopSession
) -> None:
    app = make_app(tmp_path, session, speak_replies=True, speaker="headphones")
    replay = answers(tmp_path, xml_call("set_timer", duration="5 minutes"), ANSWER, LONG)
    window = MainWindow(app, replay=replay)
    qtbot.addWidget(window)
    quick = QuickCommandBox(window.engine)
    qtbot.addWidget(quick)
    reply = tmp_path / "reply.wav"
    app.speaker().output = WavPlayer(reply)
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        quick.popup()
        with qtbot.waitSignal(quick.replies.spoken, timeout=30000):
            quick.line.setText("set a timer for five minutes")
            quick.run()
        assert [r.name for r in quick.results] == ["set_timer"]
        heard = voice.voiced_s(*voice.read_wav(reply))
        expected = spoken_s(app, ANSWER)
        # the answer's words: read as written (stars, backquotes, the link's address), or with
        # the tool call's markup, it would take longer
        assert expected < raw_s(app, ANSWER) - 0.5
        assert expected < raw_s(app, xml_call("set_timer", duration="5 minutes") + ANSWER) - 1
        assert heard > 1.0 and abs(heard - expected) <= 0.2, (heard, expected)
        assert not quick.note.isVisible()  # no complaint: it was spoken

        # a long answer on the loudspeaker (about half a minute), and push-to-talk pressed
        # while it is read: the reading ends at once
        app.speaker().output = None
        quick.line.setText("tell me a long story")
        quick.run()
        qtbot.waitUntil(lambda: app.speaker().speaking, timeout=20000)
        qtbot.wait(500)
        with qtbot.waitSignal(quick.replies.spoken, timeout=5000):
            quick.mic.click()
        assert not app.speaker().speaking
        qtbot.waitUntil(lambda: quick.status.text().startswith("Listening"), timeout=10000)
        qtbot.keyClick(quick, Qt.Key.Key_Escape)  # the recording is dropped
        qtbot.waitUntil(lambda: not quick.voice.active, timeout=10000)
    finally:
        window.shutdown()
        app.close()


def test_the_window_says_nothing_when_off_and_a_new_request_stops_speech(
    qtbot: QtBot, tmp_path: Path, session: DesktopSession
) -> None:
    app = make_app(tmp_path, session, speaker="headphones")  # speak_replies: off by default
    assert app.config.voice.speak_replies is False
    window = MainWindow(app, replay=answers(tmp_path, ANSWER, LONG, "Nothing new."))
    qtbot.addWidget(window)
    reply = tmp_path / "reply.wav"
    app.speaker().output = WavPlayer(reply)
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        window.input.setPlainText("what time is it")
        window.send()
        qtbot.waitUntil(lambda: not window.busy, timeout=20000)
        assert [b.text for b in window.chat.bubbles()][-1] == ANSWER
        assert not app.speaker().speaking and not reply.exists()  # off: nothing spoken

        app.config.voice.speak_replies = True  # what Settings does when it is turned on
        app.speaker().output = None  # the loudspeaker
        window.input.setPlainText("tell me a long story")
        window.send()
        qtbot.waitUntil(lambda: app.speaker().speaking, timeout=20000)
        qtbot.waitUntil(lambda: not window.busy, timeout=20000)
        qtbot.wait(500)
        assert app.speaker().speaking  # about half a minute of it
        with qtbot.waitSignal(window.replies.spoken, timeout=5000):
            window.input.setPlainText("and now?")
            window.send()  # a new request: the long reading ends at once
        qtbot.waitUntil(lambda: not window.busy, timeout=20000)
        with qtbot.waitSignal(window.replies.spoken, timeout=20000):
            pass  # the new answer is read, to its end
    finally:
        window.shutdown()
        app.close()


def test_without_espeak_the_answer_stays_and_says_what_to_install(
    qtbot: QtBot, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not voice.available():
        missing("espeak-ng and paplay", voice.INSTALL)
    app = make_app(tmp_path, None, speak_replies=True)
    monkeypatch.setenv("PATH", voice.without_espeak(tmp_path))
    window = MainWindow(app, replay=answers(tmp_path, ANSWER))
    qtbot.addWidget(window)
    try:
        qtbot.waitUntil(lambda: window.model_label.text().startswith("replay:"), timeout=10000)
        with qtbot.waitSignal(window.replies.failed, timeout=20000) as failed:
            window.input.setPlainText("what time is it")
            window.send()
        message = str(failed.args[0]) if failed.args else ""
        assert "need espeak-ng, which is not installed" in message
        assert "apt install espeak-ng" in message
        qtbot.waitUntil(lambda: not window.busy, timeout=20000)
        assert ANSWER in [b.text for b in window.chat.bubbles()]  # the answer is shown
        notes = [w.text() for w in window.chat.findChildren(QLabel, "infoNote")]
        assert any("apt install espeak-ng" in n for n in notes), notes
    finally:
        window.shutdown()
        app.close()


def test_settings_turn_spoken_replies_on_with_a_voice_and_a_loudspeaker(
    qtbot: QtBot, tmp_path: Path, session: DesktopSession
) -> None:
    app = make_app(tmp_path, session)
    try:
        dialog = SettingsDialog(app)
        qtbot.addWidget(dialog)
        assert not dialog.speak_replies.isChecked()  # off by default
        assert dialog.speaker_note.text() == ""  # espeak-ng is there, the sound server too
        names = [dialog.speaker.itemText(i) for i in range(dialog.speaker.count())]
        assert names == ["The system's default", "Speakers", "Headphones", "VoiceFeed"]
        dialog.speak_replies.setChecked(True)
        dialog.reply_voice.setText("de")
        dialog.speaker.setCurrentIndex(dialog.speaker.findData("headphones"))
        dialog.speech_language.setText("en")
        assert dialog.speech_engine.currentData() == "replay"
        dialog.speech_engine.setCurrentIndex(dialog.speech_engine.findData("pocketsphinx"))
        dialog.save_button.click()
        saved = json.loads((tmp_path / "profile" / "config" / "config.json").read_text("utf-8"))
        assert saved["voice"]["speak_replies"] is True
        assert saved["voice"]["reply_voice"] == "de" and saved["voice"]["speaker"] == "headphones"
        # the rest of the Voice tab is kept too
        assert saved["voice"]["language"] == "en" and saved["voice"]["engine"] == "pocketsphinx"
        # in force at once: the next answer is read with them
        assert app.config.voice.speak_replies and app.speaker().settings.reply_voice == "de"
        assert app.voice().settings.engine == "pocketsphinx"
    finally:
        app.close()
