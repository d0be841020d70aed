"""The app's process imports the libraries a request uses, not every adapter's: mail parsing,
document formats and music tags come where a mail, a document or a track is read (about 3 MiB of
the `botpsy ask` process's memory; docs/PERFORMANCE.md, issue 34 item 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LIST_DOCS = (
    "<tool_call>\n<function=list_folder>\n<parameter=path>\nDocuments\n</parameter>\n"
    "</function>\n</tool_call>"
)
NOT_FOR_THIS_REQUEST = (
    "mutagen",  # music tags: adapters/music/library.py, when a library is scanned
    "html.parser",  # a page's or a mail's HTML as text
    "xml.etree.ElementTree",  # docx, xlsx, pptx and OpenDocument files
    "email.policy",  # parsing and writing mail, reading .eml files
    "email.headerregistry",
)


def test_a_request_through_the_cli_leaves_mail_document_and_music_libraries_unimported(
    tmp_path: Path,
) -> None:
    home, files = tmp_path / "profile", tmp_path / "files"
    (files / "Documents").mkdir(parents=True)
    (files / "Documents" / "notes.txt").write_text("remember the milk", encoding="utf-8")
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}}), encoding="utf-8"
    )
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps([LIST_DOCS, "You have notes.txt."]), encoding="utf-8")
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "botpsy_desktop",
            "--home",
            str(home),
            "ask",
            "--replay",
            str(replay),
            "--json",
            "what's in my Documents folder?",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["answer"] == "You have notes.txt." and data["tool_calls"][0]["ok"]
    imported = {
        line.rpartition("|")[2].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "botpsy_desktop.app" in imported  # the whole app was built
    assert "botpsy_desktop.adapters.music.library" in imported
    assert "botpsy_desktop.adapters.documents.extract" in imported
    assert "botpsy_desktop.adapters.email.client" in imported
    assert imported.isdisjoint(NOT_FOR_THIS_REQUEST), imported & set(NOT_FOR_THIS_REQUEST)
