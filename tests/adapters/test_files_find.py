"""Tests for finding by kind, size and date, searching inside text files, and file_info."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.adapters.files.filters import format_size, parse_size, parse_when
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Tool, ToolArgumentsError

NOW = datetime(2025, 6, 18, 15, 30).astimezone()  # a Wednesday, in the machine's time zone
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
ELF = b"\x7fELF\x02\x01\x01" + b"\x00" * 64


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("USERPROFILE", str(folder))
    return folder.resolve()


def at(days_ago: float) -> float:
    return (NOW - timedelta(days=days_ago)).timestamp()


def make(path: Path, data: bytes | str, days_ago: float = 0.0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    os.utime(path, (at(days_ago), at(days_ago)))
    return path


@pytest.fixture
def media(home: Path) -> Path:
    """Pictures/ holiday.jpg (2 MB, 3 days old), old.png (10 KB, 400 days), icon.png (50 bytes,
    today); Documents/ tax.pdf (300 KB, 40 days), notes.txt (today), Projects/ (folder, 2 days)."""
    make(home / "Pictures" / "holiday.jpg", b"\xff\xd8\xff" + b"x" * 2_000_000, 3)
    make(home / "Pictures" / "old.png", PNG + b"y" * 10_000, 400)
    make(home / "Pictures" / "icon.png", PNG[:50], 0.1)
    make(home / "Documents" / "tax.pdf", b"%PDF-1.7\n" + b"z" * 300_000, 40)
    make(home / "Documents" / "notes.txt", "milk\n", 0.1)
    (home / "Documents" / "Projects").mkdir()
    os.utime(home / "Documents" / "Projects", (at(2), at(2)))
    for folder in ("Pictures", "Documents"):
        os.utime(home / folder, (at(1), at(1)))
    return home


def tools(*roots: Path, **kwargs: Any) -> dict[str, Tool]:
    kwargs.setdefault("now", lambda: NOW)
    return {t.name: t for t in files_tools(list(roots), **kwargs)}


def call(tool: Tool, **arguments: Any) -> dict[str, Any]:
    result = tool.call(tool.validate(arguments))
    assert isinstance(result, dict)
    json.dumps(result)
    return result


def paths(result: dict[str, Any]) -> list[str]:
    return [m["path"].replace(os.sep, "/") for m in result["matches"]]


# --- sizes and dates -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("10 MB", 10_000_000),
        ("10MB", 10_000_000),
        ("1.5 gb", 1_500_000_000),
        ("1,5 MB", 1_500_000),
        ("500 KiB", 512_000),
        ("2048", 2048),
        ("1,000 bytes", 1000),
        ("3 megabytes", 3_000_000),
        ("1k", 1000),
    ],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text, "min_size") == size


@pytest.mark.parametrize("text", ["ten MB", "10 parsecs", "", "-5 MB", "1.2.3 MB"])
def test_parse_size_refuses_nonsense_with_an_example(text: str) -> None:
    with pytest.raises(ToolError, match=r"min_size .* is not a size I understand.*10 MB"):
        parse_size(text, "min_size")


def test_format_size() -> None:
    assert format_size(1) == "1 byte"
    assert format_size(999) == "999 bytes"
    assert format_size(1000) == "1 KB"
    assert format_size(1_234_567) == "1.2 MB"
    assert format_size(10_000_000_000) == "10 GB"


def midnight(days_ago: int) -> datetime:
    day = NOW.date() - timedelta(days=days_ago)
    return datetime(day.year, day.month, day.day).astimezone()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2025-01-01", datetime(2025, 1, 1).astimezone()),
        ("2025-01-01 14:30", datetime(2025, 1, 1, 14, 30).astimezone()),
        ("2025-01", datetime(2025, 1, 1).astimezone()),
        ("2024", datetime(2024, 1, 1).astimezone()),
        ("today", midnight(0)),
        ("Yesterday", midnight(1)),
        ("last week", midnight(7)),
        ("past week", midnight(7)),
        ("in the last 3 days", midnight(3)),
        ("3 days ago", midnight(3)),
        ("a week ago", midnight(7)),
        ("two weeks ago", midnight(14)),
        ("last month", datetime(2025, 5, 18).astimezone()),
        ("last year", datetime(2024, 6, 18).astimezone()),
        ("this week", midnight(2)),
        ("this month", datetime(2025, 6, 1).astimezone()),
        ("this year", datetime(2025, 1, 1).astimezone()),
        ("monday", midnight(2)),
        ("wednesday", midnight(0)),
        ("last wednesday", midnight(7)),
        ("since friday", midnight(5)),
        ("March 2025", datetime(2025, 3, 1).astimezone()),
        ("1 March 2025", datetime(2025, 3, 1).astimezone()),
        ("March 5, 2025", datetime(2025, 3, 5).astimezone()),
        ("2 hours ago", NOW - timedelta(hours=2)),
        ("now", NOW),
    ],
)
def test_parse_when(text: str, expected: datetime) -> None:
    assert parse_when(text, NOW, "modified_after") == expected


def test_parse_when_keeps_an_explicit_offset() -> None:
    value = parse_when("2025-01-01T10:00+02:00", NOW, "modified_after")
    assert value.utcoffset() == timedelta(hours=2)
    assert value.hour == 10


@pytest.mark.parametrize("text", ["soonish", "2025-13-01", "31 February 2025", "the day after"])
def test_parse_when_refuses_with_examples(text: str) -> None:
    with pytest.raises(
        ToolError, match=r"modified_before .* is not a date I understand.*last week"
    ):
        parse_when(text, NOW, "modified_before")


# --- find_files filters --------------------------------------------------------------------


def test_find_by_kind(media: Path) -> None:
    find = tools(media)["find_files"]
    assert paths(call(find, kind="image")) == [
        "~/Pictures/holiday.jpg",
        "~/Pictures/icon.png",
        "~/Pictures/old.png",
    ]
    assert paths(call(find, kind="document")) == ["~/Documents/tax.pdf"]
    assert paths(call(find, kind="folder")) == [
        "~/Documents",
        "~/Pictures",
        "~/Documents/Projects",
    ]
    assert len(call(find, kind="file")["matches"]) == 5
    with pytest.raises(ToolArgumentsError):
        find.validate({"kind": "photos"})


def test_find_by_extensions(media: Path) -> None:
    find = tools(media)["find_files"]
    result = call(find, extensions="PNG, .pdf")
    assert paths(result) == ["~/Documents/tax.pdf", "~/Pictures/icon.png", "~/Pictures/old.png"]
    assert result["filters"] == {"extensions": ["pdf", "png"]}
    assert paths(call(find, extensions="*.jpg")) == ["~/Pictures/holiday.jpg"]
    with pytest.raises(ToolError, match="not a list of file extensions"):
        call(find, extensions="tar.gz/x")


def test_find_by_size(media: Path) -> None:
    find = tools(media)["find_files"]
    result = call(find, min_size="100 KB")
    assert paths(result) == ["~/Documents/tax.pdf", "~/Pictures/holiday.jpg"]
    assert result["filters"]["min_size"] == "100 KB (100,000 bytes)"
    assert paths(call(find, max_size="1 KB")) == ["~/Documents/notes.txt", "~/Pictures/icon.png"]
    assert paths(call(find, min_size="5 KB", max_size="1 MB")) == [
        "~/Documents/tax.pdf",
        "~/Pictures/old.png",
    ]
    with pytest.raises(ToolError, match="larger than max_size"):
        call(find, min_size="2 MB", max_size="1 MB")
    with pytest.raises(ToolError, match="not a size I understand"):
        call(find, min_size="big")


def test_find_by_modification_date(media: Path) -> None:
    find = tools(media)["find_files"]
    result = call(find, modified_after="last week")
    assert paths(result) == [
        "~/Documents",
        "~/Pictures",
        "~/Documents/Projects",
        "~/Documents/notes.txt",
        "~/Pictures/holiday.jpg",
        "~/Pictures/icon.png",
    ]
    assert result["filters"] == {"modified_after": midnight(7).isoformat(timespec="seconds")}
    assert paths(call(find, modified_before="2025-01-01")) == ["~/Pictures/old.png"]
    assert paths(call(find, modified_after="60 days ago", modified_before="last week")) == [
        "~/Documents/tax.pdf"
    ]
    with pytest.raises(ToolError, match="is not before"):
        call(find, modified_after="today", modified_before="last week")
    with pytest.raises(ToolError, match="not a date I understand"):
        call(find, modified_after="whenever")


def test_find_combines_name_and_filters(media: Path) -> None:
    find = tools(media)["find_files"]
    assert paths(call(find, pattern="*.png", modified_after="this month")) == [
        "~/Pictures/icon.png"
    ]
    assert paths(call(find, pattern="o", kind="image", min_size="1 KB")) == [
        "~/Pictures/holiday.jpg",
        "~/Pictures/old.png",
    ]
    assert call(find, pattern="holiday", kind="audio")["matches"] == []


def test_find_skips_special_files_when_filtering_files(home: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("needs named pipes")
    os.mkfifo(home / "pipe.txt")
    find = tools(home)["find_files"]
    assert call(find, kind="text")["matches"] == []
    listed = call(find, pattern="pipe")["matches"]
    assert listed == [{**listed[0], "kind": "special", "special": "a named pipe (FIFO)"}]


# --- search_text ---------------------------------------------------------------------------


@pytest.fixture
def texts(home: Path) -> Path:
    make(home / "Documents" / "dentist.txt", "Call the Dentist on Monday.\nBring the card.\n")
    make(home / "Documents" / "plans.md", "# Plans\n\n- dentist at 9\n- DENTIST bill\n")
    make(home / "Documents" / "old" / "letter.txt", "Dear dentist,\n")
    make(home / "Documents" / "scan.png", PNG + b"dentist")
    make(home / "Documents" / "blob.dat", b"dentist\x00\x01\x02")
    make(home / ".private" / "secret.txt", "dentist secret")
    make(home / "wide.txt", "x" * 500 + " dentist " + "y" * 500)
    make(home / "utf16.txt", "Zahnarzt · dentist\n".encode("utf-16"))
    return home


def test_search_text_finds_lines_case_insensitively(texts: Path) -> None:
    result = call(tools(texts)["search_text"], phrase="dentist", folder="~/Documents")
    assert [(m["path"].replace(os.sep, "/"), m["line"], m["text"]) for m in result["matches"]] == [
        ("~/Documents/dentist.txt", 1, "Call the Dentist on Monday."),
        ("~/Documents/plans.md", 3, "- dentist at 9"),
        ("~/Documents/plans.md", 4, "- DENTIST bill"),
        ("~/Documents/old/letter.txt", 1, "Dear dentist,"),
    ]
    assert result["count"] == 4
    assert result["files_matched"] == 3
    assert result["files_searched"] == 3
    assert result["skipped"] == {"binary": 2}
    assert result["truncated"] is False


def test_search_text_clips_long_lines_and_reads_utf16(texts: Path) -> None:
    search = tools(texts)["search_text"]
    result = call(search, phrase="DENTIST", max_depth=1)
    by_path = {m["path"]: m for m in result["matches"]}
    wide = by_path["~/wide.txt".replace("/", os.sep)]["text"]
    assert len(wide) <= 202
    assert wide.startswith("…") and wide.endswith("…")
    assert "dentist" in wide
    assert by_path["~/utf16.txt".replace("/", os.sep)]["text"] == "Zahnarzt · dentist"
    assert "secret" not in json.dumps(result)  # hidden folders are skipped


def test_search_text_pattern_and_bounds(texts: Path) -> None:
    search = tools(texts)["search_text"]
    assert paths(call(search, phrase="dentist", pattern="*.md")) == [
        "~/Documents/plans.md",
        "~/Documents/plans.md",
    ]
    limited = call(search, phrase="dentist", folder="~/Documents", limit=2)
    assert limited["count"] == 2
    assert limited["truncated"] is True
    assert "more matching line(s) not shown" in limited["note"]
    with pytest.raises(ToolError, match="patterns match names only"):
        call(search, phrase="x", pattern="Documents/*.md")
    with pytest.raises(ToolError, match="phrase is empty"):
        call(search, phrase="   ")
    with pytest.raises(ToolArgumentsError):
        search.validate({"phrase": "x", "limit": 201})


def test_search_text_at_most_five_lines_per_file(home: Path) -> None:
    make(home / "many.txt", "todo\n" * 12)
    result = call(tools(home)["search_text"], phrase="todo")
    assert [m["line"] for m in result["matches"]] == [1, 2, 3, 4, 5]
    assert result["truncated"] is True
    assert "7 more matching line(s)" in result["note"]


def test_search_text_skips_large_files(home: Path) -> None:
    make(home / "big.log", "needle\n" + "." * 5000)
    make(home / "small.log", "needle\n")
    result = call(tools(home, max_search_bytes=2000)["search_text"], phrase="needle")
    assert paths(result) == ["~/small.log"]
    assert result["skipped"] == {"too_large": 1}
    assert "Files over 2 KB were skipped" in result["note"]


def test_search_text_never_follows_links_or_opens_pipes(home: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    make(outside / "secret.txt", "needle outside")
    try:
        (home / "escape").symlink_to(outside, target_is_directory=True)
        (home / "escape.txt").symlink_to(outside / "secret.txt")
    except OSError as exc:
        pytest.skip(f"cannot create symlinks here: {exc}")
    if hasattr(os, "mkfifo"):
        os.mkfifo(home / "pipe.txt")
    make(home / "inside.txt", "needle inside")
    result = call(tools(home)["search_text"], phrase="needle")
    assert paths(result) == ["~/inside.txt"]
    assert "outside" not in json.dumps(result)
    with pytest.raises(ToolError, match="outside the folders"):
        call(tools(home)["search_text"], phrase="needle", folder="~/escape")


# --- file_info -----------------------------------------------------------------------------


def test_file_info_text_file(home: Path) -> None:
    make(home / "notes.md", "one\ntwo\nthree", 2)
    info = call(tools(home)["file_info"], path="notes.md")
    assert info["path"] == "~/notes.md".replace("/", os.sep)
    assert info["kind"] == "file"
    assert info["size"] == 13 and info["size_text"] == "13 bytes"
    assert info["type"] == "Markdown text" and info["category"] == "text"
    assert info["text"] is True and info["encoding"] == "utf-8"
    assert info["lines"] == 3
    assert datetime.fromisoformat(info["modified"]) == datetime.fromtimestamp(
        at(2)
    ).astimezone().replace(microsecond=0)
    assert "accessed" in info


def test_file_info_lines_of_larger_and_utf16_files(home: Path) -> None:
    make(home / "big.csv", "a,b\n" * 100_000)
    make(home / "u16.txt", "eins\nzwei\n".encode("utf-16"))
    make(home / "empty.txt", b"")
    info = tools(home)["file_info"]
    big = call(info, path="big.csv")
    assert big["lines"] == 100_000 and big["category"] == "spreadsheet"
    assert big["size_text"] == "400 KB"
    assert call(info, path="u16.txt")["lines"] == 2
    assert call(info, path="u16.txt")["encoding"] == "utf-16"
    assert call(info, path="empty.txt")["lines"] == 0


def test_file_info_sniffs_content_and_warns_on_a_wrong_extension(home: Path) -> None:
    make(home / "report.pdf", b"%PDF-1.7\n" + b"\x00" * 5_000_000)
    make(home / "holiday.jpg", ELF)
    make(home / "letter.docx", b"PK\x03\x04" + b"\x00" * 100)
    make(home / "mystery", b"\x00\x01\x02\x03")
    info = tools(home)["file_info"]
    pdf = call(info, path="report.pdf")
    assert pdf["type"] == "PDF document" and pdf["detected_from"] == "content"
    assert pdf["text"] is False and "lines" not in pdf
    assert "read_text_file cannot show it" in pdf["note"]
    assert len(json.dumps(pdf)) < 1000  # summarised, never dumped
    fake = call(info, path="holiday.jpg")
    assert fake["type"] == "Linux/Unix program" and fake["category"] == "program"
    assert (
        "The name says JPEG image (.jpg) but the content is Linux/Unix program" in fake["warning"]
    )
    docx = call(info, path="letter.docx")
    assert docx["type"] == "Word document (ZIP-based)" and "warning" not in docx
    unknown = call(info, path="mystery")
    assert unknown["type"] == "file without an extension"
    assert unknown["detected_from"] == "name" and unknown["text"] is False


def test_file_info_folder_counts(home: Path) -> None:
    make(home / "Docs" / "a.txt", "a")
    make(home / "Docs" / ".hidden", "h")
    (home / "Docs" / "sub").mkdir()
    info = call(tools(home)["file_info"], path="Docs")
    assert info["kind"] == "folder"
    assert info["contains"] == {"files": 2, "folders": 1, "hidden": 1}
    assert "size" not in info


def test_file_info_refuses_special_files_and_outside(home: Path, tmp_path: Path) -> None:
    info = tools(home)["file_info"]
    if hasattr(os, "mkfifo"):
        os.mkfifo(home / "pipe")
        with pytest.raises(ToolError, match=r"is a named pipe \(FIFO\)"):
            call(info, path="pipe")
    make(tmp_path / "secret.txt", "s")
    with pytest.raises(ToolError, match="outside the folders"):
        call(info, path=str(tmp_path / "secret.txt"))
    with pytest.raises(ToolError, match=r"contains '\.\.'"):
        call(info, path="~/../secret.txt")
    with pytest.raises(ToolError, match="No such file"):
        call(info, path="missing.txt")


def test_file_info_through_a_link(home: Path) -> None:
    make(home / "real.txt", "x\n")
    try:
        (home / "shortcut.txt").symlink_to(home / "real.txt")
    except OSError as exc:
        pytest.skip(f"cannot create symlinks here: {exc}")
    info = call(tools(home)["file_info"], path="shortcut.txt")
    assert info["path"] == "~/real.txt".replace("/", os.sep)
    assert info["reached_through_link"] == "~/shortcut.txt".replace("/", os.sep)


@pytest.mark.skipif(not os.path.exists("/dev/null"), reason="needs /dev/null")
def test_device_files_are_refused_even_inside_a_root(tmp_path: Path) -> None:
    dev = Path("/dev")
    t = tools(dev, data_dir=tmp_path / "data")
    with pytest.raises(ToolError, match="is a device file"):
        call(t["file_info"], path="/dev/null")
    with pytest.raises(ToolError, match="is a device file"):
        call(t["read_text_file"], path="/dev/null")
    with pytest.raises(ToolError, match="is a device file"):
        call(t["rename_or_move"], source="/dev/null", destination="/dev/null2")
    with pytest.raises(ToolError, match="is a device file"):
        call(t["move_to_trash"], path="/dev/null")
    assert os.path.exists("/dev/null") and not os.path.exists("/dev/null2")
