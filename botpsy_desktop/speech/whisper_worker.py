"""The whisper.cpp worker process: loads a ggml model once, then turns audio into words.

It runs apart from the app because whisper.cpp aborts the whole process on some malformed
model files (``ggml_abort`` in ``whisper_model_load``): a bad file then costs this process,
never the window. The protocol is line-delimited JSON on stdin/stdout, each request followed
by its raw float32 samples: ``{"samples": N, "language": "en" | null}`` then 4*N bytes; the
answers are ``{"ready": load_s}`` once, ``{"partial": text}`` per segment, and ``{"text": ...,
"language": ..., "elapsed_s": ..., "audio_ctx": ...}`` or ``{"error": message}`` per request.

Whisper's encoder reads a 30-second window; whisper.cpp pads shorter audio with silence and
encodes the whole window unless ``audio_ctx`` says how much of it to read (50 encoder positions
a second). A spoken command lasts a few seconds, so each request reads only its own length plus
a margin (:func:`audio_ctx_for`): this cut the CPU time of a 5.8 s command about fourfold, and
of a 2 s one fivefold, at a word error rate no worse (docs/PERFORMANCE.md, "Speech to text").
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, BinaryIO

import numpy as np

POSITIONS_PER_S = 50
"""Whisper's encoder positions per second of audio (1500 for its 30-second window)."""
WINDOW_POSITIONS = 1500
CONTEXT_MARGIN_S = 1.0
"""Audio read past a clip's end: less than a second cut words off at the end (measured)."""
SHORTEST_CONTEXT_S = 5.0
"""The least audio read, however short the clip. Reading less after a clip under a second long
("stop", "hello": 3 or 4 s read) left this whisper.cpp 3-4 times slower on every longer clip
after it (a 5.8 s command: 10-25 CPU s on one thread instead of 3.5, once 78 s); with 5 s or more
read it never did in the probes (the cause inside whisper.cpp is not known)."""


def audio_ctx_for(samples: int, sample_rate: int = 16_000) -> int:
    """How many encoder positions to read for a clip of ``samples``: its length plus a margin,
    or 0 (whisper.cpp's whole window) when that would reach the window's end anyway."""
    seconds = max(samples / sample_rate, SHORTEST_CONTEXT_S) + CONTEXT_MARGIN_S
    positions = math.ceil(seconds * POSITIONS_PER_S)
    return 0 if positions >= WINDOW_POSITIONS else positions


def _send(out: BinaryIO, data: dict[str, Any]) -> None:
    out.write(json.dumps(data, ensure_ascii=False).encode("utf-8") + b"\n")
    out.flush()


def _read_exact(inp: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = inp.read(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def serve(model_path: str, threads: int, inp: BinaryIO, out: BinaryIO) -> int:
    from pywhispercpp.model import Model

    start = time.monotonic()
    # a path, never a name: pywhispercpp downloads a model it is given by name
    model = Model(
        model_path,
        redirect_whispercpp_logs_to=None,
        n_threads=threads,
        print_progress=False,
        print_realtime=False,
        no_context=True,
        single_segment=False,
        # no "[MUSIC]", "(applause)" or "♪" in a spoken request (they were heard in commands)
        suppress_nst=True,
        # the temperature fallback stays (temperature_inc 0.2): without it one command in twenty
        # looped until the token limit ("Remind me to call them...", 140 word errors)
    )
    _send(out, {"ready": round(time.monotonic() - start, 3)})
    while True:
        line = inp.readline()
        if not line:
            return 0
        request = json.loads(line)
        audio = np.frombuffer(_read_exact(inp, 4 * int(request["samples"])), dtype=np.float32)
        language = request.get("language") or "auto"
        begin = time.monotonic()
        parts: list[str] = []

        def segment(seg: Any, parts: list[str] = parts) -> None:
            parts.append(str(seg.text))
            _send(out, {"partial": "".join(parts).strip()})

        try:
            segments = model.transcribe(
                audio,
                language=language,
                new_segment_callback=segment,
                print_progress=False,
                audio_ctx=audio_ctx_for(audio.size),
            )
        except Exception as exc:  # reported to the app, which says what happened
            _send(out, {"error": f"{type(exc).__name__}: {exc}"})
            continue
        text = "".join(str(s.text) for s in segments).strip()
        _send(
            out,
            {
                "text": text,
                "language": None if language == "auto" else language,
                "elapsed_s": round(time.monotonic() - begin, 3),
                # what whisper.cpp was given, read back from its parameters
                "audio_ctx": int(model.get_params()["audio_ctx"]),
            },
        )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print(
            "usage: python -m botpsy_desktop.speech.whisper_worker MODEL THREADS", file=sys.stderr
        )
        return 2
    # the answers get their own copy of stdout, and fd 1 goes to stderr: whatever whisper.cpp
    # or ggml print natively (a backtrace on abort, say) can then never garble the protocol
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return serve(args[0], int(args[1]), sys.stdin.buffer, answers)


if __name__ == "__main__":
    sys.exit(main())
