"""`botpsy history` shows interrupted turns; `botpsy db` checks and restores the databases."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from botpsy_desktop.agent import store as store_module
from botpsy_desktop.cli import main


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(tmp_path)]}}), encoding="utf-8"
    )
    return home


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")
def test_history_shows_a_turn_cut_off_by_a_kill_as_interrupted(
    profile: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(["Hello! How can I help?"]), encoding="utf-8")
    assert main(["--home", str(profile), "ask", "--replay", str(replay), "--json", "hi"]) == 0
    conv = json.loads(capsys.readouterr().out)["conversation_id"]
    # a process answering in that conversation is killed mid-sentence
    code = (
        "import os, signal, sys\n"
        "from botpsy_desktop.agent.store import ConversationStore\n"
        "s = ConversationStore(sys.argv[1])\n"
        "row = s.start_turn(sys.argv[2], {'role': 'user', 'content': 'tell me more'})\n"
        "s.update(row, {'role': 'assistant', 'content': 'There are three things.'})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    db = profile / "data" / "conversations.sqlite3"
    subprocess.run([sys.executable, "-c", code, str(db), conv], check=False, timeout=60)

    assert main(["--home", str(profile), "history"]) == 0
    assert f"{conv}     4 messages  hi" in capsys.readouterr().out
    assert main(["--home", str(profile), "history", conv]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "you> hi",
        "botpsy> Hello! How can I help?",
        "you> tell me more",
        "botpsy (interrupted)> There are three things.",
    ]
    assert main(["--home", str(profile), "history", conv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[-1]["interrupted"] is True
    assert main(["--home", str(profile), "history", "nope"]) == 1


def test_db_check_finds_damage_and_restore_puts_the_backup_back(
    profile: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = profile / "data"
    data.mkdir(parents=True)
    db = data / "conversations.sqlite3"
    con = sqlite3.connect(db)  # a database at the previous schema, with history worth keeping
    con.executescript(store_module._SCHEMA)
    con.execute("INSERT INTO conversations VALUES ('c1', 'old', 0, 0)")
    for i in range(200):
        payload = json.dumps({"role": "user", "content": f"message {i} " + "x" * 200})
        con.execute(
            "INSERT INTO messages (conversation_id, role, payload, created_at) "
            "VALUES ('c1', 'user', ?, 0)",
            (payload,),
        )
    con.execute("PRAGMA user_version=2")
    con.commit()
    con.close()
    assert main(["--home", str(profile), "history"]) == 0  # opening it upgrades it, backed up
    assert "c1   200 messages  old" in capsys.readouterr().out
    assert main(["--home", str(profile), "db", "check"]) == 0
    out = capsys.readouterr().out
    assert f"{db}: ok" in out and "backup conversations.backup-v2-" in out

    with db.open("r+b") as f:  # the disk damages the file
        f.seek(4096 * 3)
        f.write(b"\x5a" * 512)
    assert main(["--home", str(profile), "doctor", "--json"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["database integrity"]["status"] == "fail"
    assert "botpsy db restore conversations.sqlite3" in checks["database integrity"]["hint"]
    assert main(["--home", str(profile), "db", "check"]) == 1
    assert f"{db}: DAMAGED" in capsys.readouterr().out

    assert main(["--home", str(profile), "db", "restore", "conversations.sqlite3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Restored {db} from conversations.backup-v2-")
    assert "damaged-" in out
    assert main(["--home", str(profile), "db", "check"]) == 0
    capsys.readouterr()
    assert main(["--home", str(profile), "history", "c1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 200
    assert main(["--home", str(profile), "db", "restore", "other.sqlite3"]) == 2
