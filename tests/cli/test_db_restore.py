"""`botpsy db restore` through the shipped CLI: refused while another botpsy process has the
database open, saying how old the backup is and what it lacks, never replacing a healthy file
silently, naming the file it sets aside truly; and backups made after each request, so that a
restore loses little."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

from tests.cli.test_faults import REPO, botpsy, files, home, no_traceback, replay  # noqa: F401


def messages(file: Path) -> int:
    db = sqlite3.connect(f"{file.as_uri()}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM messages").fetchone()[0])
    finally:
        db.close()


def backups(profile: Path) -> list[Path]:
    return sorted((profile / "data").glob("conversations.backup-*.sqlite3"))  # oldest first


def test_restore_waits_for_the_app_says_what_the_backup_lacks_and_loses_little(
    home: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    database = home / "data" / "conversations.sqlite3"
    for i in range(3):
        turns = replay(tmp_path, f"Answer {i}.", name=f"r{i}.json")
        asked = botpsy(home, "ask", "--replay", turns, f"question {i}")
        assert asked.returncode == 0, asked.stderr
    assert messages(database) == 6
    made = backups(home)
    # a backup after each request: the newest has every message, the oldest the first request
    assert messages(made[-1]) == 6, [p.name for p in made]
    assert messages(made[0]) == 2

    # a chat holds the database open: restoring now would leave it writing into the old file
    chat = subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), "chat", "--replay",
         replay(tmp_path, "Hi.", name="chat.json")],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    ready = threading.Event()
    said: list[str] = []

    def read() -> None:
        assert chat.stderr is not None
        for line in chat.stderr:
            said.append(line)
            if "Ctrl-D or /quit" in line:
                ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(120), said
        refused = botpsy(home, "db", "restore", "conversations.sqlite3")
    finally:
        assert chat.stdin is not None
        chat.stdin.write("/quit\n")
        chat.stdin.close()
        chat.wait(60)
        reader.join(10)
        assert chat.stderr is not None
        chat.stderr.close()
    no_traceback(refused)
    assert refused.returncode == 1
    assert "conversations.sqlite3 is open in 1 other botpsy process" in refused.stderr
    assert "nothing was changed" in refused.stderr
    assert messages(database) == 6
    assert not list((home / "data").glob("conversations.sqlite3.*-*"))  # nothing set aside

    # the oldest backup lacks two requests: said, and only done when asked for
    oldest = made[0].name
    asked_first = botpsy(home, "db", "restore", "conversations.sqlite3", oldest)
    no_traceback(asked_first)
    assert asked_first.returncode == 1
    assert (
        f"conversations.sqlite3 is healthy and holds what the backup {oldest} ("
        in asked_first.stderr
    )
    assert "s old (" in asked_first.stderr or "minutes old (" in asked_first.stderr
    assert (
        "4 rows of messages" in asked_first.stderr and "Nothing was changed" in asked_first.stderr
    )
    assert messages(database) == 6

    done = botpsy(home, "db", "restore", "conversations.sqlite3", oldest, "--yes")
    no_traceback(done)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"Restored {database} from {oldest}, a backup ")
    assert "The replaced file (healthy) is kept as" in done.stdout
    assert "Not in the backup (saved after it): " in done.stdout and "4 rows of messages" in (
        done.stdout
    )
    [aside] = [  # not called damaged (its journal files are kept beside it)
        p
        for p in (home / "data").glob("conversations.sqlite3.replaced-*")
        if not p.name.endswith(("-wal", "-shm"))
    ]
    assert not list((home / "data").glob("conversations.sqlite3.damaged-*"))
    assert messages(aside) == 6 and messages(database) == 2

    # the newest backup brings every message back
    again = botpsy(home, "db", "restore", "conversations.sqlite3")
    assert again.returncode == 0, again.stderr
    assert "Nothing saved before the restore is missing from it." in again.stdout
    assert messages(database) == 6
    listed = botpsy(home, "history")
    assert listed.stdout.count("messages") == 3
