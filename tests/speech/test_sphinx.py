"""The PocketSphinx engine through the shipped composition root: its model, inside the
pocketsphinx wheel and checked against the wheel's RECORD, turns a command synthesised with
espeak-ng into its words (real speech recognition, nothing downloaded); it refuses a language
other than English before anyone speaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from botpsy_desktop.app import App, build_app
from botpsy_desktop.speech.capture import Microphone, Recording
from botpsy_desktop.speech.recognizer import SpeechError
from botpsy_desktop.speech.replay import read_wav
from tests.helpers import voice
from tests.helpers.services import missing


def make_app(tmp_path: Path, **settings: object) -> App:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {"voice": {"engine": "pocketsphinx", **settings}}
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return build_app(home)


def test_a_spoken_command_becomes_its_words(tmp_path: Path) -> None:
    if not voice.available():
        missing("espeak-ng and paplay", voice.INSTALL)
    words = "what is the weather tomorrow"
    audio = read_wav(voice.speak(words, tmp_path / "weather.wav"))
    app = make_app(tmp_path, language="en")
    try:
        speech = app.voice()
        speech.prepare()  # the model files match the package's RECORD
        assert not speech.recognizer().loaded  # nothing loaded before the first recognition
        heard: list[str] = []
        result = speech.recognise(
            Recording(audio, Microphone("wav", "wav"), False), on_text=heard.append
        )
        assert result.text == words
        assert result.engine == "PocketSphinx (en-US)" and result.load_s > 0
        assert heard and heard[-1] == words  # the words as they grew
    finally:
        app.close()


def test_a_language_other_than_english_is_refused_before_recording(tmp_path: Path) -> None:
    app = make_app(tmp_path, language="de")
    try:
        with pytest.raises(SpeechError) as caught:
            app.voice().prepare()
        assert caught.value.kind == "unavailable"
        assert "understands US English only, not 'de'" in caught.value.message
        assert 'Set voice.language to "en"' in caught.value.hint
    finally:
        app.close()
