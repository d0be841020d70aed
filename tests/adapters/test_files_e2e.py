"""End to end: `botpsy ask --replay` tidies a real Downloads folder through the file tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.adapters.files import ACTION_LOG_NAME
from botpsy_desktop.cli import main
from tests.helpers.replay import xml_call

REQUEST = "tidy my Downloads: move the pdfs into Documents/pdfs"


TIDY = [
    xml_call("find_files", pattern="*.pdf", folder="Downloads", max_depth=1),
    xml_call("create_folder", path="Documents/pdfs"),
    xml_call("rename_or_move", source="Downloads/Boarding-Pass.PDF", destination="Documents/pdfs")
    + "\n"
    + xml_call("rename_or_move", source="Downloads/invoice.pdf", destination="Documents/pdfs"),
    "I moved Boarding-Pass.PDF and invoice.pdf into Documents/pdfs.",
]

UNDO = [
    xml_call("undo_last_file_change"),
    xml_call("undo_last_file_change"),
    xml_call("undo_last_file_change"),
    "Done: both PDFs are back in Downloads and Documents/pdfs is gone.",
]


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    (root / "Downloads").mkdir(parents=True)
    (root / "Documents").mkdir()
    (root / "Downloads" / "invoice.pdf").write_bytes(b"%PDF-1.4 invoice")
    (root / "Downloads" / "Boarding-Pass.PDF").write_bytes(b"%PDF-1.4 boarding pass")
    (root / "Downloads" / "setup.exe").write_bytes(b"MZ\x90\x00")
    return root


@pytest.fixture
def profile(tmp_path: Path, files: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}}), encoding="utf-8"
    )
    return home


def tree(folder: Path) -> dict[str, bytes | None]:
    return {
        p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


def ask(
    profile: Path,
    tmp_path: Path,
    turns: list[str],
    approve: str,
    capsys: pytest.CaptureFixture[str],
    text: str = REQUEST,
) -> dict[str, Any]:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(turns), encoding="utf-8")
    argv = ["--home", str(profile), "ask", "--replay", str(replay), "--json", "--approve"]
    code = main([*argv, approve, text])
    out = capsys.readouterr().out
    assert code == 0, out
    data: dict[str, Any] = json.loads(out)
    return data


def test_tidy_downloads_with_approval_then_undo(
    profile: Path, files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = tree(files)
    data = ask(profile, tmp_path, TIDY, "all", capsys)
    calls = data["tool_calls"]
    assert [(c["name"], c["decision"], c["ok"]) for c in calls] == [
        ("find_files", "allowed", True),
        ("create_folder", "approved", True),
        ("rename_or_move", "approved", True),
        ("rename_or_move", "approved", True),
    ]
    found = json.loads(calls[0]["result"])
    assert found["count"] == 2
    assert data["answer"] == "I moved Boarding-Pass.PDF and invoice.pdf into Documents/pdfs."
    assert tree(files) == {
        "Documents": None,
        "Documents/pdfs": None,
        "Documents/pdfs/Boarding-Pass.PDF": b"%PDF-1.4 boarding pass",
        "Documents/pdfs/invoice.pdf": b"%PDF-1.4 invoice",
        "Downloads": None,
        "Downloads/setup.exe": b"MZ\x90\x00",
    }
    log = (profile / "data" / ACTION_LOG_NAME).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["tool"] for line in log] == [
        "create_folder",
        "rename_or_move",
        "rename_or_move",
    ]

    undo = ask(profile, tmp_path, UNDO, "all", capsys, text="undo that")
    assert [(c["name"], c["ok"]) for c in undo["tool_calls"]] == [
        ("undo_last_file_change", True)
    ] * 3
    assert tree(files) == start


def test_tidy_downloads_denied_changes_nothing(
    profile: Path, files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    start = tree(files)
    data = ask(profile, tmp_path, TIDY, "deny", capsys)
    calls = data["tool_calls"]
    assert [(c["name"], c["decision"], c["ok"]) for c in calls] == [
        ("find_files", "allowed", True),
        ("create_folder", "denied", False),
        ("rename_or_move", "denied", False),
        ("rename_or_move", "denied", False),
    ]
    assert tree(files) == start
    assert not (profile / "data" / ACTION_LOG_NAME).exists()


def test_tools_json_lists_the_file_tools_with_their_effects(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--home", str(profile), "tools", "--json"]) == 0
    listed = {t["name"]: t for t in json.loads(capsys.readouterr().out)}
    expected = {
        "list_folder": ["read"],
        "find_files": ["read"],
        "read_text_file": ["read"],
        "search_text": ["read"],
        "file_info": ["read"],
        "create_folder": ["local-write"],
        "write_text_note": ["local-write"],
        "rename_or_move": ["local-write"],
        "move_to_trash": ["destructive"],
        "undo_last_file_change": ["local-write"],
    }
    for name, effects in expected.items():
        assert listed[name]["effects"] == effects
        # what the gate decides for a request you typed: reversible changes run (with Undo)
        assert listed[name]["needs_approval"] is (listed[name]["tier"] == "ask")
    assert listed["move_to_trash"]["needs_approval"] is True
    assert listed["write_text_note"]["needs_approval"] is False


def test_folders_named_as_a_person_says_them_are_the_ones_on_disk(
    profile: Path, files: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "move the invoice to documents" (typed, or heard by the recogniser in lower case) moves
    it into Documents, not to a new file called "documents"; a name not there gets the nearest
    ones back."""
    turns = [
        xml_call("rename_or_move", source="downloads/invoice.pdf", destination="documents"),
        xml_call("list_folder", path="document"),
        "I moved invoice.pdf into Documents.",
    ]
    data = ask(profile, tmp_path, turns, "all", capsys, text="move the invoice to documents")
    calls = data["tool_calls"]
    assert [(c["name"], c["ok"]) for c in calls] == [
        ("rename_or_move", True),
        ("list_folder", False),
    ]
    assert json.loads(calls[0]["result"])["to"].endswith("invoice.pdf")
    assert "Did you mean" in calls[1]["result"] and "Documents" in calls[1]["result"]
    after = tree(files)
    assert after["Documents/invoice.pdf"] == b"%PDF-1.4 invoice"
    assert "documents" not in after and "Downloads/invoice.pdf" not in after
