"""A stand-in recogniser for tests and demos: it knows only the recordings it was given.

It is NOT speech recognition. Each entry of its file pairs a WAV with the words spoken in it;
audio is matched to the entry whose loudness contour it follows most closely (normalised
cross-correlation of 10 ms energy frames), and the words of that entry are returned. Audio
that matches none returns no words. It lets the microphone, the button, the CLI and the agent
be tested end to end through the same Recognizer interface where no speech model can be had.
"""

from __future__ import annotations

import json
import time
import wave
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from botpsy_desktop.speech.recognizer import SAMPLE_RATE, Audio, OnText, Recognition, SpeechError

FRAME = SAMPLE_RATE // 100
MIN_MATCH = 0.8


def read_wav(path: Path) -> Audio:
    """A 16-bit PCM WAV as 16 kHz mono float32 (other rates are resampled linearly)."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise SpeechError(f"{path} is not 16-bit PCM.", "Convert it to 16-bit PCM WAV.")
        frames = w.readframes(w.getnframes())
        rate, channels = w.getframerate(), w.getnchannels()
    data = np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        data = data.reshape(-1, channels).mean(axis=1)
    if rate != SAMPLE_RATE:
        n = round(len(data) * SAMPLE_RATE / rate)
        data = np.interp(np.linspace(0, len(data) - 1, n), np.arange(len(data)), data)
    return np.asarray(data, dtype=np.float32)


def _contour(audio: Audio) -> NDArray[np.float64]:
    n = len(audio) // FRAME
    if n == 0:
        return np.zeros(0)
    frames = audio[: n * FRAME].astype(np.float64).reshape(n, FRAME)
    energy = np.log10(np.mean(frames**2, axis=1) + 1e-8)
    centred = energy - energy.mean()
    norm = np.linalg.norm(centred)
    out: NDArray[np.float64] = centred / norm if norm > 0 else centred
    return out


def _match(needle: NDArray[np.float64], hay: NDArray[np.float64]) -> float:
    """Best normalised correlation of the reference ``needle`` anywhere inside ``hay``."""
    if len(needle) == 0 or len(hay) == 0:
        return 0.0
    # a recording may start a little late or stop a little early: up to a third of the
    # reference may fall outside it (padded with the recording's quietest level)
    pad = np.full(len(needle) // 3, hay.min())
    hay = np.concatenate([pad, hay, pad])
    if len(hay) < len(needle):
        return 0.0
    best = 0.0
    for start in range(len(hay) - len(needle) + 1):
        window = hay[start : start + len(needle)]
        window = window - window.mean()
        norm = np.linalg.norm(window)
        if norm > 0:
            best = max(best, float(np.dot(needle, window) / norm))
    return best


class ReplayRecognizer:
    """Returns the words of the listed recording the audio matches (see the module's note)."""

    name = "replay (test stand-in, not speech recognition)"

    def __init__(self, file: Path) -> None:
        self.file = file
        self._refs: list[tuple[str, NDArray[np.float64]]] | None = None

    @property
    def loaded(self) -> bool:
        return self._refs is not None

    def _load(self) -> list[tuple[str, NDArray[np.float64]]]:
        if self._refs is None:
            try:
                entries = json.loads(self.file.read_text("utf-8"))
                refs = [
                    (str(e["text"]), _contour(read_wav(self.file.parent / e["wav"])))
                    for e in entries
                ]
            except (OSError, ValueError, KeyError, TypeError, EOFError, wave.Error) as exc:
                raise SpeechError(
                    f"The replay file {self.file} cannot be used: {exc}.",
                    'It is a JSON list of {"wav": PATH, "text": WORDS}.',
                    kind="model_damaged",
                ) from exc
            self._refs = refs
        return self._refs

    def transcribe(
        self, audio: Audio, *, language: str | None = None, on_text: OnText | None = None
    ) -> Recognition:
        begin = time.monotonic()
        first = not self.loaded
        refs = self._load()
        hay = _contour(audio)
        scored = [(_match(c, hay), text) for text, c in refs]
        score, text = max(scored, default=(0.0, ""))
        words = text if score >= MIN_MATCH else ""
        if words and on_text is not None:
            on_text(words)
        elapsed = time.monotonic() - begin
        return Recognition(
            words, language, len(audio) / SAMPLE_RATE, elapsed, elapsed if first else 0.0, "replay"
        )

    def close(self) -> None:
        self._refs = None
