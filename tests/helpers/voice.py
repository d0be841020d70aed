"""A virtual microphone in a test's PulseAudio (a null sink whose monitor is remapped into an
ordinary source, so it is listed as a microphone), and spoken commands as WAVs (espeak-ng)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from tests.helpers.desktop_session import DesktopSession

MIC = "test_mic"
FEED = "voice_feed"
INSTALL = "apt install espeak-ng pulseaudio-utils"


def available() -> bool:
    return all(shutil.which(p) for p in ("espeak-ng", "paplay"))


def add_microphone(session: DesktopSession) -> str:
    """Add the virtual microphone (``test_mic``, "Test microphone"); returns its name."""
    import pulsectl

    with pulsectl.Pulse("botpsy-tests", server=session.pulse_server) as pulse:
        pulse.module_load(
            "module-null-sink", f"sink_name={FEED} sink_properties=device.description=VoiceFeed"
        )
        pulse.module_load(
            "module-remap-source",
            f"master={FEED}.monitor source_name={MIC} "
            "source_properties=device.description=Test_microphone",
        )
    return MIC


def speak(text: str, wav: Path, voice: str = "en-us") -> Path:
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(wav), text], check=True, timeout=60)
    return wav


def play(session: DesktopSession, wav: Path) -> None:
    """Play ``wav`` into the virtual microphone; returns when it has been played."""
    subprocess.run(
        ["paplay", f"--device={FEED}", str(wav)],
        env={**os.environ, **session.env, "PULSE_SERVER": session.pulse_server},
        check=True,
        timeout=60,
    )


def replay_file(folder: Path, *entries: tuple[Path, str]) -> Path:
    """The "replay" recogniser's list: each WAV with the words spoken in it."""
    file = folder / "speech-replay.json"
    data = [{"wav": str(wav), "text": text} for wav, text in entries]
    file.write_text(json.dumps(data), encoding="utf-8")
    return file


def read_wav(path: Path) -> tuple[NDArray[np.float32], int]:
    """A 16-bit mono WAV's samples (float32) and rate."""
    import wave

    with wave.open(str(path), "rb") as w:
        rate, frames = w.getframerate(), w.readframes(w.getnframes())
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0, rate


def voiced_s(audio: NDArray[np.float32], rate: int, below_peak_db: float = 30.0) -> float:
    """Seconds of ``audio`` (in 50 ms frames) within ``below_peak_db`` of its loudest frame,
    and not silence: the length of the speech in it, pauses left out."""
    frame = rate // 20
    n = len(audio) // frame
    if n == 0:
        return 0.0
    frames = audio[: n * frame].astype(np.float64).reshape(n, frame)
    db = 20 * np.log10(np.sqrt(np.mean(frames**2, axis=1)) + 1e-12)
    floor = max(float(db.max()) - below_peak_db, -70.0)
    return float(np.count_nonzero(db > floor) * frame / rate)


def without_espeak(folder: Path) -> str:
    """A PATH with this Python's folder and PulseAudio's tools, and no espeak-ng on it."""
    import sys

    bin_dir = folder / "bin-without-espeak"
    bin_dir.mkdir(exist_ok=True)
    for name in ("paplay", "parec"):
        found = shutil.which(name)
        if found and not (bin_dir / name).exists():
            (bin_dir / name).symlink_to(found)
    return os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent)])
