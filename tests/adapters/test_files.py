"""Tests for the read-only files adapter: the folder jail and the three file tools."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.adapters.files import FolderJail, files_tools
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tool, ToolArgumentsError


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder of its own for each test (HOME set to it)."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("USERPROFILE", str(folder))
    return folder.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to home that the tools must never reveal."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("top secret\n", encoding="utf-8")
    (folder / "secret-report.pdf").write_bytes(b"%PDF-1.7\n")
    return folder.resolve()


@pytest.fixture
def tree(home: Path) -> Path:
    """home/
    Documents/ notes.txt, Report.PDF, Invoices/ invoice-2024.pdf, a/b/c/deep-invoice.txt
    Music/
    .config/ invoice-settings.txt
    .hidden-file.txt, readme.md
    """
    docs = home / "Documents"
    (docs / "Invoices" / "a" / "b" / "c").mkdir(parents=True)
    (home / "Music").mkdir()
    (home / ".config").mkdir()
    (docs / "notes.txt").write_text("Buy milk.\nCall Ann.\n", encoding="utf-8")
    (docs / "Report.PDF").write_bytes(b"%PDF-1.7\x00binary")
    (docs / "Invoices" / "invoice-2024.pdf").write_bytes(b"%PDF")
    (docs / "Invoices" / "a" / "b" / "c" / "deep-invoice.txt").write_text("x", encoding="utf-8")
    (home / ".config" / "invoice-settings.txt").write_text("x", encoding="utf-8")
    (home / ".hidden-file.txt").write_text("hidden", encoding="utf-8")
    (home / "readme.md").write_text("# Hello\n", encoding="utf-8")
    return home


def symlink(link: Path, target: Path) -> None:
    try:
        link.symlink_to(target, target_is_directory=target.is_dir())
    except (OSError, NotImplementedError) as exc:  # e.g. Windows without the privilege
        pytest.skip(f"cannot create symlinks here: {exc}")


def tools_by_name(*roots: Path, **kwargs: Any) -> dict[str, Tool]:
    return {t.name: t for t in files_tools(list(roots), **kwargs)}


def call(tool: Tool, **arguments: Any) -> dict[str, Any]:
    result = tool.call(tool.validate(arguments))
    assert isinstance(result, dict)
    json.dumps(result)  # every result must be JSON-serialisable
    return result


# --- the jail ------------------------------------------------------------------------------


def test_jail_resolves_tilde_relative_and_absolute(tree: Path) -> None:
    jail = FolderJail([tree])
    notes = tree / "Documents" / "notes.txt"
    assert jail.resolve("~/Documents/notes.txt") == notes
    assert jail.resolve("Documents/notes.txt") == notes
    assert jail.resolve(str(notes)) == notes
    assert jail.resolve("~") == tree
    assert jail.resolve(".") == tree


def test_jail_relative_paths_use_the_first_root(tree: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "todo.txt").write_text("t", encoding="utf-8")
    jail = FolderJail([other, tree])
    assert jail.resolve("todo.txt") == other.resolve() / "todo.txt"
    assert jail.resolve("~/readme.md") == tree / "readme.md"  # the second root is allowed too
    with pytest.raises(ToolError, match="No such file or folder"):
        jail.resolve("readme.md")


def test_jail_takes_a_name_said_in_another_case_when_only_one_entry_matches(tree: Path) -> None:
    jail = FolderJail([tree])
    docs = tree / "Documents"
    assert jail.resolve("documents/NOTES.TXT") == docs / "notes.txt"
    assert jail.resolve("~/documents/report.pdf") == docs / "Report.PDF"
    assert jail.resolve_entry("DOCUMENTS/invoices") == docs / "Invoices"
    # a new entry: its folders are matched that way, its own name is kept as written
    assert jail.resolve_new("documents/receipts/march.txt") == docs / "receipts" / "march.txt"
    assert jail.resolve_new("~/documents/Notes.txt") == docs / "Notes.txt"
    # two entries that differ only in case: neither is guessed
    (tree / "PHOTOS").mkdir()
    (tree / "Photos").mkdir()
    with pytest.raises(ToolError) as info:
        jail.resolve("photos")
    assert "No such file or folder: 'photos'" in str(info.value)
    assert "~/PHOTOS" in str(info.value) and "~/Photos" in str(info.value)
    # outside the folders it still says "outside", whatever the case
    with pytest.raises(ToolError, match="outside the folders"):
        jail.resolve(str(tree.parent / "OUTSIDE" / "SECRET.TXT"))


def test_jail_names_the_nearest_entries_when_a_name_is_not_there(tree: Path) -> None:
    jail = FolderJail([tree])
    with pytest.raises(ToolError) as info:
        jail.resolve("~/Document/notes.txt")
    assert str(info.value).startswith("No such file or folder: '~/Document/notes.txt'.")
    assert f"Did you mean {Path('~/Documents')}?" in str(info.value)
    with pytest.raises(ToolError) as info:
        jail.resolve_entry("Documents/note.txt")
    assert f"Did you mean {Path('~/Documents/notes.txt')}?" in str(info.value)
    # hidden entries are not offered, and nothing far from the name is
    with pytest.raises(ToolError) as info:
        jail.resolve("~/config")
    assert "Did you mean" not in str(info.value)
    assert "Check the name with list_folder or find_files." in str(info.value)


def test_jail_refuses_dotdot_even_inside(tree: Path) -> None:
    jail = FolderJail([tree])
    for path in ("Documents/../readme.md", "~/Documents/../readme.md", "../outside/secret.txt"):
        with pytest.raises(ToolError, match=r"contains '\.\.'"):
            jail.resolve(path)


def test_jail_refuses_outside_and_names_allowed_folders(tree: Path, outside: Path) -> None:
    jail = FolderJail([tree])
    with pytest.raises(ToolError) as info:
        jail.resolve(str(outside / "secret.txt"))
    message = str(info.value)
    assert "is outside the folders you may use (~)" in message
    assert "Settings" in message
    # a missing file outside is "outside", not "missing": nothing is revealed about it
    with pytest.raises(ToolError, match="outside the folders"):
        jail.resolve(str(outside / "nope.txt"))


def test_jail_missing_and_empty_paths(tree: Path) -> None:
    jail = FolderJail([tree])
    with pytest.raises(ToolError, match=r"No such file or folder: '~/nothing\.txt'"):
        jail.resolve("~/nothing.txt")
    with pytest.raises(ToolError, match="empty"):
        jail.resolve("  ")
    with pytest.raises(ToolError, match="NUL"):
        jail.resolve("a\x00b")


def test_jail_follows_symlinks_and_judges_the_target(tree: Path, outside: Path) -> None:
    symlink(tree / "escape.txt", outside / "secret.txt")
    symlink(tree / "escape-dir", outside)
    symlink(tree / "inner.txt", tree / "readme.md")
    jail = FolderJail([tree])
    with pytest.raises(ToolError, match="outside the folders"):
        jail.resolve("escape.txt")
    with pytest.raises(ToolError, match="outside the folders"):
        jail.resolve("~/escape-dir/secret.txt")
    assert jail.resolve("inner.txt") == tree / "readme.md"


def test_jail_root_given_through_a_symlink(tree: Path, tmp_path: Path) -> None:
    link = tmp_path / "home-link"
    symlink(link, tree)
    jail = FolderJail([link])
    assert jail.roots == (tree,)
    assert jail.resolve(str(link / "readme.md")) == tree / "readme.md"


def test_jail_display(tree: Path, outside: Path) -> None:
    jail = FolderJail([tree, outside])
    assert jail.display(tree) == "~"
    assert jail.display(tree / "Documents" / "notes.txt") == str(Path("~/Documents/notes.txt"))
    assert jail.display(outside / "secret.txt") == str(outside / "secret.txt")
    assert jail.allowed() == f"~, {outside}"


# --- list_folder ---------------------------------------------------------------------------


def test_list_folder_sorted_folders_first(tree: Path) -> None:
    result = call(tools_by_name(tree)["list_folder"])
    assert result["folder"] == "~"
    names = [e["name"] for e in result["entries"]]
    assert names == ["Documents", "Music", "readme.md"]
    assert result["total"] == 3
    assert result["truncated"] is False
    assert result["hidden_not_shown"] == 2
    readme = result["entries"][2]
    assert readme["kind"] == "file"
    assert readme["size"] == len("# Hello\n")
    assert datetime.fromisoformat(readme["modified"]).tzinfo is not None
    assert result["entries"][0]["kind"] == "folder"
    assert "size" not in result["entries"][0]


def test_list_folder_subfolder_and_case_insensitive_sort(tree: Path) -> None:
    result = call(tools_by_name(tree)["list_folder"], path="~/Documents")
    assert result["folder"] == str(Path("~/Documents"))
    assert [e["name"] for e in result["entries"]] == ["Invoices", "notes.txt", "Report.PDF"]


def test_list_folder_hidden(tree: Path) -> None:
    result = call(tools_by_name(tree)["list_folder"], show_hidden=True)
    names = [e["name"] for e in result["entries"]]
    assert names == [".config", "Documents", "Music", ".hidden-file.txt", "readme.md"]
    assert "hidden_not_shown" not in result


def test_list_folder_limit_truncates(tree: Path) -> None:
    tool = tools_by_name(tree)["list_folder"]
    result = call(tool, limit=2)
    assert [e["name"] for e in result["entries"]] == ["Documents", "Music"]
    assert result["total"] == 3
    assert result["truncated"] is True
    assert "first 2 of 3" in result["note"]
    with pytest.raises(ToolArgumentsError):
        tool.validate({"limit": 0})
    with pytest.raises(ToolArgumentsError):
        tool.validate({"limit": 1001})


def test_list_folder_refuses_files_outside_and_dotdot(tree: Path, outside: Path) -> None:
    tool = tools_by_name(tree)["list_folder"]
    with pytest.raises(ToolError, match="is a file, not a folder"):
        call(tool, path="~/readme.md")
    with pytest.raises(ToolError, match="outside the folders you may use"):
        call(tool, path=str(outside))
    with pytest.raises(ToolError, match=r"contains '\.\.'"):
        call(tool, path="~/Documents/..")


def test_list_folder_shows_escaping_symlinks_as_links_without_following(
    tree: Path, outside: Path
) -> None:
    symlink(tree / "escape.txt", outside / "secret.txt")
    symlink(tree / "escape-dir", outside)
    symlink(tree / "inner", tree / "Documents")
    tool = tools_by_name(tree)["list_folder"]
    entries = {e["name"]: e for e in call(tool)["entries"]}
    for name in ("escape.txt", "escape-dir"):
        assert entries[name]["kind"] == "link"
        assert "size" not in entries[name]
        assert "outside" in entries[name]["points_to"]
    assert entries["inner"] == {
        **entries["inner"],
        "kind": "link",
        "points_to": str(Path("~/Documents")),
    }
    with pytest.raises(ToolError, match="outside the folders you may use"):
        call(tool, path="~/escape-dir")
    dumped = json.dumps(call(tool))
    assert "secret" not in dumped
    assert str(outside) not in dumped


def test_list_folder_default_is_first_root_when_home_not_allowed(tree: Path, outside: Path) -> None:
    tools = tools_by_name(outside)
    tool = tools["list_folder"]
    # the prompt's schemas have no defaults: the description names the folder used
    path = tool.parameters_schema()["properties"]["path"]
    assert path["description"].endswith(f"Default: {json.dumps(str(outside))}.")
    folder = tools["find_files"].parameters_schema()["properties"]["folder"]
    assert folder["description"].endswith(f"Default: {json.dumps(str(outside))}.")
    assert tool.args_model().path == str(outside)  # type: ignore[attr-defined]
    result = call(tool)
    assert result["folder"] == str(outside)
    assert [e["name"] for e in result["entries"]] == ["secret-report.pdf", "secret.txt"]
    assert call(tool, path="")["folder"] == str(outside)
    with pytest.raises(ToolError, match=rf"outside the folders you may use \({outside}\)"):
        call(tool, path="~")


# --- find_files ----------------------------------------------------------------------------


def paths(result: dict[str, Any]) -> list[str]:
    return [m["path"].replace(os.sep, "/") for m in result["matches"]]


def test_find_by_substring_is_case_insensitive_and_skips_hidden(tree: Path) -> None:
    result = call(tools_by_name(tree)["find_files"], pattern="INVOICE")
    assert paths(result) == [
        "~/Documents/Invoices",
        "~/Documents/Invoices/invoice-2024.pdf",
        "~/Documents/Invoices/a/b/c/deep-invoice.txt",
    ]
    assert result["count"] == 3
    assert result["truncated"] is False
    assert result["matches"][0]["kind"] == "folder"
    assert result["matches"][1]["kind"] == "file"
    assert result["matches"][1]["size"] == 4
    assert datetime.fromisoformat(result["matches"][1]["modified"]).tzinfo is not None


def test_find_by_glob(tree: Path) -> None:
    find = tools_by_name(tree)["find_files"]
    result = call(find, pattern="*.pdf")
    assert paths(result) == ["~/Documents/Report.PDF", "~/Documents/Invoices/invoice-2024.pdf"]
    result = call(find, pattern="notes.???", folder="~/Documents")
    assert paths(result) == ["~/Documents/notes.txt"]


def test_find_hidden_only_when_pattern_starts_with_dot(tree: Path) -> None:
    find = tools_by_name(tree)["find_files"]
    assert "~/.config/invoice-settings.txt" not in paths(call(find, pattern="*.txt"))
    assert paths(call(find, pattern=".hidden")) == ["~/.hidden-file.txt"]
    assert paths(call(find, pattern=".conf*")) == ["~/.config"]


def test_find_depth_limit(tree: Path) -> None:
    find = tools_by_name(tree)["find_files"]
    assert paths(call(find, pattern="invoice", max_depth=1)) == []
    assert paths(call(find, pattern="invoice", max_depth=3)) == [
        "~/Documents/Invoices",
        "~/Documents/Invoices/invoice-2024.pdf",
    ]
    assert len(call(find, pattern="invoice", max_depth=6)["matches"]) == 3
    assert paths(call(find, pattern="*.pdf", folder="Documents", max_depth=1)) == [
        "~/Documents/Report.PDF"
    ]


def test_find_limit_and_visit_bound(tree: Path) -> None:
    result = call(tools_by_name(tree)["find_files"], pattern="invoice", limit=1)
    assert paths(result) == ["~/Documents/Invoices"]
    assert result["truncated"] is True
    assert "Stopped after 1 matches" in result["note"]

    bounded = tools_by_name(tree, max_visited=3)["find_files"]
    result = call(bounded, pattern="deep")
    assert result["matches"] == []
    assert result["truncated"] is True
    assert "Stopped after looking at 3 entries" in result["note"]


def test_find_refuses_bad_patterns_and_folders(tree: Path, outside: Path) -> None:
    find = tools_by_name(tree)["find_files"]
    with pytest.raises(ToolError, match="patterns match names only"):
        call(find, pattern="Documents/*.pdf")
    # no pattern (or a blank one) matches every name
    assert call(find, pattern="   ", max_depth=1)["count"] == 3
    assert call(find, max_depth=1)["count"] == 3
    with pytest.raises(ToolArgumentsError):
        find.validate({"limit": 0})
    with pytest.raises(ToolError, match="outside the folders you may use"):
        call(find, pattern="secret", folder=str(outside))
    with pytest.raises(ToolError, match="is a file, not a folder"):
        call(find, pattern="x", folder="readme.md")


def test_find_never_follows_symlinked_folders(tree: Path, outside: Path) -> None:
    symlink(tree / "Documents" / "escape-dir", outside)
    symlink(tree / "Music" / "loop", tree)
    result = call(tools_by_name(tree)["find_files"], pattern="secret")
    assert result["matches"] == []
    result = call(tools_by_name(tree)["find_files"], pattern="escape")
    assert result["matches"] == [
        {**result["matches"][0], "path": str(Path("~/Documents/escape-dir")), "kind": "link"}
    ]
    assert "outside" in result["matches"][0]["points_to"]
    assert str(outside) not in json.dumps(result)
    # a symlink loop inside the root is not entered either
    assert len(call(tools_by_name(tree)["find_files"], pattern="readme")["matches"]) == 1


# --- read_text_file ------------------------------------------------------------------------


def test_read_text_file(tree: Path) -> None:
    read = tools_by_name(tree)["read_text_file"]
    result = call(read, path="~/Documents/notes.txt")
    assert result == {
        "path": str(Path("~/Documents/notes.txt")),
        "size": 20,
        "text": "Buy milk.\nCall Ann.\n",
        "truncated": False,
    }
    assert call(read, path="Documents/notes.txt")["text"] == "Buy milk.\nCall Ann.\n"
    assert call(read, path=str(tree / "readme.md"))["text"] == "# Hello\n"


def test_read_truncates_to_max_read_bytes(home: Path) -> None:
    (home / "big.txt").write_text("é" * 1000, encoding="utf-8")  # 2000 bytes
    read = tools_by_name(home, max_read_bytes=1001)["read_text_file"]
    result = call(read, path="big.txt")
    assert result["size"] == 2000
    assert result["truncated"] is True
    assert result["text"] == "é" * 500  # the half character at the cut is dropped, not garbled
    assert "replaced_characters" not in result
    assert "2,000 bytes" in result["note"]


def test_read_max_chars(home: Path) -> None:
    (home / "long.txt").write_text("abcdefghij", encoding="utf-8")
    result = call(tools_by_name(home)["read_text_file"], path="long.txt", max_chars=4)
    assert result["text"] == "abcd"
    assert result["truncated"] is True
    assert "first 4 characters" in result["note"]


def test_read_refuses_binary(tree: Path, home: Path) -> None:
    read = tools_by_name(tree)["read_text_file"]
    with pytest.raises(ToolError, match=r"This looks like a binary file \(.*Report\.PDF"):
        call(read, path="~/Documents/Report.PDF")
    (home / "latin.bin").write_bytes(bytes(range(0x80, 0x100)) * 4)
    with pytest.raises(ToolError, match="it cannot be read as text"):
        call(read, path="latin.bin")


def test_read_accepts_text_with_a_few_bad_bytes(home: Path) -> None:
    (home / "mostly.txt").write_bytes(b"a" * 500 + b"\xff" + b"b" * 500)
    result = call(tools_by_name(home)["read_text_file"], path="mostly.txt")
    assert result["text"] == "a" * 500 + "\ufffd" + "b" * 500
    assert result["replaced_characters"] == 1


def test_read_boms(home: Path) -> None:
    (home / "utf8.txt").write_bytes(b"\xef\xbb\xbfhello")
    (home / "utf16.txt").write_text("hello wörld", encoding="utf-16")
    read = tools_by_name(home)["read_text_file"]
    assert call(read, path="utf8.txt")["text"] == "hello"
    assert call(read, path="utf16.txt")["text"] == "hello wörld"


def test_read_refuses_folders_missing_dotdot_and_outside(tree: Path, outside: Path) -> None:
    read = tools_by_name(tree)["read_text_file"]
    with pytest.raises(ToolError, match=r"is a folder, not a file\..*list_folder"):
        call(read, path="~/Documents")
    with pytest.raises(ToolError, match="No such file or folder"):
        call(read, path="~/Documents/missing.txt")
    with pytest.raises(ToolError, match=r"contains '\.\.'"):
        call(read, path="~/Documents/../readme.md")
    with pytest.raises(ToolError, match=r"outside the folders you may use \(~\)"):
        call(read, path=str(outside / "secret.txt"))


def test_read_refuses_symlink_escapes(tree: Path, outside: Path) -> None:
    symlink(tree / "escape.txt", outside / "secret.txt")
    symlink(tree / "escape-dir", outside)
    symlink(tree / "inner.txt", tree / "readme.md")
    read = tools_by_name(tree)["read_text_file"]
    with pytest.raises(ToolError, match="outside the folders you may use"):
        call(read, path="escape.txt")
    with pytest.raises(ToolError, match="outside the folders you may use"):
        call(read, path="~/escape-dir/secret.txt")
    result = call(read, path="inner.txt")
    assert result["text"] == "# Hello\n"
    assert result["path"] == "~/readme.md".replace("/", os.sep)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_read_refuses_special_files_without_blocking(home: Path) -> None:
    os.mkfifo(home / "pipe")
    with pytest.raises(ToolError, match=r"is a named pipe \(FIFO\); the assistant never opens"):
        call(tools_by_name(home)["read_text_file"], path="pipe")


# --- declarations --------------------------------------------------------------------------


def test_without_a_data_folder_only_read_tools(home: Path) -> None:
    tools = files_tools([home])
    assert [t.name for t in tools] == [
        "list_folder",
        "find_files",
        "read_text_file",
        "search_text",
        "file_info",
    ]
    for tool in tools:
        assert tool.effects == frozenset({Effect.READ})
        assert tool.read_only


def test_change_tools_and_their_effects(home: Path, tmp_path: Path) -> None:
    tools = {t.name: t for t in files_tools([home], data_dir=tmp_path / "data")}
    effects = {name: sorted(e.value for e in t.effects) for name, t in tools.items()}
    assert effects == {
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


def test_tool_schemas_are_described_and_typed(home: Path, tmp_path: Path) -> None:
    expected = {
        "list_folder": {"path": "string", "show_hidden": "boolean", "limit": "integer"},
        "find_files": {
            "pattern": "string",
            "folder": "string",
            "kind": "string",
            "extensions": "string",
            "min_size": "string",
            "max_size": "string",
            "modified_after": "string",
            "modified_before": "string",
            "limit": "integer",
            "max_depth": "integer",
        },
        "read_text_file": {"path": "string", "max_chars": "integer"},
        "search_text": {
            "phrase": "string",
            "folder": "string",
            "pattern": "string",
            "limit": "integer",
            "max_depth": "integer",
        },
        "file_info": {"path": "string"},
        "create_folder": {"path": "string"},
        "write_text_note": {"path": "string", "text": "string"},
        "rename_or_move": {"source": "string", "destination": "string"},
        "move_to_trash": {"path": "string"},
        "undo_last_file_change": {"change": "string"},
    }
    tools = {t.name: t for t in files_tools([home], data_dir=tmp_path / "data")}
    assert set(tools) == set(expected)
    for tool in tools.values():
        schema = tool.schema()
        json.dumps(schema)
        function = schema["function"]
        assert function["name"] == tool.name
        assert function["description"].endswith(".")
        parameters = function["parameters"]
        assert parameters["type"] == "object"
        props = parameters["properties"]
        assert {k: v["type"] for k, v in props.items()} == expected[tool.name]
        for prop in props.values():  # described; defaults and bounds are left out of the prompt
            assert prop["description"] and not {"default", "maximum"} & set(prop)
    assert tools["read_text_file"].parameters_schema()["required"] == ["path"]
    find = tools["find_files"].parameters_schema()
    assert "required" not in find or find["required"] == []
    defaults = tools["find_files"].args_model()
    assert (defaults.folder, defaults.pattern) == ("~", "*")  # type: ignore[attr-defined]
    assert "image" in find["properties"]["kind"]["enum"]
    assert tools["search_text"].parameters_schema()["required"] == ["phrase"]
    assert tools["rename_or_move"].parameters_schema()["required"] == ["source", "destination"]


def test_default_folder_follows_the_first_root_for_every_tool(
    outside: Path, tmp_path: Path
) -> None:
    tools = {t.name: t for t in files_tools([outside], data_dir=tmp_path / "data")}
    for name, field in (
        ("list_folder", "path"),
        ("find_files", "folder"),
        ("search_text", "folder"),
    ):
        described = tools[name].parameters_schema()["properties"][field]["description"]
        assert described.endswith(f"Default: {json.dumps(str(outside))}.")
        assert tools[name].args_model.model_fields[field].default == str(outside)


def test_files_tools_needs_a_root() -> None:
    with pytest.raises(ValueError):
        files_tools([])
