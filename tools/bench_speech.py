"""Speech-to-text benchmark: real-time factor, latency, engine memory and word error rate of
the configured speech model on commands synthesised with espeak-ng.

    python tools/bench_speech.py [--home DIR] [--model whisper-base] [--languages en,de,es,fr]
                                 [--count 100] [--threads 2] [--json FILE]

It needs the speech model installed (`botpsy model pull whisper-base`) and espeak-ng. With no
model it says so and exits with 2: nothing here downloads anything. The audio goes straight to
the recogniser (the microphone is measured by the tests, not here). Synthetic speech is cleaner
and more regular than a person's, so its WER is a floor, not what people will see.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop.app import build_app  # noqa: E402
from botpsy_desktop.speech.recognizer import SpeechError  # noqa: E402
from botpsy_desktop.speech.replay import read_wav  # noqa: E402
from botpsy_desktop.speech.whisper import WhisperRecognizer  # noqa: E402

# Commands a person says to the assistant, per language: templates x fillers, numbers spelled
# out as espeak-ng says them (the recogniser's digits are turned back into these words).
COMMANDS: dict[str, tuple[list[str], dict[str, list[str]]]] = {
    "en": (
        [
            "set a timer for {n} minutes",
            "wake me up at {n} o'clock tomorrow",
            "what is the weather in {city} tomorrow",
            "play some {genre} music",
            "remind me to call {who} in {n} minutes",
            "turn the volume down to {n} percent",
            "read my latest email from {who}",
            "what is on my calendar on {day}",
            "find the document about {topic}",
            "send a message to {who} saying I am late",
        ],
        {
            "n": ["five", "ten", "twenty", "seven", "three", "eight", "nine", "six"],
            "city": ["Paris", "London", "Berlin", "Madrid", "Rome", "Vienna", "Dublin", "Lisbon"],
            "genre": ["jazz", "classical", "rock", "piano", "blues", "folk"],
            "who": ["Anna", "my mother", "Peter", "the doctor", "Maria", "my brother"],
            "day": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
            "topic": ["the budget", "the garden", "taxes", "the holiday", "the car", "the house"],
        },
    ),
    "de": (
        [
            "stelle einen Timer auf {n} Minuten",
            "wecke mich morgen um {n} Uhr",
            "wie wird das Wetter morgen in {city}",
            "spiele etwas {genre}",
            "erinnere mich in {n} Minuten daran, {who} anzurufen",
            "stelle die Lautstärke auf {n} Prozent",
            "lies meine letzte E-Mail von {who}",
            "was steht am {day} in meinem Kalender",
            "finde das Dokument über {topic}",
            "schreibe {who}, dass ich mich verspäte",
        ],
        {
            "n": ["fünf", "zehn", "zwanzig", "sieben", "drei", "acht", "neun", "sechs"],
            "city": ["Paris", "London", "Berlin", "Madrid", "Rome", "Vienna", "Dublin", "Lisbon"],
            "genre": ["Jazz", "Klassik", "Rock", "Klaviermusik", "Blues", "Volksmusik"],
            "who": ["Anna", "meine Mutter", "Peter", "den Arzt", "Maria", "meinen Bruder"],
            "day": [
                "Montag",
                "Dienstag",
                "Mittwoch",
                "Donnerstag",
                "Freitag",
                "Samstag",
                "Sonntag",
            ],
            "topic": [
                "das Budget",
                "den Garten",
                "die Steuern",
                "den Urlaub",
                "das Auto",
                "das Haus",
            ],
        },
    ),
    "es": (
        [
            "pon un temporizador de {n} minutos",
            "despiértame mañana a las {n}",
            "qué tiempo hará mañana en {city}",
            "pon música {genre}",
            "recuérdame llamar a {who} dentro de {n} minutos",
            "baja el volumen al {n} por ciento",
            "lee mi último correo de {who}",
            "qué tengo en el calendario el {day}",
            "busca el documento sobre {topic}",
            "escribe a {who} que llego tarde",
        ],
        {
            "n": ["cinco", "diez", "veinte", "siete", "tres", "ocho", "nueve", "seis"],
            "city": ["París", "Londres", "Berlín", "Madrid", "Roma", "Viena", "Dublín", "Lisboa"],
            "genre": ["jazz", "clásica", "rock", "de piano", "blues", "folk"],
            "who": ["Ana", "mi madre", "Pedro", "el médico", "María", "mi hermano"],
            "day": ["lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo"],
            "topic": [
                "el presupuesto",
                "el jardín",
                "los impuestos",
                "las vacaciones",
                "el coche",
                "la casa",
            ],
        },
    ),
    "fr": (
        [
            "mets un minuteur de {n} minutes",
            "réveille-moi demain à {n} heures",
            "quel temps fera-t-il demain à {city}",
            "mets de la musique {genre}",
            "rappelle-moi d'appeler {who} dans {n} minutes",
            "baisse le volume à {n} pour cent",
            "lis mon dernier courriel de {who}",
            "qu'est-ce que j'ai dans mon agenda {day}",
            "trouve le document sur {topic}",
            "écris à {who} que je suis en retard",
        ],
        {
            "n": ["cinq", "dix", "vingt", "sept", "trois", "huit", "neuf", "six"],
            "city": [
                "Paris",
                "Londres",
                "Berlin",
                "Madrid",
                "Rome",
                "Vienne",
                "Dublin",
                "Lisbonne",
            ],
            "genre": ["jazz", "classique", "rock", "de piano", "blues", "folk"],
            "who": ["Anne", "ma mère", "Pierre", "le médecin", "Marie", "mon frère"],
            "day": ["lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"],
            "topic": [
                "le budget",
                "le jardin",
                "les impôts",
                "les vacances",
                "la voiture",
                "la maison",
            ],
        },
    ),
}
DIGITS = {
    lang: dict(zip(["3", "5", "6", "7", "8", "9", "10", "20"], words, strict=True))
    for lang, words in {
        "en": ["three", "five", "six", "seven", "eight", "nine", "ten", "twenty"],
        "de": ["drei", "fünf", "sechs", "sieben", "acht", "neun", "zehn", "zwanzig"],
        "es": ["tres", "cinco", "seis", "siete", "ocho", "nueve", "diez", "veinte"],
        "fr": ["trois", "cinq", "six", "sept", "huit", "neuf", "dix", "vingt"],
    }.items()
}
VOICES = {"en": "en-us", "de": "de", "es": "es", "fr": "fr"}


def commands(language: str, count: int) -> list[str]:
    """``count`` distinct commands: each template's fillings, taken from the templates in turn."""
    templates, fillers = COMMANDS[language]
    variants = []
    for template in templates:
        fields = [f for f in fillers if "{" + f + "}" in template]
        combos = itertools.product(*(fillers[f] for f in fields))
        variants.append([template.format(**dict(zip(fields, c, strict=True))) for c in combos])
    out: list[str] = []
    for i in range(max(len(v) for v in variants)):
        out.extend(v[i] for v in variants if i < len(v))
    return out[:count]


