"""Tests for the file tools that change things: folders, notes, moves, the trash, the log, undo."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.adapters.files import ACTION_LOG_NAME, PlatformTrash, files_tools
from botpsy_desktop.adapters.files.trash import Trashed
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Tool, ToolArgumentsError


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HOME and XDG_DATA_HOME (so the trash) in the test's own temp folder."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("USERPROFILE", str(folder))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    (folder / "Downloads").mkdir()
    (folder / "Documents").mkdir()
    (folder / "Downloads" / "report.pdf").write_bytes(b"%PDF-1.7 report")
    (folder / "Downloads" / "notes.txt").write_text("keep me\n", encoding="utf-8")
    return folder.resolve()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def trash_dir(tmp_path: Path) -> Path:
    return tmp_path / "xdg" / "Trash"


def tools(*roots: Path, data: Path, **kwargs: Any) -> dict[str, Tool]:
    return {t.name: t for t in files_tools(list(roots), data_dir=data, **kwargs)}


def call(tool: Tool, **arguments: Any) -> dict[str, Any]:
    result = tool.call(tool.validate(arguments))
    assert isinstance(result, dict)
    json.dumps(result)
    return result


def log(data: Path) -> list[dict[str, Any]]:
    file = data / ACTION_LOG_NAME
    if not file.exists():
        return []
    return [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]


def tree(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder``: file contents, None for folders."""
    found: dict[str, bytes | None] = {}
    for path in sorted(folder.rglob("*")):
        key = path.relative_to(folder).as_posix()
        found[key] = None if path.is_dir() else path.read_bytes()
    return found


