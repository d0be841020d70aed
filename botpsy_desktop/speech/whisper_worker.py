"""The whisper.cpp worker process: loads a ggml model once, then turns audio into words.

It runs apart from the app because whisper.cpp aborts the whole process on some malformed
model files (``ggml_abort`` in ``whisper_model_load``): a bad file then costs this process,
never the window. The protocol is line-delimited JSON on stdin/stdout, each request followed
by its raw float32 samples: ``{"samples": N, "language": "en" | null}`` then 4*N bytes; the
answers are ``{"ready": load_s}`` once, ``{"partial": text}`` per segment, and ``{"text": ...,
"language": ..., "elapsed_s": ...}`` or ``{"error": message}`` per request.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, BinaryIO

import numpy as np


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
                audio, language=language, new_segment_callback=segment, print_progress=False
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
