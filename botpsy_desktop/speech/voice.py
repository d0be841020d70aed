"""Push-to-talk from start to words: check the model, record, refuse silence, recognise."""

from __future__ import annotations

import dataclasses
import threading
import time
import wave
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from botpsy_desktop.core.config import Config, VoiceSettings
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.speech.capture import Microphone, OnLevel, Recording, microphones, record
from botpsy_desktop.speech.models import SpeechModels
from botpsy_desktop.speech.recognizer import (
    SAMPLE_RATE,
    OnText,
    Recognition,
    Recognizer,
    SpeechError,
)
from botpsy_desktop.speech.written import written_forms

OnStart = Callable[[Microphone], None]


def minutes(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        n = int(seconds // 60)
        return f"{n} minute{'s' if n != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"


class VoiceInput:
    """The voice side of the app (no Qt): the CLI and the window both use it.

    The recogniser is made, and its model loaded, at the first :meth:`recognise`; starting the
    app loads nothing. :meth:`prepare` checks before a recording that the model is there and
    intact, so nobody speaks into a microphone only to hear that nothing can understand them.
    """

    def __init__(self, config: Config, paths: Paths) -> None:
        self.config, self.paths = config, paths
        self.models = SpeechModels(paths, config)
        self._recognizer: Recognizer | None = None
        self._sphinx_dir: Path | None = None
        self._lock = threading.Lock()

    @property
    def settings(self) -> VoiceSettings:
        """The voice settings as they are now (Settings replaces the section when saved)."""
        return self.config.voice

    @property
    def pulse_server(self) -> str | None:
        return self.config.device.pulse_server

    def microphones(self) -> list[Microphone]:
        return microphones(self.pulse_server)

    def prepare(self) -> None:
        """Raise SpeechError now if recognising would fail for want of an engine or model."""
        if not self.settings.enabled:
            raise SpeechError(
                "Voice input is turned off in the settings.",
                "Turn it on (voice.enabled).",
                kind="unavailable",
            )
        if self.settings.engine == "replay":
            if not self.settings.replay_file:
                raise SpeechError(
                    'The "replay" speech engine needs voice.replay_file.',
                    'Set it, or set voice.engine to "whisper.cpp".',
                    kind="model_missing",
                )
            return
        if self.settings.engine == "pocketsphinx":
            self._sphinx_model()
            return
        self.models.require(self.settings.model)

    def recognizer(self) -> Recognizer:
        with self._lock:
            if self._recognizer is None:
                if self.settings.engine == "replay":
                    from botpsy_desktop.speech.replay import ReplayRecognizer

                    assert self.settings.replay_file is not None
                    self._recognizer = ReplayRecognizer(Path(self.settings.replay_file))
                elif self.settings.engine == "pocketsphinx":
                    from botpsy_desktop.speech.sphinx import SphinxRecognizer

                    self._recognizer = SphinxRecognizer(
                        self._sphinx_model(),
                        pull_hint='Reinstall it: `pip install --force-reinstall "pocketsphinx'
                        '==5.1.1"`.',
                    )
                else:
                    from botpsy_desktop.speech.whisper import WhisperRecognizer

                    path = self.models.require(self.settings.model)
                    self._recognizer = WhisperRecognizer(
                        path,
                        threads=self.settings.threads,
                        pull_hint=f"Download it again with `botpsy model pull "
                        f"{self.settings.model}`.",
                    )
            return self._recognizer

    def _sphinx_model(self) -> Path:
        """PocketSphinx's model folder, checked once (against the package's RECORD)."""
        from botpsy_desktop.speech import sphinx

        if self.settings.language not in ("auto", *sphinx.LANGUAGES):
            raise SpeechError(
                f"The PocketSphinx engine understands US English only, not "
                f"{self.settings.language!r}.",
                'Set voice.language to "en" (or "auto"), or use the whisper.cpp engine.',
                kind="unavailable",
            )
        if self._sphinx_dir is None:
            self._sphinx_dir = sphinx.model_dir()
        return self._sphinx_dir

    def record(
        self,
        stop: threading.Event,
        *,
        on_level: OnLevel | None = None,
        on_start: OnStart | None = None,
    ) -> Recording:
        """Record until ``stop``; SpeechError for a missing microphone, the time limit (the
        recording is dropped) or silence."""
        rec = record(
            stop,
            microphone=self.settings.microphone,
            pulse_server=self.pulse_server,
            max_seconds=self.settings.max_record_s,
            on_level=on_level,
            on_start=on_start,
        )
        if rec.hit_limit:
            raise SpeechError(
                f"The recording reached its {minutes(self.settings.max_record_s)} limit and was "
                "dropped; nothing was sent.",
                "Stop it (release the button, or press Enter) when you have finished speaking.",
                kind="too_long",
            )
        level = rec.peak_dbfs()
        if level < self.settings.silence_dbfs:
            raise SpeechError(
                f"Nothing was heard: the microphone {rec.microphone.name} gave only silence "
                f"({rec.seconds:.1f} s, loudest {level:.0f} dBFS); nothing was sent.",
                "Check that it is not muted and is the one you speak into (Settings: "
                "voice.microphone).",
                kind="silence",
            )
        if self.settings.keep_audio:
            self.keep(rec)
        return rec

    def keep(self, rec: Recording) -> Path:
        """Save ``rec`` as a WAV (only when voice.keep_audio is on)."""
        folder = self.paths.data_dir / "recordings"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}.wav"
        pcm = (np.clip(rec.audio, -1.0, 1.0) * 32767).astype("<i2")
        with wave.open(str(path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(SAMPLE_RATE)
            w.writeframes(pcm.tobytes())
        return path

    def recognise(self, rec: Recording, *, on_text: OnText | None = None) -> Recognition:
        language = None if self.settings.language == "auto" else self.settings.language
        begin = time.monotonic()
        result = self.recognizer().transcribe(rec.audio, language=language, on_text=on_text)
        if not result.text.strip():
            raise SpeechError(
                f"No words were recognised in the {rec.seconds:.1f} s recording "
                f"({time.monotonic() - begin:.1f} s); nothing was sent.",
                "Speak closer to the microphone, or type the request.",
                kind="no_words",
            )
        # an address, a path or a file name said aloud is written as the tools need it
        return dataclasses.replace(result, text=written_forms(result.text))

    def close(self) -> None:
        with self._lock:
            if self._recognizer is not None:
                self._recognizer.close()
                self._recognizer = None
