"""Recording from a microphone through the sound server (PulseAudio, or PipeWire's pulse server;
CoreAudio and WASAPI elsewhere), with the `soundcard` library: no audio touches the disk here."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from botpsy_desktop.speech.recognizer import SAMPLE_RATE, Audio, SpeechError

BLOCK = SAMPLE_RATE // 10  # 100 ms: how often a stop is noticed and the level reported
PEAK_WINDOW = SAMPLE_RATE // 20  # 50 ms: silence is judged on the loudest such stretch

OnLevel = Callable[[float], None]
"""Called about ten times a second with the last 100 ms's level in dBFS (a meter)."""


@dataclass(frozen=True)
class Microphone:
    id: str
    name: str


@dataclass(frozen=True)
class Recording:
    audio: Audio
    microphone: Microphone
    hit_limit: bool

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE

    def peak_dbfs(self) -> float:
        """The level of the loudest 50 ms, in dB below full scale (-120 for digital silence)."""
        n = len(self.audio) // PEAK_WINDOW
        if n == 0:
            return -120.0
        frames = self.audio[: n * PEAK_WINDOW].astype(np.float64).reshape(n, PEAK_WINDOW)
        rms = float(np.sqrt(np.mean(frames**2, axis=1)).max())
        return max(-120.0, 20 * float(np.log10(rms + 1e-12)))


_connected: list[str | None] = []
"""The server soundcard's connection was made to (one entry once it is made)."""


def _unloadable(exc: BaseException) -> SpeechError:
    return SpeechError(
        f"The sound system's library could not be loaded ({exc}).",
        "Install PulseAudio's client library (Debian/Ubuntu: libpulse0).",
        kind="unavailable",
    )


def _forget_soundcard() -> None:
    """Drop a soundcard import that failed half-way, so that the next try imports it afresh."""
    for name in [m for m in sys.modules if m == "soundcard" or m.startswith("soundcard.")]:
        sys.modules.pop(name, None)
    _connected.clear()


def _soundcard(pulse_server: str | None) -> ModuleType:
    """The soundcard module, connected to ``pulse_server`` (None: the session's own).

    soundcard opens one connection to the sound server when it is imported (libpulse reads the
    server from PULSE_SERVER then). A process that names another server later (a profile with
    another device.pulse_server, or the next test) gets a new connection in place of the old
    one: soundcard 0.4.6 keeps it in ``soundcard.pulseaudio._pulse`` (pinned for that reason).
    """
    saved = os.environ.get("PULSE_SERVER")
    argv = sys.argv
    if not argv or (argv[0] in ("-c", "") and len(argv) < 2):
        # soundcard names its client after sys.argv and fails on a lone "-c" (a host that runs
        # the app from `python -c`, as pytest-xdist's workers do): give it the app's name
        sys.argv = ["botpsy-desktop"]
    try:
        if pulse_server:
            os.environ["PULSE_SERVER"] = pulse_server
        try:
            import soundcard

            if not sys.platform.startswith("linux"):
                pass  # CoreAudio, WASAPI: no server to name
            elif not _connected:
                _connected.append(pulse_server)
            elif _connected[0] != pulse_server:
                import soundcard.pulseaudio as pa

                old = pa._pulse
                atexit.unregister(old._shutdown)
                with contextlib.suppress(Exception):
                    old._shutdown()
                pa._pulse = pa._PulseAudio()
                atexit.register(pa._pulse._shutdown)
                _connected[0] = pulse_server
        except ImportError as exc:
            if "soundcard" in str(exc) or "cffi" in str(exc):
                raise SpeechError(
                    "The soundcard library is not installed, so no microphone can be used.",
                    'Install it with `pip install "soundcard==0.4.6"`.',
                    kind="unavailable",
                ) from exc
            raise _unloadable(exc) from exc
        except OSError as exc:  # its C declarations (soundcard/*.py.h) or libpulse missing
            _forget_soundcard()
            if isinstance(exc, FileNotFoundError) and str(exc.filename or "").endswith(".py.h"):
                raise SpeechError(
                    f"The soundcard library is incomplete ({exc.filename} is missing), so no "
                    "microphone can be used.",
                    "Reinstall BotPsy (or `pip install --force-reinstall soundcard==0.4.6`).",
                    kind="unavailable",
                ) from exc
            raise _unloadable(exc) from exc
        except Exception as exc:  # soundcard asserts that the connection is made
            _forget_soundcard()
            where = pulse_server or "the session's sound server"
            raise SpeechError(
                f"Cannot reach the sound server ({where}), so no microphone can be used.",
                "Check that PulseAudio or PipeWire is running (`pactl info`).",
                kind="microphone",
            ) from exc
    finally:
        sys.argv = argv
        if saved is None:
            os.environ.pop("PULSE_SERVER", None)
        else:
            os.environ["PULSE_SERVER"] = saved
    module: ModuleType = soundcard
    return module