def normalise(text: str, language: str) -> list[str]:
    text = unicodedata.normalize("NFC", text.lower())
    text = re.sub(r"[^\w\s'-]", " ", text).replace("-", " ")
    words = []
    for w in text.split():
        w = w.strip("'")
        words.extend(DIGITS[language].get(w, w).split())
    return words


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--home", help="the profile whose speech model is used (default: yours)")
    p.add_argument("--model", default=None, help="speech model id (default: voice.model)")
    p.add_argument("--languages", default="en,de,es,fr")
    p.add_argument("--count", type=int, default=100, help="commands per language")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args()
    app = build_app(args.home)
    try:
        voice = app.voice()
        model_id = args.model or app.config.voice.model
        try:
            path = voice.models.require(model_id)
        except SpeechError as exc:
            print(f"bench_speech: {exc}", file=sys.stderr)
            return 2
        rec = WhisperRecognizer(path, threads=args.threads)
        report: dict[str, Any] = {"model": model_id, "threads": args.threads, "languages": {}}
        with tempfile.TemporaryDirectory() as tmp:
            wav = Path(tmp) / "c.wav"
            warm = time.monotonic()
            speak("hello", "en", wav)
            first = rec.transcribe(read_wav(wav), language="en")
            report["load_s"] = round(rec.load_s, 2)
            report["first_request_s"] = round(time.monotonic() - warm, 2)
            del first
            for language in args.languages.split(","):
                errors = words = 0
                rtfs, latencies, audio_s = [], [], []
                for text in commands(language, args.count):
                    speak(text, language, wav)
                    audio = read_wav(wav)
                    got = rec.transcribe(audio, language=language)
                    ref = normalise(text, language)
                    errors += edit_distance(ref, normalise(got.text, language))
                    words += len(ref)
                    rtfs.append(got.elapsed_s / got.audio_s)
                    latencies.append(got.elapsed_s)
                    audio_s.append(got.audio_s)
                report["languages"][language] = {
                    "commands": len(latencies),
                    "wer": round(errors / max(words, 1), 4),
                    "rtf_mean": round(statistics.fmean(rtfs), 3),
                    "audio_s_mean": round(statistics.fmean(audio_s), 2),
                    "latency_s_p50": round(statistics.median(latencies), 3),
                    "latency_s_max": round(max(latencies), 3),
                }
                print(language, report["languages"][language], flush=True)
        proc = rec._proc
        report["engine_peak_rss_mib"] = peak_rss_mib(proc.pid) if proc else None
        rec.close()
        print(json.dumps(report, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        return 0
    finally:
        app.close()


def speak(text: str, language: str, wav: Path) -> None:
    subprocess.run(["espeak-ng", "-v", VOICES[language], "-w", str(wav), text], check=True)


if __name__ == "__main__":
    sys.exit(main())
