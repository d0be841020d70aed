"""Spoken replies: the final answer read aloud by espeak-ng, on a thread, stoppable at any time.

Engine: the ``espeak-ng`` program (Debian/Ubuntu/Fedora ``espeak-ng``, Homebrew ``espeak-ng``),
run once per answer with the text on stdin and ``--stdout``, which writes a WAV we play
ourselves. Why its command line and not a binding: the maintained Python bindings either drive
the system's own audio output with no choice of device (pyttsx3's espeak driver, ``espeakng``
1.0, which itself calls the program) or load the C library into this process (``espeakng-loader``
ships one, with ctypes glue we would have to write and keep): a crash in a native library
should cost a worker process, never the window (docs: architecture, "whatever can crash
natively runs in a process the app can lose"). ``piper-tts`` sounds better but downloads its
voices at run time from Hugging Face. The WAV is played through the same sound library as the
microphone (``soundcard``: PulseAudio/PipeWire, CoreAudio, WASAPI), so the output device is
the one chosen in the settings (``voice.speaker``), and playback stops within 100 ms.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import threading
import wave
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from botpsy_desktop.core.config import Config, VoiceSettings
from botpsy_desktop.speech.recognizer import SpeechError

PROGRAM = "espeak-ng"
CHUNK_S = 0.1
"""Playback is written in pieces this long; a stop is noticed between two of them."""

OnDone = Callable[["SpeechError | None"], None]


def install_hint() -> str:
    if sys.platform == "darwin":
        return "Install espeak-ng (`brew install espeak-ng`), or turn spoken replies off."
    if sys.platform == "win32":
        return (
            "Install eSpeak NG (github.com/espeak-ng/espeak-ng/releases) and put espeak-ng on "
            "PATH, or turn spoken replies off."
        )
    return (
        "Install espeak-ng (Debian/Ubuntu: `sudo apt install espeak-ng`; Fedora: `sudo dnf "
        "install espeak-ng`), or turn spoken replies off (voice.speak_replies)."
    )


def engine_path() -> str:
    """The espeak-ng program, or SpeechError saying what to install."""
    path = shutil.which(PROGRAM)
    if path is None:
        raise SpeechError(
            "Spoken replies need espeak-ng, which is not installed (no espeak-ng program on "
            "PATH); the answer is shown, not spoken.",
            install_hint(),
            kind="unavailable",
        )
    return path


_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_URL = re.compile(r"\bhttps?://\S+")
_TAG = re.compile(r"<[^>\n]{1,200}>")
_MARKS = re.compile(r"(\*\*|__|\*|`|~~|^\s{0,3}#{1,6}\s*|^\s*[-+*]\s+|^\s*>\s?|\|)", re.M)


def speakable(text: str) -> str:
    """The words of an answer as they should be heard: Markdown marks, code blocks, links'
    addresses, HTML tags and the model's tool-call markup left out."""
    text = re.sub(r"<tool_call>.*?(</tool_call>|$)", " ", text, flags=re.S)
    text = re.sub(r"<think>.*?(</think>|$)", " ", text, flags=re.S)
    text = _CODE_BLOCK.sub(" ", text)
    text = _LINK.sub(r"\1", text)
    text = _URL.sub("a link", text)
    text = _TAG.sub(" ", text)
    text = _MARKS.sub(" ", text)
    text = re.sub(r"[ \t]+", " ", text)
    text = re.sub(r"\s*\n\s*", "\n", text)
    return text.strip()


