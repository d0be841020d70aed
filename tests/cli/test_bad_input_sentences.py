"""Bad input through the real CLI ends with a sentence saying what to do, a non-zero exit and
nothing changed: `botpsy approvals` on a damaged conversation database writes nothing to it,
an ID of 2^70, a config number of 5,000 digits, `--home` naming a file, and a tool-selection
word of 100,000 characters answered in linear time."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli.test_faults import (
    botpsy,
    damage_messages_page,
    digest,
    no_traceback,
    replay,
)

HUGE = str(2**70)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "files"
    (folder / "Notes").mkdir(parents=True)
    return folder


@pytest.fixture
def home(tmp_path: Path, files: Path) -> Path:
    """A profile as tests/cli/test_faults.py makes one."""
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (home / "data").mkdir(parents=True)
    config = {
        "files": {"roots": [str(files)]},
        "music": {"folders": [], "player": "none"},
        "calendar": {"time_zone": "UTC"},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def test_approvals_on_a_damaged_database_writes_nothing_to_it(home: Path, tmp_path: Path) -> None:
    first = botpsy(home, "ask", "--replay", replay(tmp_path, "Hello."), "hi")
    assert first.returncode == 0, first.stderr
    database = home / "data" / "conversations.sqlite3"
    damage_messages_page(database)
    before = digest(database)
    listed = botpsy(home, "approvals")
    no_traceback(listed)
    assert "is damaged" in listed.stderr, listed.stderr
    assert "Nothing waits for your approval." in listed.stdout
    decided = botpsy(home, "approvals", "approve", "1")
    no_traceback(decided)
    assert decided.returncode == 1
    assert "is damaged" in decided.stderr
    assert digest(database) == before  # not a page changed
    wal = Path(f"{database}-wal")
    assert not wal.exists() or wal.stat().st_size == 0


@pytest.mark.parametrize(
    "args",
    [("approvals", "approve", HUGE), ("routines", "remove", HUGE), ("undo", HUGE)],
    ids=["approve", "routines-remove", "undo"],
)
def test_an_id_too_large_for_any_row_is_a_usage_error(home: Path, args: tuple[str, ...]) -> None:
    run = botpsy(home, *args)
    no_traceback(run)
    assert run.returncode == 2
    assert f"'{HUGE}' is not an ID: give the number the list shows" in run.stderr


@pytest.mark.parametrize(
    "number", ["7" * 5000, "7" * 5000 + ".5", "1e999"], ids=["int", "fraction", "exponent"]
)
def test_a_config_number_of_thousands_of_digits_is_named_and_kept(home: Path, number: str) -> None:
    config = home / "config" / "config.json"
    text = '{"model": {"n_ctx": ' + number + "}}"
    config.write_text(text, encoding="utf-8")
    run = botpsy(home, "tools")
    no_traceback(run)
    assert run.returncode == 1
    assert f"The config file {config} holds a number that cannot be a setting" in run.stderr
    assert "delete the file to start from defaults" in run.stderr
    assert config.read_text(encoding="utf-8") == text  # nothing lost


def test_home_naming_a_file_says_to_give_a_folder(tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("mine", encoding="utf-8")
    for args in (("tools",), ("approvals",), ("doctor",)):
        run = botpsy(file, *args)
        no_traceback(run)
        assert run.returncode == 1, run.stderr
        assert f"{file} is a file, so BotPsy cannot keep its folders there." in run.stderr
        assert "Give --home (or $BOTPSY_HOME) a folder" in run.stderr
    assert file.read_text(encoding="utf-8") == "mine"


@pytest.mark.parametrize(
    "word",
    ["a" * 100_000, "a." * 50_000, "a/" * 50_000, "a-" * 50_000],
    ids=["letters", "dots", "slashes", "dashes"],
)
def test_a_word_of_100000_characters_is_answered_in_linear_time(
    home: Path, tmp_path: Path, word: str
) -> None:
    """Tool selection reads the request before anything else: its address, file and path
    patterns took n^2/2 steps (a 40,000-character word 22 to 85 s; this one would take 2 to 9
    minutes). The generous limit below only catches that; linear work takes a second or two."""
    script = replay(tmp_path, "Too long.")
    try:
        run = botpsy(home, "ask", "--replay", script, "--json", word, timeout=120)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure this test is for
        pytest.fail("tool selection took over 120 s for a 100,000-character word")
    no_traceback(run)
    assert run.stdout, run.stderr
    json.loads(run.stdout)


def test_the_selection_patterns_find_what_re_sub_finds() -> None:
    """The linear rewrite of the patterns replaces exactly what the plain patterns do."""
    from botpsy_desktop.agent import selection_model as m

    samples = [
        "mail ann@example.org and bob.smith+x@mail.co.uk now",
        "open report.pdf and my-notes.md, not report.pdf.txt",
        "look in ~/Documents and /home/ann/Pictures or a/b/ or a//b",
        "a.txt-b.pdf x@a.b..y@c.d a@b.c+d@e.f",
    ]
    for text in samples:
        for pattern in m._STARTS:
            assert m._linear_sub(pattern, " X ", text) == pattern.sub(" X ", text), text
