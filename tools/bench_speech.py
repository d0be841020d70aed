"""Speech-to-text benchmark: real-time factor, latency, engine memory and word error rate of a
speech engine on commands synthesised with espeak-ng, and whether the recognised words reach the
same tools as the words spoken.

    python tools/bench_speech.py [--engine whisper.cpp|pocketsphinx|faster-whisper]
                                 [--home DIR] [--model whisper-base] [--ct2-model DIR]
                                 [--languages en,de,es,fr] [--count 100] [--threads 2]
                                 [--commands FILE] [--rate WPM] [--json FILE]
    python tools/bench_speech.py --recorded [--threads 2] [--json FILE]

Engines: ``whisper.cpp`` (the default engine; its model from `botpsy model pull`, 2 exits if
it is not installed: nothing here downloads anything), ``pocketsphinx`` (the second engine, US
English, model inside the pocketsphinx wheel), and ``faster-whisper``: NOT an engine of the app,
a reference measurement of the same Whisper weights through CTranslate2 where no whisper.cpp
model can be had; it needs the faster-whisper package (not a dependency of the app: install it
in a separate environment) and a CTranslate2 Whisper folder (``--ct2-model``). Every report
names the engine and model that gave its numbers.

The commands are built in for English, German, Spanish and French (templates times fillers:
timers, alarms, weather, music, reminders, volume, mail, calendar, files, messages); ``--commands
FILE`` reads your own instead, one a line (blank lines and lines starting with # skipped), for
the one language given with ``--languages``.

``--recorded`` measures people's recorded voices instead (English only): the 12 clips with
their transcripts among the test recordings of PocketSphinx's source package on PyPI
(pocketsphinx-5.1.1.tar.gz, fetched once from the registry and checked against its SHA-256,
cached in ~/.cache/botpsy-desktop-tools/recorded/): "go forward ten meters", a string of digits,
five calls of playing cards, five read sentences from a LibriVox audiobook; and the eight
spoken channel names of alsa-utils (/usr/share/sounds/alsa, "front left"...) where installed.
They are not requests to an assistant: they measure the recogniser on real voices and
microphones, which synthetic speech cannot.

The audio goes straight to the recogniser (the microphone is measured by the tests, not here).
Synthetic speech is cleaner and more regular than a person's, so its WER says little about real
voices; a formant synthesiser such as espeak-ng is also far from the voices the models learnt
from. "Same tools" compares the domain the shipped tool selection (agent/selection_model.py)
picks for the recognised words with the one it picks for the words spoken: the first stage of
a request, not a model's tool call. tools/bench_speech_calls.py runs the evaluation cases typed
and spoken through a model and counts the tool calls.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
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

from botpsy_desktop.agent.selection_model import shipped_model  # noqa: E402
from botpsy_desktop.app import build_app  # noqa: E402
from botpsy_desktop.speech.recognizer import SAMPLE_RATE, Audio, Recognition, SpeechError  # noqa: E402
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
PERCENT = {"en": "percent", "de": "prozent", "es": "por ciento", "fr": "pour cent"}
"""What "%" is said as: the recognisers write "5%" for "five percent"."""
RATE: list[str] = []
"""espeak-ng's ``-s WPM`` when --rate is given."""
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
    text = text.replace("%", f" {PERCENT.get(language, '%')} ")
    text = re.sub(r"[^\w\s'-]", " ", text).replace("-", " ")
    words = []
    for w in text.split():
        w = w.strip("'")
        words.extend(DIGITS.get(language, {}).get(w, w).split())
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


class FasterWhisperReference:
    """faster-whisper in this process: a reference measurement only (see the module's note)."""

    def __init__(self, folder: str, threads: int) -> None:
        from faster_whisper import WhisperModel  # type: ignore[import-not-found]

        begin = time.monotonic()
        self.model = WhisperModel(folder, device="cpu", compute_type="int8", cpu_threads=threads)
        self.load_s = time.monotonic() - begin
        self._proc = None

    def transcribe(self, audio: Audio, *, language: str | None = None) -> Recognition:
        begin = time.monotonic()
        segments, _info = self.model.transcribe(
            audio,
            language=language,
            beam_size=1,
            vad_filter=False,
            condition_on_previous_text=False,
        )
        text = "".join(s.text for s in segments).strip()
        elapsed = time.monotonic() - begin
        return Recognition(text, language, len(audio) / SAMPLE_RATE, elapsed, 0.0, "faster-whisper")

    def close(self) -> None:
        pass