def parse_wav(data: bytes) -> tuple[NDArray[np.float32], int]:
    """espeak-ng's WAV from a pipe (16-bit mono; its size fields may be placeholders) as float32
    samples in [-1, 1] and the sample rate."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise SpeechError(f"{PROGRAM} did not write a WAV.", "Check that espeak-ng works.")
    pos, rate, bits = 12, 22050, 16
    while pos + 8 <= len(data):
        tag, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        body = pos + 8
        if tag == b"fmt ":
            _fmt, _channels, rate = struct.unpack("<HHI", data[body : body + 8])
            bits = struct.unpack("<H", data[body + 14 : body + 16])[0]
        elif tag == b"data":
            pcm = data[body:]  # to the end: a pipe's size field is not the real size
            if bits != 16:
                raise SpeechError(f"{PROGRAM} wrote {bits}-bit audio; 16-bit was expected.")
            pcm = pcm[: len(pcm) - len(pcm) % 2]
            samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
            return samples, int(rate)
        pos = body + size + (size & 1)
    return np.zeros(0, dtype=np.float32), int(rate)


@dataclass(frozen=True)
class Loudspeaker:
    id: str
    name: str


def loudspeakers(pulse_server: str | None = None) -> list[Loudspeaker]:
    """The output devices the sound server offers (on Linux asked once through pulsectl)."""
    if sys.platform.startswith("linux"):
        try:
            import pulsectl

            with pulsectl.Pulse("botpsy-desktop", server=pulse_server) as pulse:
                return [Loudspeaker(str(s.name), str(s.description)) for s in pulse.sink_list()]
        except ImportError as exc:
            raise SpeechError(
                f"The sound system's library could not be loaded ({exc}).",
                "Install PulseAudio's client library (Debian/Ubuntu: libpulse0).",
                kind="unavailable",
            ) from exc
        except Exception as exc:  # pulsectl.PulseError and the OS errors under it
            where = pulse_server or "the session's sound server"
            raise SpeechError(
                f"Cannot reach the sound server ({where}) to list the loudspeakers.",
                "Check that PulseAudio or PipeWire is running (`pactl info`).",
                kind="microphone",
            ) from exc
    from botpsy_desktop.speech.capture import _soundcard

    return [Loudspeaker(str(s.id), str(s.name)) for s in _soundcard(pulse_server).all_speakers()]


class Player(Protocol):
    """Where synthesised speech goes: the sound server's output device, or a file."""

    def play(self, samples: NDArray[np.float32], rate: int, stop: threading.Event) -> None: ...


class DevicePlayer:
    """Plays through the sound server (``soundcard``) on ``speaker`` (None: the default)."""

    def __init__(self, speaker: str | None, pulse_server: str | None) -> None:
        self.speaker, self.pulse_server = speaker, pulse_server

    def play(self, samples: NDArray[np.float32], rate: int, stop: threading.Event) -> None:
        from botpsy_desktop.speech.capture import _soundcard

        sc = _soundcard(self.pulse_server)
        if self.speaker:
            found = [s for s in sc.all_speakers() if str(s.id) == self.speaker]
            if not found:
                names = ", ".join(f"{s.name} ({s.id})" for s in sc.all_speakers()) or "none"
                raise SpeechError(
                    f"The loudspeaker {self.speaker!r} chosen for spoken replies is not "
                    f"connected (connected: {names}).",
                    "Connect it, or choose another in Settings (voice.speaker).",
                    kind="microphone",
                )
            device = found[0]
        else:
            device = sc.default_speaker()
        step = max(1, int(rate * CHUNK_S))
        try:
            with device.player(samplerate=rate, channels=1, blocksize=step) as out:
                for start in range(0, len(samples), step):
                    if stop.is_set():
                        return
                    out.play(samples[start : start + step])
        except SpeechError:
            raise
        except Exception as exc:  # the stream failed: unplugged, or the server went away
            raise SpeechError(
                f"The reply could not be played on {device.name} ({exc}).",
                "Check the loudspeaker (Settings: voice.speaker) and the sound server.",
                kind="engine",
            ) from exc


