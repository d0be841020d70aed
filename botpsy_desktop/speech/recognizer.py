"""What every speech-to-text engine offers: 16 kHz mono audio in, words out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from numpy.typing import NDArray

from botpsy_desktop.core.errors import BotpsyError

SAMPLE_RATE = 16_000
"""Every engine here takes 16 kHz mono float32 samples in [-1, 1] (Whisper's own rate)."""

Audio = NDArray[np.float32]
OnText = Callable[[str], None]
"""Called with the words recognised so far, as they grow (the box shows them)."""

SpeechErrorKind = Literal[
    "model_missing",
    "model_damaged",
    "engine",
    "microphone",
    "silence",
    "too_long",
    "no_words",
    "cancelled",
    "unavailable",
]


class SpeechError(BotpsyError):
    """Voice input failed; ``kind`` says how (a window shows each its own way)."""

    def __init__(self, message: str, hint: str = "", kind: SpeechErrorKind = "engine") -> None:
        super().__init__(message, hint)
        self.kind: SpeechErrorKind = kind


@dataclass(frozen=True)
class Recognition:
    text: str
    language: str | None
    audio_s: float
    elapsed_s: float
    """Seconds the engine took, loading the model included when this was its first use."""
    load_s: float
    engine: str
    audio_ctx: int | None = None
    """whisper.cpp: the encoder positions read (50 a second; 0: its whole 30-second window);
    None for the other engines."""


class Recognizer(Protocol):
    """A speech-to-text engine. It loads its model at the first :meth:`transcribe`, not before."""

    name: str

    @property
    def loaded(self) -> bool: ...

    def transcribe(
        self, audio: Audio, *, language: str | None = None, on_text: OnText | None = None
    ) -> Recognition: ...

    def close(self) -> None: ...