@contextmanager
def unwritable(folder: Path) -> Iterator[None]:
    """Make ``folder`` refuse new and removed entries, even for root (immutable flag)."""
    if sys.platform == "win32":
        pytest.skip("needs POSIX permissions")
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("running as root without chattr: cannot make a folder unwritable")
    done = subprocess.run([chattr, "+i", str(folder)], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"chattr +i is not supported here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(folder)], check=True)


@pytest.fixture
def other_fs(tmp_path: Path) -> Iterator[Path]:
    """A folder on another filesystem than the temp folder, if there is one: tmpfs /dev/shm, or
    the disk (/var/tmp, the home folder) when the temp folder is on a tmpfs (tools/test.sh)."""
    here = os.stat(tmp_path).st_dev
    places = [Path("/dev/shm"), Path("/var/tmp"), Path.home()]
    other = [p for p in places if p.is_dir() and os.access(p, os.W_OK)]
    other = [p for p in other if os.stat(p).st_dev != here]
    if not other:
        pytest.skip("no second filesystem to move across")
    folder = Path(tempfile.mkdtemp(prefix="botpsy-test-", dir=other[0])).resolve()
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


# --- create_folder -------------------------------------------------------------------------


def test_create_folder_with_missing_parents_and_undo(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    result = call(t["create_folder"], path="~/Documents/pdfs/2025")
    assert result.pop("change_id") == log(data)[-1]["id"]  # an undo names exactly this change
    assert result == {
        "folder": str(Path("~/Documents/pdfs/2025")),
        "created": True,
        "also_created": [str(Path("~/Documents/pdfs"))],
    }
    assert (home / "Documents" / "pdfs" / "2025").is_dir()
    [entry] = log(data)
    assert entry["tool"] == "create_folder"
    assert entry["arguments"] == {"path": "~/Documents/pdfs/2025"}
    assert entry["result"] == result
    assert [f["path"] for f in entry["inverse"]["remove_folders"]] == [
        str(home / "Documents" / "pdfs" / "2025"),
        str(home / "Documents" / "pdfs"),
    ]
    undone = call(t["undo_last_file_change"])
    assert undone["undone"] == "create_folder of ~/Documents/pdfs/2025"
    assert "Removed the empty folder" in undone["done"]
    assert not (home / "Documents" / "pdfs").exists()
    assert log(data)[-1]["undoes"] == entry["id"]
    with pytest.raises(ToolError, match="no file change by the assistant left to undo"):
        call(t["undo_last_file_change"])


def test_create_folder_that_exists_changes_nothing(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    result = call(t["create_folder"], path="Documents")
    assert result["created"] is False and "exists already" in result["note"]
    assert log(data) == []
    with pytest.raises(ToolError, match="exists and is not a folder"):
        call(t["create_folder"], path="Downloads/notes.txt")


def test_create_folder_refuses_outside_and_dotdot(home: Path, data: Path, tmp_path: Path) -> None:
    t = tools(home, data=data)
    with pytest.raises(ToolError, match="outside the folders you may use"):
        call(t["create_folder"], path=str(tmp_path / "elsewhere"))
    with pytest.raises(ToolError, match=r"contains '\.\.'"):
        call(t["create_folder"], path="~/Documents/../../escape")
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "escape").exists()


def test_undo_keeps_a_created_folder_that_is_not_empty(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    call(t["create_folder"], path="Documents/new")
    (home / "Documents" / "new" / "mine.txt").write_text("user's", encoding="utf-8")
    with pytest.raises(ToolError, match="is not empty any more; it was kept"):
        call(t["undo_last_file_change"])
    assert (home / "Documents" / "new" / "mine.txt").exists()
    assert len(log(data)) == 1  # the failed undo is not logged as done


def test_create_folder_in_an_unwritable_folder_leaves_nothing(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    with unwritable(home / "Documents"), pytest.raises(ToolError, match="Nothing was changed"):
        call(t["create_folder"], path="Documents/a/b")
    assert tree(home / "Documents") == {}
    assert log(data) == []


def test_nothing_changes_when_the_action_log_cannot_be_written(home: Path, tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the data folder should be", encoding="utf-8")
    t = tools(home, data=blocked)
    with pytest.raises(ToolError, match=r"action log .* cannot be written.*nothing was changed"):
        call(t["create_folder"], path="Documents/pdfs")
    with pytest.raises(ToolError, match="cannot be written"):
        call(t["rename_or_move"], source="Downloads/report.pdf", destination="Documents")
    assert not (home / "Documents" / "pdfs").exists()
    assert (home / "Downloads" / "report.pdf").exists()


# --- write_text_note -----------------------------------------------------------------------


def test_write_text_note_and_undo(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    result = call(t["write_text_note"], path="Documents/shopping.md", text="- milk\n- bread")
    assert result.pop("change_id") == log(data)[-1]["id"]
    assert result == {"note": str(Path("~/Documents/shopping.md")), "size": 15, "lines": 2}
    assert (home / "Documents" / "shopping.md").read_text(encoding="utf-8") == "- milk\n- bread\n"
    entry = log(data)[0]
    assert entry["inverse"]["remove_note"]["sha256"]
    assert "text" not in entry["result"]
    call(t["undo_last_file_change"])
    assert not (home / "Documents" / "shopping.md").exists()


def test_write_text_note_never_overwrites(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    with pytest.raises(ToolError, match=r"already exists; a note never overwrites.*notes-2\.txt"):
        call(t["write_text_note"], path="Downloads/notes.txt", text="replaced?")
    assert (home / "Downloads" / "notes.txt").read_text(encoding="utf-8") == "keep me\n"
    assert log(data) == []


def test_write_text_note_refuses_other_types_and_missing_folders(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    with pytest.raises(ToolError, match=r"does not end in \.txt or \.md"):
        call(t["write_text_note"], path="Documents/run.sh", text="rm -rf ~")
    with pytest.raises(ToolError, match=r"does not exist.*create_folder"):
        call(t["write_text_note"], path="Documents/missing/n.md", text="x")
    with pytest.raises(ToolArgumentsError):
        t["write_text_note"].validate({"path": "a.md", "text": "x" * 100_001})
    assert tree(home / "Documents") == {}


def test_undo_keeps_a_note_the_user_changed(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    call(t["write_text_note"], path="Documents/todo.txt", text="one")
    note = home / "Documents" / "todo.txt"
    note.write_text("one\ntwo (added by the user)\n", encoding="utf-8")
    with pytest.raises(ToolError, match="was changed since the assistant wrote it, so it was kept"):
        call(t["undo_last_file_change"])
    assert note.read_text(encoding="utf-8") == "one\ntwo (added by the user)\n"


# --- rename_or_move ------------------------------------------------------------------------


def test_move_into_a_folder_and_undo(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    result = call(t["rename_or_move"], source="~/Downloads/report.pdf", destination="~/Documents")
    assert result.pop("change_id") == log(data)[-1]["id"]
    assert result == {
        "moved": str(Path("~/Downloads/report.pdf")),
        "to": str(Path("~/Documents/report.pdf")),
    }
    assert (home / "Documents" / "report.pdf").read_bytes() == b"%PDF-1.7 report"
    assert not (home / "Downloads" / "report.pdf").exists()
    undone = call(t["undo_last_file_change"])
    assert undone["done"] == (
        f"Moved {Path('~/Documents/report.pdf')} back to {Path('~/Downloads/report.pdf')}."
    )
    assert (home / "Downloads" / "report.pdf").read_bytes() == b"%PDF-1.7 report"
    assert not (home / "Documents" / "report.pdf").exists()


def test_move_to_a_folder_named_in_another_case_goes_into_it(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    summary = t["rename_or_move"].summarize(
        {"source": "downloads/REPORT.pdf", "destination": "documents"}
    )
    assert f"(it becomes {Path('~/Documents/report.pdf')})" in summary
    result = call(t["rename_or_move"], source="downloads/REPORT.pdf", destination="documents")
    assert result["to"] == str(Path("~/Documents/report.pdf"))
    assert (home / "Documents" / "report.pdf").read_bytes() == b"%PDF-1.7 report"
    assert not (home / "documents").exists()
    # a rename that only changes the case is a rename, not "already there"
    call(t["rename_or_move"], source="Downloads/notes.txt", destination="Downloads/Notes.txt")
    assert sorted(os.listdir(home / "Downloads")) == ["Notes.txt"]


def test_rename_a_file_and_a_folder(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    call(t["rename_or_move"], source="Downloads/notes.txt", destination="Downloads/old-notes.txt")
    assert (home / "Downloads" / "old-notes.txt").read_text(encoding="utf-8") == "keep me\n"
    call(t["rename_or_move"], source="Downloads", destination="Inbox")
    assert sorted(p.name for p in (home / "Inbox").iterdir()) == ["old-notes.txt", "report.pdf"]
    call(t["undo_last_file_change"])
    call(t["undo_last_file_change"])
    assert tree(home / "Downloads") == {"notes.txt": b"keep me\n", "report.pdf": b"%PDF-1.7 report"}
    assert not (home / "Inbox").exists()


def test_move_never_overwrites(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    (home / "Documents" / "report.pdf").write_bytes(b"the other report")
    before = tree(home)
    with pytest.raises(ToolError, match="already exists; nothing is ever overwritten"):
        call(t["rename_or_move"], source="Downloads/report.pdf", destination="Documents")
    with pytest.raises(ToolError, match="already exists"):
        call(
            t["rename_or_move"],
            source="Downloads/notes.txt",
            destination="Documents/report.pdf",
        )
    assert tree(home) == before
    assert log(data) == []


def test_move_into_an_unwritable_folder_leaves_the_source(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    before = tree(home)
    with (
        unwritable(home / "Documents"),
        pytest.raises(ToolError, match=r"Could not move .*Nothing was changed.*is where it was"),
    ):
        call(t["rename_or_move"], source="Downloads/report.pdf", destination="Documents")
    assert tree(home) == before
    assert log(data) == []


def test_move_out_of_an_unwritable_folder_leaves_the_source(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    before = tree(home)
    with unwritable(home / "Downloads"), pytest.raises(ToolError, match="Nothing was changed"):
        call(t["rename_or_move"], source="Downloads/report.pdf", destination="Documents")
    assert tree(home) == before  # the hard link made on the way was taken back


def test_move_refusals(home: Path, data: Path, tmp_path: Path) -> None:
    docs = home / "Documents"
    t = tools(home, docs, data=data)
    move = t["rename_or_move"]
    before = tree(home)
    with pytest.raises(ToolError, match="is one of the folders you allowed"):
        call(move, source="~/Documents", destination="~/Downloads")
    with pytest.raises(ToolError, match="is one of the folders you allowed"):
        call(move, source="~", destination="~/Downloads/home")
    with pytest.raises(ToolError, match="cannot be moved into itself"):
        call(move, source="Downloads", destination="Downloads/inner")
    with pytest.raises(ToolError, match="is already there"):
        call(move, source="Downloads/notes.txt", destination="Downloads")
    with pytest.raises(ToolError, match=r"does not exist.*create_folder"):
        call(move, source="Downloads/notes.txt", destination="Documents/pdfs/")
    with pytest.raises(ToolError, match=r"does not exist.*create_folder"):
        call(move, source="Downloads/notes.txt", destination="Documents/pdfs/notes.txt")
    with pytest.raises(ToolError, match="outside the folders you may use"):
        call(move, source="Downloads/notes.txt", destination=str(tmp_path))
    with pytest.raises(ToolError, match=r"contains '\.\.'"):
        call(move, source="Downloads/../Downloads/notes.txt", destination="Documents")
    with pytest.raises(ToolError, match="No such file"):
        call(move, source="Downloads/missing.txt", destination="Documents")
    assert tree(home) == before
    assert log(data) == []


def test_links_are_never_moved_or_followed(home: Path, data: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret", encoding="utf-8")
    try:
        (home / "Downloads" / "escape").symlink_to(outside, target_is_directory=True)
        (home / "Downloads" / "inner.txt").symlink_to(home / "Downloads" / "notes.txt")
    except OSError as exc:
        pytest.skip(f"cannot create symlinks here: {exc}")
    t = tools(home, data=data)
    with pytest.raises(ToolError, match="is a link"):
        call(t["rename_or_move"], source="Downloads/inner.txt", destination="Documents")
    with pytest.raises(ToolError, match="is a link"):
        call(t["move_to_trash"], path="Downloads/escape")
    with pytest.raises(ToolError, match="outside the folders"):
        call(t["rename_or_move"], source="Downloads/escape/secret.txt", destination="Documents")
    with pytest.raises(ToolError, match="outside the folders"):
        call(t["rename_or_move"], source="Downloads/notes.txt", destination="Downloads/escape")
    assert (outside / "secret.txt").exists() and not (outside / "notes.txt").exists()
    assert (home / "Downloads" / "notes.txt").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_pipes_are_never_moved_or_trashed(home: Path, data: Path) -> None:
    os.mkfifo(home / "Downloads" / "pipe")
    t = tools(home, data=data)
    with pytest.raises(ToolError, match=r"is a named pipe \(FIFO\); the assistant never"):
        call(t["rename_or_move"], source="Downloads/pipe", destination="Documents")
    with pytest.raises(ToolError, match="named pipe"):
        call(t["move_to_trash"], path="Downloads/pipe")
    assert (home / "Downloads" / "pipe").exists()


def test_move_across_filesystems_copies_verifies_and_undoes(
    home: Path, data: Path, other_fs: Path
) -> None:
    t = tools(home, other_fs, data=data)
    payload = os.urandom(3_000_000)
    (home / "Downloads" / "video.bin").write_bytes(payload)
    result = call(t["rename_or_move"], source="Downloads/video.bin", destination=str(other_fs))
    assert result["how"] == "copied to the other drive, verified, then removed the original"
    assert (other_fs / "video.bin").read_bytes() == payload
    assert not (home / "Downloads" / "video.bin").exists()
    assert sorted(os.listdir(other_fs)) == ["video.bin"]  # no partial copy left behind
    call(t["undo_last_file_change"])
    assert (home / "Downloads" / "video.bin").read_bytes() == payload
    assert os.listdir(other_fs) == []


def test_a_folder_is_not_moved_across_filesystems(home: Path, data: Path, other_fs: Path) -> None:
    t = tools(home, other_fs, data=data)
    with pytest.raises(ToolError, match="folders are only moved within one drive"):
        call(t["rename_or_move"], source="Downloads", destination=str(other_fs))
    assert os.listdir(other_fs) == []
    assert (home / "Downloads" / "report.pdf").exists()


def test_a_failed_move_across_filesystems_leaves_the_source(
    home: Path, data: Path, other_fs: Path
) -> None:
    t = tools(home, other_fs, data=data)
    before = tree(home)
    # the copy succeeds, but the original cannot be removed: the copy is taken back
    with unwritable(home / "Downloads"), pytest.raises(ToolError, match="Nothing was changed"):
        call(t["rename_or_move"], source="Downloads/report.pdf", destination=str(other_fs))
    assert tree(home) == before
    assert os.listdir(other_fs) == []
    # the copy cannot even be written: nothing is left on either side
    (other_fs / "in.txt").write_text("from tmpfs", encoding="utf-8")
    with unwritable(home / "Documents"), pytest.raises(ToolError, match="Nothing was changed"):
        call(t["rename_or_move"], source=str(other_fs / "in.txt"), destination="Documents")
    assert os.listdir(other_fs) == ["in.txt"]
    assert tree(home / "Documents") == {}
    assert log(data) == []


# --- move_to_trash -------------------------------------------------------------------------


def test_trash_goes_to_the_freedesktop_trash_and_undo_restores(
    home: Path, data: Path, trash_dir: Path
) -> None:
    t = tools(home, data=data)
    result = call(t["move_to_trash"], path="Downloads/report.pdf")
    assert result == {"trashed": str(Path("~/Downloads/report.pdf")), "can_undo": True}
    assert not (home / "Downloads" / "report.pdf").exists()
    assert (trash_dir / "files" / "report.pdf").read_bytes() == b"%PDF-1.7 report"
    info = (trash_dir / "info" / "report.pdf.trashinfo").read_text(encoding="utf-8")
    assert info.startswith("[Trash Info]\n")
    assert f"Path={home / 'Downloads' / 'report.pdf'}\n" in info
    assert "DeletionDate=" in info
    entry = log(data)[0]
    assert entry["tool"] == "move_to_trash"
    assert entry["inverse"]["restore_from_trash"]["name"] == "report.pdf"

    undone = call(t["undo_last_file_change"])
    assert undone["done"] == f"Restored {Path('~/Downloads/report.pdf')} from the trash."
    assert (home / "Downloads" / "report.pdf").read_bytes() == b"%PDF-1.7 report"
    assert os.listdir(trash_dir / "files") == []
    assert os.listdir(trash_dir / "info") == []


def test_trash_same_name_twice_and_undo_in_order(home: Path, data: Path, trash_dir: Path) -> None:
    t = tools(home, data=data)
    call(t["move_to_trash"], path="Downloads/notes.txt")
    (home / "Downloads" / "notes.txt").write_text("second\n", encoding="utf-8")
    call(t["move_to_trash"], path="Downloads/notes.txt")
    assert sorted(os.listdir(trash_dir / "files")) == ["notes 1.txt", "notes.txt"]
    call(t["undo_last_file_change"])
    assert (home / "Downloads" / "notes.txt").read_text(encoding="utf-8") == "second\n"
    assert os.listdir(trash_dir / "files") == ["notes.txt"]
    with pytest.raises(ToolError, match="exists again; nothing is ever overwritten"):
        call(t["undo_last_file_change"])
    (home / "Downloads" / "notes.txt").rename(home / "Downloads" / "second.txt")
    call(t["undo_last_file_change"])
    assert (home / "Downloads" / "notes.txt").read_text(encoding="utf-8") == "keep me\n"


def test_trash_a_folder_and_restore_it(home: Path, data: Path, trash_dir: Path) -> None:
    t = tools(home, data=data)
    before = tree(home / "Downloads")
    call(t["move_to_trash"], path="Downloads")
    assert not (home / "Downloads").exists()
    assert tree(trash_dir / "files" / "Downloads") == before
    call(t["undo_last_file_change"])
    assert tree(home / "Downloads") == before


def test_trash_defaults_to_the_home_data_folder_and_relative_paths(
    home: Path, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_DATA_HOME")
    share = home / ".local" / "share"
    (share / "app").mkdir(parents=True)
    (share / "app" / "cache.txt").write_text("cached", encoding="utf-8")
    t = tools(home, data=data)
    call(t["move_to_trash"], path="~/.local/share/app/cache.txt")
    call(t["move_to_trash"], path="~/Downloads/notes.txt")
    trash = share / "Trash"
    assert sorted(os.listdir(trash / "files")) == ["cache.txt", "notes.txt"]
    # inside the data folder the spec's relative form is used, elsewhere the absolute path
    assert "Path=app/cache.txt\n" in (trash / "info" / "cache.txt.trashinfo").read_text("utf-8")
    info = (trash / "info" / "notes.txt.trashinfo").read_text(encoding="utf-8")
    assert f"Path={home / 'Downloads' / 'notes.txt'}\n" in info
    call(t["undo_last_file_change"])
    call(t["undo_last_file_change"])
    assert (share / "app" / "cache.txt").read_text(encoding="utf-8") == "cached"
    assert (home / "Downloads" / "notes.txt").read_text(encoding="utf-8") == "keep me\n"


def test_trash_refuses_roots(home: Path, data: Path) -> None:
    t = tools(home, home / "Documents", data=data)
    with pytest.raises(ToolError, match="one of the folders you allowed"):
        call(t["move_to_trash"], path="~")
    with pytest.raises(ToolError, match="one of the folders you allowed"):
        call(t["move_to_trash"], path="~/Documents")
    assert (home / "Documents").is_dir()


def test_undo_of_a_trashed_file_emptied_from_the_trash(
    home: Path, data: Path, trash_dir: Path
) -> None:
    t = tools(home, data=data)
    call(t["move_to_trash"], path="Downloads/notes.txt")
    (trash_dir / "files" / "notes.txt").unlink()  # the user emptied the trash
    with pytest.raises(ToolError, match="no longer in the trash"):
        call(t["undo_last_file_change"])


class NoUndoTrash:
    """Stands in for the macOS and Windows trash, which this machine does not have."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir

    def trash(self, path: Path) -> Trashed:
        self.bin_dir.mkdir(exist_ok=True)
        path.rename(self.bin_dir / path.name)
        return Trashed("the system trash", None, "undo of trash is not supported on this platform")

    def restore(self, inverse: dict[str, Any]) -> Path:
        raise AssertionError("never called for an irreversible entry")


def test_undo_says_when_trash_cannot_be_undone_here(home: Path, data: Path, tmp_path: Path) -> None:
    t = tools(home, data=data, trash=NoUndoTrash(tmp_path / "bin"))
    call(t["create_folder"], path="Documents/pdfs")
    result = call(t["move_to_trash"], path="Downloads/report.pdf")
    assert result["can_undo"] is False
    assert result["note"] == "Undo of trash is not supported on this platform"
    assert log(data)[-1]["inverse"] is None
    undone = call(t["undo_last_file_change"])  # the older, reversible change is undone
    assert undone["undone"] == "create_folder of Documents/pdfs"
    assert "cannot be undone were skipped" in undone["note"]
    assert "not supported on this platform" in undone["note"]
    with pytest.raises(ToolError, match="cannot be undone: undo of trash is not supported"):
        call(t["undo_last_file_change"])


def test_platform_trash_restore_says_not_supported() -> None:
    with pytest.raises(ToolError, match="not supported on this platform"):
        PlatformTrash().restore({})


# --- undo ----------------------------------------------------------------------------------


def test_undo_walks_back_through_the_log(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    start = tree(home)
    call(t["create_folder"], path="Documents/pdfs")
    call(t["rename_or_move"], source="Downloads/report.pdf", destination="Documents/pdfs")
    call(t["write_text_note"], path="Documents/pdfs/README.md", text="Moved from Downloads.")
    call(t["move_to_trash"], path="Downloads/notes.txt")
    kinds = [call(t["undo_last_file_change"])["undone"].split()[0] for _ in range(4)]
    assert kinds == ["move_to_trash", "write_text_note", "rename_or_move", "create_folder"]
    assert tree(home) == start
    entries = log(data)
    assert len(entries) == 8
    for entry in entries:
        assert {"id", "time", "tool", "arguments", "result", "inverse"} <= set(entry)
    assert [e["undoes"] for e in entries[4:]] == [e["id"] for e in reversed(entries[:4])]


def test_undo_refuses_when_the_moved_file_is_gone(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    call(t["rename_or_move"], source="Downloads/report.pdf", destination="Documents")
    (home / "Documents" / "report.pdf").rename(home / "Documents" / "renamed-by-user.pdf")
    with pytest.raises(ToolError, match="is not there any more"):
        call(t["undo_last_file_change"])
    (home / "Documents" / "renamed-by-user.pdf").rename(home / "Documents" / "report.pdf")
    (home / "Downloads" / "report.pdf").write_bytes(b"a new download with the same name")
    with pytest.raises(ToolError, match="exists again; nothing is ever overwritten"):
        call(t["undo_last_file_change"])
    assert (home / "Documents" / "report.pdf").read_bytes() == b"%PDF-1.7 report"


def test_undo_stays_inside_the_allowed_folders(home: Path, data: Path) -> None:
    call(
        tools(home, data=data)["rename_or_move"],
        source="Downloads/report.pdf",
        destination="Documents",
    )
    narrower = tools(home / "Documents", data=data)  # Downloads is no longer allowed
    with pytest.raises(ToolError, match="no longer inside the folders you allowed"):
        call(narrower["undo_last_file_change"])
    assert (home / "Documents" / "report.pdf").exists()


def test_a_damaged_log_line_is_skipped(home: Path, data: Path) -> None:
    t = tools(home, data=data)
    call(t["create_folder"], path="Documents/a")
    with (data / ACTION_LOG_NAME).open("a", encoding="utf-8") as fh:
        fh.write("{not json\n")
    call(t["undo_last_file_change"])
    assert not (home / "Documents" / "a").exists()