class WavPlayer:
    """Writes the reply to a WAV file instead of a loudspeaker (`botpsy listen --speak-to`),
    stopping where a loudspeaker would have stopped."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def play(self, samples: NDArray[np.float32], rate: int, stop: threading.Event) -> None:
        step = max(1, int(rate * CHUNK_S))
        try:
            with wave.open(str(self.path), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(rate)
                for start in range(0, len(samples), step):
                    if stop.is_set():
                        return
                    piece = np.clip(samples[start : start + step], -1.0, 1.0)
                    w.writeframes((piece * 32767).astype("<i2").tobytes())
        except OSError as exc:
            raise SpeechError(
                f"The spoken reply could not be written to {self.path}: {exc.strerror or exc}.",
                "Choose a file in a folder you can write to.",
                kind="engine",
            ) from exc


@dataclass
class _Job:
    stop: threading.Event
    thread: threading.Thread | None = None
    proc: subprocess.Popen[bytes] | None = None


class ReplySpeaker:
    """Reads answers aloud. :meth:`say` returns at once: synthesis and playback run on a
    thread of their own; a new :meth:`say` or :meth:`stop` ends the reply being spoken.
    The settings are read at each :meth:`say`, so a change in Settings applies to the next
    answer."""

    def __init__(
        self, config: Config, pulse_server: str | None = None, player: Player | None = None
    ) -> None:
        self.config, self.pulse_server = config, pulse_server
        self.output = player
        """Where replies go; None: the loudspeaker of the settings (voice.speaker)."""
        self._job: _Job | None = None
        self._lock = threading.Lock()

    @property
    def settings(self) -> VoiceSettings:
        return self.config.voice

    @property
    def enabled(self) -> bool:
        return bool(self.settings.speak_replies)

    @property
    def speaking(self) -> bool:
        job = self._job
        return job is not None and job.thread is not None and job.thread.is_alive()

    def player(self) -> Player:
        return self.output or DevicePlayer(self.settings.speaker, self.pulse_server)

    def synthesise(self, text: str) -> tuple[NDArray[np.float32], int]:
        """``text`` as speech (the settings' voice and rate): samples and their rate."""
        return self._synthesise(text, threading.Event(), None)

    def _synthesise(
        self, text: str, stop: threading.Event, job: _Job | None
    ) -> tuple[NDArray[np.float32], int]:
        program = engine_path()
        command = [
            program,
            "-v",
            self.settings.reply_voice,
            "-s",
            str(self.settings.reply_rate),
            "-b",
            "1",  # the text is UTF-8
            "--stdout",
        ]
        proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        if job is not None:
            job.proc = proc
        if stop.is_set():
            proc.kill()
        out, err = proc.communicate(text.encode("utf-8"), timeout=120)
        if stop.is_set():
            return np.zeros(0, dtype=np.float32), 22050
        if proc.returncode != 0 or not out:
            said = err.decode("utf-8", "replace").strip().splitlines()
            detail = f": {said[-1][:200]}" if said else ""
            raise SpeechError(
                f"espeak-ng could not speak the reply (exit code {proc.returncode}){detail}.",
                f"Check the voice {self.settings.reply_voice!r} (`espeak-ng --voices` lists "
                "them; Settings: voice.reply_voice).",
                kind="engine",
            )
        return parse_wav(out)

    def say(self, text: str, on_done: OnDone | None = None) -> bool:
        """Speak ``text`` (an answer: its markup is left out) in the background, stopping what
        is being spoken. False when there is nothing to say. ``on_done`` is called on the
        speaking thread with None, or the SpeechError that kept the reply from being heard."""
        words = speakable(text)
        self.stop()
        if not words:
            return False
        job = _Job(threading.Event())
        job.thread = threading.Thread(
            target=self._run, args=(words, job, on_done), name="spoken-reply", daemon=True
        )
        with self._lock:
            self._job = job
        job.thread.start()
        return True

    def _run(self, words: str, job: _Job, on_done: OnDone | None) -> None:
        error: SpeechError | None = None
        try:
            samples, rate = self._synthesise(words, job.stop, job)
            if not job.stop.is_set():
                self.player().play(samples, rate, job.stop)
        except SpeechError as exc:
            error = exc
        except Exception as exc:  # never lose the app to a failed reply
            error = SpeechError(f"The reply could not be spoken: {exc}", kind="engine")
        if on_done is not None:
            on_done(error)

    def stop(self) -> None:
        """End the reply being spoken, if any (at once: it does not wait for the thread)."""
        with self._lock:
            job, self._job = self._job, None
        if job is not None:
            job.stop.set()
            proc = job.proc
            if proc is not None and proc.poll() is None:
                proc.kill()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the reply has been spoken; False when it is still going at ``timeout``."""
        job = self._job
        if job is None or job.thread is None:
            return True
        job.thread.join(timeout)
        return not job.thread.is_alive()

    def close(self) -> None:
        job = self._job
        self.stop()
        if job is not None and job.thread is not None:
            job.thread.join(5)
