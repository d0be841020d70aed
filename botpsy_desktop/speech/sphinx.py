"""Speech to text with PocketSphinx (US English), its model shipped inside the pocketsphinx wheel.

A second engine behind the Recognizer interface, for where no Whisper model can be had: the
``pocketsphinx`` distribution (5.1.1, BSD) carries CMU's en-US acoustic model, language model
and pronouncing dictionary, so nothing is downloaded, ever. Before use the model files are
checked against the SHA-256 and sizes the wheel's own RECORD lists (a changed or truncated file
is refused with what to do). It runs in a worker process like whisper.cpp (same protocol,
sphinx_worker.py). It understands English only, and far less accurately than Whisper: see
tools/bench_speech.py for measured numbers.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from importlib import metadata
from pathlib import Path

from botpsy_desktop.speech.recognizer import SpeechError
from botpsy_desktop.speech.whisper import WhisperRecognizer

DISTRIBUTION = "pocketsphinx"
PIN = "pocketsphinx==5.1.1"
LANGUAGES = ("en",)
MODEL_FILES = (
    "en-us/en-us/feat.params",
    "en-us/en-us/mdef",
    "en-us/en-us/means",
    "en-us/en-us/noisedict",
    "en-us/en-us/sendump",
    "en-us/en-us/transition_matrices",
    "en-us/en-us/variances",
    "en-us/en-us.lm.bin",
    "en-us/cmudict-en-us.dict",
)


def model_dir() -> Path:
    """The checked en-US model folder inside the installed pocketsphinx (its acoustic model
    ``en-us/``, ``en-us.lm.bin`` and ``cmudict-en-us.dict``), or SpeechError."""
    install = f'Install it with `pip install "{PIN}"` (the model comes inside it).'
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise SpeechError(
            "The PocketSphinx engine (the pocketsphinx package) is not installed.",
            install,
            kind="unavailable",
        ) from None
    listed = {str(f): f for f in dist.files or []}
    root = Path(str(dist.locate_file("pocketsphinx/model")))
    for rel in MODEL_FILES:
        entry = listed.get(f"pocketsphinx/model/{rel}")
        path = root / rel
        reinstall = f'Reinstall it: `pip install --force-reinstall "{PIN}"`.'
        if entry is None or entry.hash is None or not path.is_file():
            raise SpeechError(
                f"PocketSphinx's model file {path} is missing.", reinstall, kind="model_missing"
            )
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.new(entry.hash.mode, data).digest())
        if len(data) != entry.size or digest.rstrip(b"=").decode() != entry.hash.value:
            raise SpeechError(
                f"PocketSphinx's model file {path} is damaged: it does not match the "
                "checksum the pocketsphinx package lists for it.",
                reinstall,
                kind="model_damaged",
            )
    return root / "en-us"


class SphinxRecognizer(WhisperRecognizer):
    """PocketSphinx in a worker process (see the module's note); the model loads at the first
    :meth:`transcribe`."""

    name = "PocketSphinx (en-US)"
    binding = "pocketsphinx"
    install = f'pip install "{PIN}"'

    def command(self) -> list[str]:
        if getattr(sys, "frozen", False):
            return [sys.executable, "--sphinx-worker", str(self.model)]
        return [sys.executable, "-m", "botpsy_desktop.speech.sphinx_worker", str(self.model)]