def microphones(pulse_server: str | None = None) -> list[Microphone]:
    """The microphones the sound server offers (speaker monitors left out). On Linux this asks
    the server once through pulsectl (no lasting connection); elsewhere soundcard's list."""
    if sys.platform.startswith("linux"):
        try:
            import pulsectl

            with pulsectl.Pulse("botpsy-desktop", server=pulse_server) as pulse:
                return [
                    Microphone(str(src.name), str(src.description))
                    for src in pulse.source_list()
                    if src.monitor_of_sink_name is None
                    and src.proplist.get("device.class") != "monitor"
                ]
        except ImportError as exc:
            raise SpeechError(
                f"The sound system's library could not be loaded ({exc}).",
                "Install PulseAudio's client library (Debian/Ubuntu: libpulse0).",
                kind="unavailable",
            ) from exc
        except Exception as exc:  # pulsectl.PulseError and the OS errors under it
            where = pulse_server or "the session's sound server"
            raise SpeechError(
                f"Cannot reach the sound server ({where}) to list the microphones.",
                "Check that PulseAudio or PipeWire is running (`pactl info`).",
                kind="microphone",
            ) from exc
    sc = _soundcard(pulse_server)
    return [Microphone(str(m.id), str(m.name)) for m in sc.all_microphones()]


def _choose(sc: ModuleType, wanted: str | None) -> tuple[Microphone, object]:
    mics = sc.all_microphones()
    if wanted:
        for m in mics:
            if str(m.id) == wanted:
                return Microphone(str(m.id), str(m.name)), m
        names = ", ".join(f"{m.name} ({m.id})" for m in mics) or "none"
        raise SpeechError(
            f"The microphone {wanted!r} chosen in the settings is not connected "
            f"(connected: {names}).",
            "Connect it, or choose another in Settings (voice.microphone; "
            "`botpsy listen --microphones` lists them).",
            kind="microphone",
        )
    if not mics:
        raise SpeechError(
            "No microphone is connected: the sound server lists none.",
            "Connect one (and check that it is not turned off in the sound settings).",
            kind="microphone",
        )
    try:
        default = sc.default_microphone()
    except Exception:
        default = None
    chosen = default if default is not None and not default.isloopback else mics[0]
    return Microphone(str(chosen.id), str(chosen.name)), chosen


def record(
    stop: threading.Event,
    *,
    microphone: str | None = None,
    pulse_server: str | None = None,
    max_seconds: float = 600.0,
    on_level: OnLevel | None = None,
    on_start: Callable[[Microphone], None] | None = None,
) -> Recording:
    """Record from ``microphone`` (None: the default one) until ``stop`` is set or
    ``max_seconds`` have been recorded. The samples stay in memory only."""
    sc = _soundcard(pulse_server)
    mic, device = _choose(sc, microphone)
    limit = round(max_seconds * SAMPLE_RATE)
    blocks: list[Audio] = []
    have = 0
    try:
        with device.recorder(samplerate=SAMPLE_RATE, channels=1, blocksize=BLOCK) as rec:  # type: ignore[attr-defined]
            if on_start is not None:
                on_start(mic)
            while not stop.is_set() and have < limit:
                block = np.asarray(rec.record(BLOCK), dtype=np.float32).reshape(-1)
                blocks.append(block)
                have += len(block)
                if on_level is not None:
                    rms = float(np.sqrt(np.mean(block.astype(np.float64) ** 2)) + 1e-12)
                    on_level(max(-120.0, 20 * float(np.log10(rms))))
    except SpeechError:
        raise
    except Exception as exc:  # the stream failed: unplugged, busy, or access refused
        raise SpeechError(
            f"The microphone {mic.name} could not be recorded from ({exc}).",
            "Check that it is plugged in and that this app may use it (the system's privacy "
            "settings), then try again.",
            kind="microphone",
        ) from exc
    audio = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.float32)
    return Recording(audio[:limit], mic, have >= limit)
