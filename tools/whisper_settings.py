"""Try whisper.cpp decoding settings on espeak-ng commands: RTF and word error rate of each.

    python tools/whisper_settings.py --model-file FILE [--languages en] [--count 20]
        [--threads 1] --try '{"margin": 1.0, "suppress_nst": true}' --try '{"margin": null}' ...

Each ``--try`` is a JSON object of pywhispercpp decoding parameters (``temperature_inc``,
``suppress_nst``, ``no_timestamps``, ...) plus ``margin``: seconds of audio read past each clip's
end through ``audio_ctx`` (null: whisper.cpp's whole 30-second window, its default). The model
runs in this process, on ``--threads`` threads; the RTF is given as wall time and as CPU time
per second of audio over the threads (on a shared machine the wall time says more about the
other work there; with one thread the CPU time is the work itself, with more it also counts
ggml's threads spinning while they wait for each other). This is how the shipped settings in
botpsy_desktop/speech/whisper_worker.py were chosen (docs/PERFORMANCE.md, "Speech to text");
tools/bench_speech.py measures the shipped recogniser itself.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_speech as bench

from botpsy_desktop.speech.recognizer import SAMPLE_RATE
from botpsy_desktop.speech.replay import read_wav


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def run(model: Any, margin: float | None, audio: Any, language: str) -> tuple[str, float, float]:
    """The words, wall seconds and CPU seconds of one recognition."""
    ctx = 0 if margin is None else math.ceil((len(audio) / SAMPLE_RATE + margin) * 50)
    wall, cpu = time.monotonic(), cpu_s()
    segments = model.transcribe(audio, language=language, audio_ctx=min(ctx, 1500))
    text = "".join(str(s.text) for s in segments).strip()
    return text, time.monotonic() - wall, cpu_s() - cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-file", required=True, help="a whisper.cpp ggml model")
    p.add_argument("--languages", default="en")
    p.add_argument("--count", type=int, default=20, help="commands per language")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--try", dest="tries", action="append", required=True, metavar="JSON")
    args = p.parse_args()
    from pywhispercpp.model import Model

    languages = args.languages.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        clips: dict[str, list[tuple[str, Any]]] = {}
        five: dict[str, Any] = {}
        for language in languages:
            clips[language] = []
            for i, text in enumerate(bench.commands(language, args.count)):
                wav = Path(tmp) / f"{language}{i}.wav"
                bench.speak(text, language, wav)
                clips[language].append((text, read_wav(wav)))
            five[language] = bench.five_second_command(language, Path(tmp) / "five.wav")
        for raw in args.tries:
            settings = json.loads(raw)
            margin = settings.pop("margin", None)
            model = Model(
                args.model_file,
                redirect_whispercpp_logs_to=None,
                n_threads=args.threads,
                print_progress=False,
                print_realtime=False,
                no_context=True,
                **settings,
            )

            result: dict[str, Any] = {"try": raw, "threads": args.threads}
            for language in languages:
                seconds = len(five[language]) / SAMPLE_RATE
                runs = [run(model, margin, five[language], language) for _ in range(3)]
                errors = words = 0
                for text, audio in clips[language]:
                    ref = bench.normalise(text, language)
                    got = run(model, margin, audio, language)[0]
                    errors += bench.edit_distance(ref, bench.normalise(got, language))
                    words += len(ref)
                result[language] = {
                    "five_s_command_s": round(seconds, 2),
                    "wall_rtf": round(statistics.median(r[1] for r in runs) / seconds, 3),
                    "cpu_rtf": round(
                        statistics.median(r[2] for r in runs) / seconds / args.threads, 3
                    ),
                    "commands": len(clips[language]),
                    "wer": round(errors / max(words, 1), 4),
                }
            result["load_average"] = [round(x, 1) for x in os.getloadavg()]
            print(json.dumps(result, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
