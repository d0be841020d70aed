"""The speech models of the catalog: listed by `botpsy model list`, fetched by `botpsy model
pull` from a Hugging Face stand-in on 127.0.0.1, and checked against the size and SHA-256 the
catalog pins (the real files cannot be served here: a pull of anything else must be refused)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from botpsy_desktop.cli import main
from botpsy_desktop.llm.models.catalog import load_catalog
from tests.helpers.hub import HubStandIn


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubStandIn]:
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "no-token-here"))
    with HubStandIn() as h:
        monkeypatch.setenv("HF_ENDPOINT", h.url)
        yield h


def profile(tmp_path: Path) -> str:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True, exist_ok=True)
    settings = {"files": {"roots": [str(tmp_path)]}}
    (home / "config" / "config.json").write_text(json.dumps(settings), encoding="utf-8")
    return str(home)


def test_the_catalog_pins_each_speech_model() -> None:
    catalog = load_catalog()
    assert catalog.speech(catalog.default_speech) is not None
    by_id = {m.id: m for m in catalog.speech_models}
    assert set(by_id) == {"whisper-tiny", "whisper-base", "whisper-small"}
    for m in by_id.values():
        assert m.source.repo == "ggerganov/whisper.cpp" and m.file.endswith(".bin")
        assert len(m.sha256) == 64 and m.size > 50_000_000
        assert "multilingual" in m.languages
    assert by_id["whisper-base"].size == 147_951_465


def test_a_pull_that_is_not_the_catalogs_file_is_refused(
    hub: HubStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hub.add_file("ggerganov/whisper.cpp", "ggml-tiny.bin", b"lmgg" + bytes(4096))
    home = profile(tmp_path)
    code = main(["--home", home, "model", "pull", "whisper-tiny"])
    err = capsys.readouterr().err
    assert code == 1
    assert "ggml-tiny.bin is truncated: 4,100 of 77,691,713 bytes arrived" in err
    speech = Path(home) / "data" / "models" / "speech"
    assert not (speech / "ggml-tiny.bin").exists()  # nothing half-done is left to be used
    assert main(["--home", home, "model", "list"]) == 0
    out = capsys.readouterr().out
    assert "speech: whisper-tiny (Whisper tiny (multilingual, whisper.cpp), 74.1 MiB): " in out
    assert "speech: whisper-base " in out and "not installed" in out


def test_the_speech_benchmark_says_what_it_needs_and_has_its_commands(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(root / "tools" / "bench_speech.py"), "--home", profile(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "Get it with `botpsy model pull whisper-base`" in done.stderr
    sys.path.insert(0, str(root / "tools"))
    try:
        import bench_speech
    finally:
        sys.path.remove(str(root / "tools"))
    for language in ("en", "de", "es", "fr"):
        said = bench_speech.commands(language, 100)
        assert len(set(said)) == 100
    assert bench_speech.normalise("Set a timer for 5 minutes.", "en") == (
        ["set", "a", "timer", "for", "five", "minutes"]
    )
    assert bench_speech.edit_distance(["a", "b", "c"], ["a", "x", "c", "d"]) == 2