def describe(args: argparse.Namespace, model_id: str) -> dict[str, Any]:
    """Which engine and model give the numbers, and on what machine."""
    import platform

    info: dict[str, Any] = {
        "engine": args.engine,
        "threads": args.threads,
        "espeak_ng_rate_wpm": args.rate or 175,
    }
    if args.engine == "whisper.cpp" and args.model_file:
        import hashlib

        digest = hashlib.sha256(Path(args.model_file).read_bytes()).hexdigest()
        info["model"] = (
            f"{args.model_file} (sha256 {digest[:16]}…): NOT the catalog's file, not checked"
        )
    elif args.engine == "whisper.cpp":
        info["model"] = f"{model_id} (the catalog's ggml file, checked by SHA-256)"
    elif args.engine == "pocketsphinx":
        from importlib.metadata import version

        info["model"] = (
            f"CMU en-US acoustic model, en-us.lm.bin and cmudict-en-us.dict inside "
            f"pocketsphinx {version('pocketsphinx')}"
        )
    else:
        from importlib.metadata import version

        info["engine"] = (
            f"faster-whisper {version('faster-whisper')} (CTranslate2 {version('ctranslate2')}, "
            "int8): a reference, NOT the app's engine"
        )
        info["model"] = f"CTranslate2 Whisper model in {args.ct2_model}"
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        cpu = platform.processor()
    info["cpu"] = f"{cpu}, {len(os.sched_getaffinity(0))} cores used"
    info["load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
    info["omp_wait_policy"] = os.environ.get("OMP_WAIT_POLICY", "(default)")
    return info


def five_second_command(language: str, wav: Path) -> Audio:
    """Commands joined until they take at least 5 s to say: the issue's 5-second command."""
    parts: list[str] = []
    for text in commands(language, 20):
        parts.append(text)
        speak(", ".join(parts), language, wav)
        audio = read_wav(wav)
        if len(audio) >= 5 * SAMPLE_RATE:
            break
    return audio


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--engine", default="whisper.cpp", choices=("whisper.cpp", "pocketsphinx", "faster-whisper")
    )
    p.add_argument("--home", help="the profile whose speech model is used (default: yours)")
    p.add_argument("--model", default=None, help="speech model id (default: voice.model)")
    p.add_argument("--ct2-model", help="with --engine faster-whisper: the model's folder")
    p.add_argument(
        "--model-file",
        help="with --engine whisper.cpp: a ggml file to use instead of the catalog's (not "
        "checked: e.g. one made by tools/whisper_ggml_from_ct2.py)",
    )
    p.add_argument("--languages", default=None, help="default: en,de,es,fr (pocketsphinx: en)")
    p.add_argument("--count", type=int, default=100, help="commands per language")
    p.add_argument(
        "--commands",
        metavar="FILE",
        help="commands to speak, one a line, in the one language of --languages (default: the "
        "built-in ones)",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--rate",
        type=int,
        default=None,
        metavar="WPM",
        help="espeak-ng's speaking rate in words a minute (default: its own, 175)",
    )
    p.add_argument(
        "--recorded",
        action="store_true",
        help="people's recorded voices instead of synthesised commands (English; see above)",
    )
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args()
    if args.recorded:
        args.languages = "en"
        if args.commands:
            p.error("--recorded and --commands exclude each other")
    if hasattr(os, "sched_setaffinity"):  # the target is for 2 cores: use no more
        cores = sorted(os.sched_getaffinity(0))[: args.threads]
        os.sched_setaffinity(0, cores)
    languages = (
        args.languages or ("en" if args.engine == "pocketsphinx" else "en,de,es,fr")
    ).split(",")
    if args.rate:
        RATE[:] = ["-s", str(args.rate)]
    own: list[str] | None = None
    if args.commands:
        if len(languages) != 1:
            p.error("--commands needs exactly one language in --languages (the file's)")
        try:
            lines = Path(args.commands).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            p.error(f"cannot read --commands {args.commands}: {exc}")
        own = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
        if not own:
            p.error(f"--commands {args.commands} has no command in it")
        own = own[: args.count]
    for language in languages:
        if own is None and language not in COMMANDS:
            p.error(f"no built-in commands in {language!r}: give them with --commands FILE")
    app = build_app(args.home)
    selection = shipped_model()
    try:
        voice = app.voice()
        model_id = args.model or app.config.voice.model
        rec: Any
        try:
            if args.engine == "whisper.cpp" and args.model_file:
                rec = WhisperRecognizer(Path(args.model_file), threads=args.threads)
            elif args.engine == "whisper.cpp":
                rec = WhisperRecognizer(voice.models.require(model_id), threads=args.threads)
            elif args.engine == "pocketsphinx":
                from botpsy_desktop.speech.sphinx import SphinxRecognizer, model_dir

                rec = SphinxRecognizer(model_dir())
            else:
                if not args.ct2_model:
                    p.error("--engine faster-whisper needs --ct2-model DIR")
                rec = FasterWhisperReference(args.ct2_model, args.threads)
        except SpeechError as exc:
            print(f"bench_speech: {exc}", file=sys.stderr)
            return 2
        report: dict[str, Any] = {**describe(args, model_id), "languages": {}}
        engine_threads = 1 if args.engine == "pocketsphinx" else args.threads  # it decodes on one
        print("bench_speech:", json.dumps(report), flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            wav = Path(tmp) / "c.wav"
            warm = time.monotonic()
            speak("hello", languages[0], wav)
            rec.transcribe(read_wav(wav), language=languages[0])
            report["load_s"] = round(rec.load_s, 2)
            report["first_request_s"] = round(time.monotonic() - warm, 2)
            if args.recorded:
                report["recorded"] = recorded(rec)
                languages = []
            for language in languages:
                long = five_second_command(language, wav)
                before = cpu_s(rec)
                five = [rec.transcribe(long, language=language) for _ in range(3)]
                five_cpu = (cpu_s(rec) - before) / 3
                errors = words = same_tools = 0
                rtfs, latencies, audio_s = [], [], []
                for text in own if own is not None else commands(language, args.count):
                    speak(text, language, wav)
                    audio = read_wav(wav)
                    got = rec.transcribe(audio, language=language)
                    ref = normalise(text, language)
                    errors += edit_distance(ref, normalise(got.text, language))
                    words += len(ref)
                    rtfs.append(got.elapsed_s / got.audio_s)
                    latencies.append(got.elapsed_s)
                    audio_s.append(got.audio_s)
                    same_tools += top_domain(selection, got.text) == top_domain(selection, text)
                report["languages"][language] = {
                    "commands": len(latencies),
                    "wer": round(errors / max(words, 1), 4),
                    "same_tools": f"{same_tools}/{len(latencies)}",
                    "rtf_5s_command": round(
                        statistics.median(r.elapsed_s / r.audio_s for r in five), 3
                    ),
                    # CPU seconds per second of audio, over the threads: the wall-clock RTF
                    # on that many otherwise idle cores if the engine kept them all busy
                    "cpu_rtf_5s_command": round(five_cpu / five[0].audio_s / engine_threads, 3),
                    "five_s_command_audio_s": round(five[0].audio_s, 2),
                    "five_s_command_audio_ctx": five[0].audio_ctx,
                    "five_s_command_heard": [r.text for r in five],
                    "release_to_request_s_5s_command": round(
                        statistics.median(r.elapsed_s for r in five), 3
                    ),
                    "rtf_mean": round(statistics.fmean(rtfs), 3),
                    "audio_s_mean": round(statistics.fmean(audio_s), 2),
                    "latency_s_p50": round(statistics.median(latencies), 3),
                    "latency_s_max": round(max(latencies), 3),
                }
                print(language, json.dumps(report["languages"][language]), flush=True)
        proc = getattr(rec, "_proc", None)
        if proc is not None:
            report["engine_peak_rss_mib"] = peak_rss_mib(proc.pid)
        else:  # in this process: the bench's own peak (Python and the app's imports included)
            report["bench_process_peak_rss_mib"] = peak_rss_mib(os.getpid())
        rec.close()
        print(json.dumps(report, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        return 0
    finally:
        app.close()


RECORDED_SOURCE = (
    "https://files.pythonhosted.org/packages/61/e7/13e0e787ff467218de880310d79cba14424f13b87"
    "171ac44af0bde1e428c/pocketsphinx-5.1.1.tar.gz",
    "675778b309a22dfc9b7d37f7621976bba491d2a5f8c59696bd77fd6d07271355",
)
"""PocketSphinx's source package on PyPI, whose tests carry recordings of people."""
ALSA_VOICES = Path("/usr/share/sounds/alsa")
RECORDED_SAID = {
    "data/goforward.raw": "go forward ten meters",
    "data/tidigits/dhd.2934z.raw": "two nine three four zero",
}
"""Clips whose words are in the package's tests rather than beside them."""


def _recorded_package() -> Path:
    """The source package, downloaded once (resumed by starting again) and its SHA-256 checked."""
    import hashlib
    import urllib.request

    url, sha = RECORDED_SOURCE
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    target = cache / "botpsy-desktop-tools" / "recorded" / url.rsplit("/", 1)[1]
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        print(f"bench_speech: fetching {url}", file=sys.stderr, flush=True)
        with urllib.request.urlopen(url, timeout=120) as r, partial.open("wb") as out:
            while chunk := r.read(1 << 20):
                out.write(chunk)
        partial.replace(target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    if digest != sha:
        target.unlink()
        raise SystemExit(f"bench_speech: {target.name} is not the expected file (SHA-256 {digest})")
    return target


def recorded_clips() -> list[tuple[str, Audio, str]]:
    """(name, 16 kHz audio, words said) of every recorded clip with a transcript."""
    import tarfile

    import numpy as np

    clips: list[tuple[str, Audio, str]] = []
    with tarfile.open(_recorded_package()) as tar, tempfile.TemporaryDirectory() as tmp:
        top = tar.getnames()[0].split("/")[0]

        def member(name: str) -> bytes:
            f = tar.extractfile(f"{top}/test/{name}")
            assert f is not None
            return f.read()

        def wav(name: str) -> Audio:
            path = Path(tmp) / "clip.wav"
            path.write_bytes(member(name))
            return read_wav(path)

        for name, said in RECORDED_SAID.items():  # 16 kHz 16-bit mono without a header
            audio = np.frombuffer(member(name), dtype="<i2").astype(np.float32) / 32768.0
            clips.append((name, audio, said))
        for line in member("data/cards/cards.transcription").decode().splitlines():
            said = line.split("<s>")[1].split("</s>")[0].strip()
            number = line.rsplit("(", 1)[1].rstrip(")")
            clips.append((f"data/cards/{number}.wav", wav(f"data/cards/{number}.wav"), said))
        texts = sorted(
            n for n in tar.getnames() if "/test/data/librivox/" in n and n.endswith(".txt")
        )
        for name in texts:
            short = name.split("/test/", 1)[1]
            said = member(short).decode().strip()
            clips.append((short.replace(".txt", ".wav"), wav(short.replace(".txt", ".wav")), said))
    for path in sorted(ALSA_VOICES.glob("*_*.wav")):  # "Front_Left.wav" says "front left"
        clips.append((str(path), read_wav(path), path.stem.replace("_", " ").lower()))
    return clips


def recorded(rec: Any) -> dict[str, Any]:
    """The recogniser on people's recorded voices: WER, and each clip said and heard."""
    errors = words = 0
    rtfs: list[float] = []
    heard: list[dict[str, Any]] = []
    for name, audio, said in recorded_clips():
        got = rec.transcribe(audio, language="en")
        ref = normalise(said, "en")
        wrong = edit_distance(ref, normalise(got.text, "en"))
        errors += wrong
        words += len(ref)
        rtfs.append(got.elapsed_s / got.audio_s)
        heard.append({"clip": name, "said": said, "heard": got.text.strip(), "word_errors": wrong})
        print(f"{name}: {said!r} -> {got.text.strip()!r}", file=sys.stderr, flush=True)
    return {
        "clips": len(heard),
        "wer": round(errors / max(words, 1), 4),
        "word_errors": errors,
        "words": words,
        "rtf_median": round(statistics.median(rtfs), 3),
        "heard": heard,
    }


def cpu_s(rec: Any) -> float:
    """CPU seconds the engine has used so far (its worker process, or this process)."""
    proc = getattr(rec, "_proc", None)
    if proc is None:
        t = os.times()
        return t.user + t.system
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def top_domain(selection: Any, text: str) -> str:
    scores: dict[str, float] = selection.scores(text)
    return max(scores, key=lambda k: scores[k]) if scores else "none"


def speak(text: str, language: str, wav: Path) -> None:
    voice = VOICES.get(language, language)  # espeak-ng names most voices by language code
    subprocess.run(["espeak-ng", "-v", voice, *RATE, "-w", str(wav), text], check=True)


if __name__ == "__main__":
    sys.exit(main())
