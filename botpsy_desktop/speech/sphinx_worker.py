"""The PocketSphinx worker process: loads the acoustic model once, then turns audio into words.

Same line-delimited JSON protocol as whisper_worker.py (``{"ready": load_s}``, then per
request ``{"samples": N, "language": ...}`` and 4*N bytes of float32 in, ``{"partial": ...}``
and ``{"text": ...}`` or ``{"error": ...}`` out), so the app drives both engines through one
client (WhisperRecognizer). PocketSphinx is a C library: a bad model file costs this process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from botpsy_desktop.speech.whisper_worker import _read_exact, _send

CHUNK = 16_000
"""One second of audio per decoder call: the words so far are reported after each."""


def serve(model_dir: str, inp: BinaryIO, out: BinaryIO) -> int:
    from pocketsphinx import Decoder

    start = time.monotonic()
    root = Path(model_dir)
    decoder = Decoder(
        hmm=str(root / "en-us"),
        lm=str(root / "en-us.lm.bin"),
        dict=str(root / "cmudict-en-us.dict"),
        samprate=16_000,
        loglevel="FATAL",
    )
    _send(out, {"ready": round(time.monotonic() - start, 3)})
    while True:
        line = inp.readline()
        if not line:
            return 0
        request = json.loads(line)
        audio = np.frombuffer(_read_exact(inp, 4 * int(request["samples"])), dtype=np.float32)
        begin = time.monotonic()
        pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2")
        try:
            decoder.start_utt()
            shown = ""
            for at in range(0, len(pcm), CHUNK):
                decoder.process_raw(pcm[at : at + CHUNK].tobytes(), full_utt=False)
                hyp: Any = decoder.hyp()
                if hyp is not None and hyp.hypstr and hyp.hypstr != shown:
                    shown = str(hyp.hypstr)
                    _send(out, {"partial": shown})
            decoder.end_utt()
            hyp = decoder.hyp()
        except Exception as exc:  # reported to the app, which says what happened
            _send(out, {"error": f"{type(exc).__name__}: {exc}"})
            continue
        _send(
            out,
            {
                "text": str(hyp.hypstr) if hyp is not None else "",
                "language": "en",
                "elapsed_s": round(time.monotonic() - begin, 3),
            },
        )


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m botpsy_desktop.speech.sphinx_worker MODEL_DIR", file=sys.stderr)
        return 2
    # as in whisper_worker: native output goes to stderr, never into the protocol
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return serve(args[0], sys.stdin.buffer, answers)


if __name__ == "__main__":
    sys.exit(main())
