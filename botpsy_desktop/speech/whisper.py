"""Speech to text with whisper.cpp (through pywhispercpp) in a worker process, loaded lazily."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

from botpsy_desktop.speech.recognizer import SAMPLE_RATE, Audio, OnText, Recognition, SpeechError


def worker_command(model: Path, threads: int) -> list[str]:
    if getattr(sys, "frozen", False):  # the installers' program (packaging/entry_*.py)
        return [sys.executable, "--speech-worker", str(model), str(threads)]
    return [sys.executable, "-m", "botpsy_desktop.speech.whisper_worker", str(model), str(threads)]


def default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class WhisperRecognizer:
    """whisper.cpp behind the Recognizer interface. Nothing is loaded until the first
    :meth:`transcribe`: then a worker process starts and loads ``model`` (an already verified
    file: see SpeechModels.require) and keeps it for the next requests until :meth:`close`."""

    name = "whisper.cpp"
    binding = "pywhispercpp"
    """The Python distribution the worker imports (checked before it is started)."""
    install = 'pip install "pywhispercpp==1.5.1"'

    def command(self) -> list[str]:
        """The worker process's command line (the protocol: whisper_worker.py)."""
        return worker_command(self.model, self.threads)

    def __init__(self, model: Path, *, threads: int | None = None, pull_hint: str = "") -> None:
        self.model = model
        self.threads = threads or default_threads()
        self.pull_hint = pull_hint
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None
        self._lock = threading.Lock()
        self.load_s = 0.0

    @property
    def loaded(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _died(self, proc: subprocess.Popen[bytes], while_: str) -> SpeechError:
        code = proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        detail = ""
        if self._stderr is not None:
            self._stderr.seek(0)
            lines = self._stderr.read().decode("utf-8", "replace").splitlines()
            # whisper.cpp's own complaints, not the debugger's backtrace ggml_abort prints
            said = [ln for ln in lines if ln.startswith(("whisper_", "ggml", "GGML", "error"))]
            detail = f" ({said[-1].strip()[:200]})" if said else ""
        self._proc = None
        if while_ == "loading":
            return SpeechError(
                f"{self.name} could not load the speech model {self.model.name}: its process "
                f"ended with code {code}{detail}. The file is damaged or not a {self.name} model.",
                self.pull_hint or "Download the model again.",
                kind="model_damaged",
            )
        return SpeechError(
            f"{self.name} stopped while recognising (code {code}){detail}.",
            "Try again; if it keeps failing, download the speech model again.",
            kind="engine",
        )

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        try:
            import importlib.util

            if importlib.util.find_spec(self.binding) is None and not getattr(sys, "frozen", False):
                raise ImportError
        except ImportError:
            raise SpeechError(
                f"{self.name}'s Python binding ({self.binding}) is not installed.",
                f"Install it with `{self.install}`.",
                kind="unavailable",
            ) from None
        import tempfile

        if self._stderr is not None:
            self._stderr.close()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the worker
        begin = time.monotonic()
        proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self._proc = proc
        ready = self._read(proc, "loading")
        if "ready" not in ready:
            raise SpeechError(f"{self.name}'s worker answered {ready!r} instead of starting.")
        self.load_s = time.monotonic() - begin
        return proc

    def _read(self, proc: subprocess.Popen[bytes], while_: str) -> dict[str, Any]:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise self._died(proc, while_)
        data: dict[str, Any] = json.loads(line)
        return data

    def transcribe(
        self, audio: Audio, *, language: str | None = None, on_text: OnText | None = None
    ) -> Recognition:
        with self._lock:
            begin = time.monotonic()
            first = not self.loaded
            proc = self._start()
            samples = np.ascontiguousarray(audio, dtype=np.float32)
            assert proc.stdin is not None
            try:
                header = {"samples": int(samples.size), "language": language}
                proc.stdin.write(json.dumps(header).encode() + b"\n")
                proc.stdin.write(samples.tobytes())
                proc.stdin.flush()
            except BrokenPipeError:
                raise self._died(proc, "recognising") from None
            while True:
                answer = self._read(proc, "recognising")
                if "partial" in answer:
                    if on_text is not None:
                        on_text(str(answer["partial"]))
                    continue
                if "error" in answer:
                    raise SpeechError(f"{self.name} failed: {answer['error']}", kind="engine")
                return Recognition(
                    text=str(answer["text"]),
                    language=answer.get("language"),
                    audio_s=samples.size / SAMPLE_RATE,
                    elapsed_s=time.monotonic() - begin,
                    load_s=self.load_s if first else 0.0,
                    engine=self.name,
                    audio_ctx=answer.get("audio_ctx"),
                )

    def close(self) -> None:
        with self._lock:
            proc, self._proc = self._proc, None
            if proc is not None:
                if proc.stdin is not None:
                    proc.stdin.close()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
            if self._stderr is not None:
                self._stderr.close()
                self._stderr = None
