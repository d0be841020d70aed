"""A virtual microphone in a test's PulseAudio (a null sink whose monitor is remapped into an
ordinary source, so it is listed as a microphone), and spoken commands as WAVs (espeak-ng)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

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
