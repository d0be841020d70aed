"""Address books end to end: real .vcf files and a real CardDAV server (Radicale), synced and
looked up through the real `botpsy` CLI and the app `build_app` makes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.carddav import AddressBook, vcard
from tests.helpers.keyring_service import SecretService
from tests.helpers.radicale_server import Radicale, free_port
from tests.helpers.replay import xml_call
from tests.helpers.services import keyring_env, radicale, secret_service  # noqa: F401

REPO = Path(__file__).resolve().parents[2]

ANA = vcard(
    "ana",
    "Ana López",
    "ana@example.org",
    version="4.0",
    extra="NICKNAME:Anita,Mum\r\nTEL;VALUE=uri;TYPE=cell:tel:+33-6-12-34-56-78\r\nORG:Acme Corp",
)


def cli(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )


def cli_json(home: Path, *args: str) -> Any:
    done = cli(home, *args, "--json")
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def profile(tmp_path: Path, contacts: dict[str, Any] | None = None) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (tmp_path / "files").mkdir(exist_ok=True)
    config = {
        "files": {"roots": [str(tmp_path / "files")]},
        "music": {"folders": [str(tmp_path / "music")], "player": "none"},
        "contacts": contacts or {},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def names(found: dict[str, Any]) -> list[str]:
    return sorted(c["name"] for c in found["contacts"])


def test_a_vcf_folder_syncs_changes_deletes_and_skips_bad_cards(tmp_path: Path) -> None:
    folder = tmp_path / "Contacts"
    folder.mkdir()
    (folder / "ana.vcf").write_text(ANA, encoding="utf-8", newline="")
    family = vcard("mum", "Maria Silva", "maria@example.net", extra="NICKNAME:Mum")
    family += vcard("marco", "Marco Rossi", "marco@example.it", extra="TEL:+39 02 9876 5432")
    (folder / "family.vcf").write_text(family, encoding="utf-8", newline="")
    bad = (
        b"BEGIN:VCARD\r\nVERSION:3.0\r\nFN:Jos\xe9 Latin1\r\nEMAIL:jose@example.es\r\nEND:VCARD\r\n"
    )
    bad += vcard("nofn", "x", "nofn@example.com").replace("FN:x\r\n", "").encode()
    photo = "PHOTO;ENCODING=b;TYPE=JPEG:" + "A" * 5_000_000
    bad += vcard("big", "Big Photo", "big@example.com", extra=photo).encode()
    (folder / "broken.vcf").write_bytes(bad)
    home = profile(tmp_path, {"files": [str(folder)]})

    synced = cli_json(home, "contacts", "sync")
    [book] = synced["books"]
    assert (book["written"], book["removed"], book["error"]) == (3, 0, "")
    skipped = " ".join(book["skipped"])
    assert len(book["skipped"]) == 3, skipped
    assert "not valid UTF-8" in skipped and "has no name (FN)" in skipped
    assert "5.0 MB, over the 1 MB" in skipped
    assert synced["cards"] == 3

    # name, accents folded, part of a name, nickname, email, phone digits, company
    for query in ("Ana", "LOPEZ", "lópez", "anit", "ana@example.org", "0612345678", "acme"):
        assert names(cli_json(home, "contacts", "find", query)) == ["Ana López"], query
    mum = cli_json(home, "contacts", "find", "Mum")
    assert names(mum) == ["Ana López", "Maria Silva"] and mum["matches"] == 2
    assert "several people match" in mum["note"]
    assert names(cli_json(home, "contacts", "find", "9876 5432")) == ["Marco Rossi"]
    assert cli_json(home, "contacts", "find", "José")["matches"] == 0

    again = cli_json(home, "contacts", "sync")["books"][0]
    assert again["unchanged"] and again["written"] == 0

    # an address changed in one file, another file deleted: only those are read again
    (folder / "ana.vcf").write_text(
        ANA.replace("ana@example.org", "ana.lopez@example.org"), encoding="utf-8", newline=""
    )
    os.utime(folder / "ana.vcf", ns=(1, 1))
    (folder / "family.vcf").unlink()
    changed = cli_json(home, "contacts", "sync")["books"][0]
    assert (changed["written"], changed["removed"]) == (1, 2), changed
    [ana] = cli_json(home, "contacts", "find", "ana")["contacts"]
    assert ana["emails"] == ["ana.lopez@example.org"] and ana["own_book"] is True
    assert cli_json(home, "contacts", "find", "marco")["matches"] == 0
    details = cli_json(home, "contacts", "show", ana["id"])["contact"]
    assert details["nicknames"] == ["Anita", "Mum"] and details["company"] == "Acme Corp"


def _account(
    home: Path, server: Radicale, user: str, password: str, contacts: str, *, apart: bool = False
) -> None:
    """A CalDAV account whose address books are read; ``apart``: its CardDAV URL is given on
    its own (``--contacts-url``; the CalDAV URL then leads nowhere, as another host would)."""
    url = f"http://127.0.0.1:{free_port()}/" if apart else server.url
    extra = ("--contacts-url", server.url) if apart else ()
    added = cli(
        home,
        *("account", "add", "caldav", "cloud", "--url", url, "--username", user, *extra),
        *("--contacts", contacts, "--password-stdin"),
        stdin=password + "\n",
    )
    assert added.returncode == 0, added.stderr


def test_a_carddav_book_syncs_by_etag_and_answers_from_its_copy_when_the_server_is_gone(
    tmp_path: Path,
    radicale: Radicale,  # noqa: F811
    keyring_env: SecretService,  # noqa: F811
) -> None:
    user, password = radicale.new_user()
    book = AddressBook(radicale, user, "friends", "Friends")
    book.put("ana.vcf", ANA)
    book.put("marco.vcf", vcard("marco", "Marco Rossi", "marco@example.it"))
    home = profile(tmp_path)
    _account(home, radicale, user, password, "shared")
    assert "(password: keyring, address books: shared)" in cli(home, "account", "list").stdout

    first = cli_json(home, "contacts", "sync")
    [state] = first["books"]
    assert state["label"] == "Friends (cloud, CardDAV)"
    assert (state["written"], state["removed"], state["unchanged"]) == (2, 0, False)
    assert cli_json(home, "contacts", "sync")["books"][0]["unchanged"]

    book.put("ana.vcf", ANA.replace("ana@example.org", "ana@new.example.org"))
    book.delete("marco.vcf")
    book.put("zoe.vcf", vcard("zoe", "Zoé Martin", "zoe@example.fr"))
    third = cli_json(home, "contacts", "sync")["books"][0]
    assert (third["written"], third["removed"]) == (2, 1), third
    found = cli_json(home, "contacts", "find", "ana")
    assert [c["emails"] for c in found["contacts"]] == [["ana@new.example.org"]]
    assert found["contacts"][0]["own_book"] is False
    assert cli_json(home, "contacts", "find", "marco")["matches"] == 0
    assert names(cli_json(home, "contacts", "find", "zoe")) == ["Zoé Martin"]

    # the server gone: the sync says so, look-ups answer from the copy and say how old it is
    accounts = home / "config" / "accounts.json"
    data = json.loads(accounts.read_text())
    data[0]["url"] = f"http://127.0.0.1:{free_port()}/"
    accounts.write_text(json.dumps(data))
    gone = cli(home, "contacts", "sync")
    assert gone.returncode == 1
    assert "not synced: Cannot reach the server of account 'cloud'" in gone.stdout
    found = cli_json(home, "contacts", "find", "zoé")
    assert names(found) == ["Zoé Martin"]
    # how old the copy is, by the wall clock of two CLI processes (a minute or more on a loaded
    # machine running the suite in parallel)
    assert re.search(
        r"synced (less than a minute|\d+ minutes?) ago; the last try failed \(Cannot reach",
        found["as_of"],
    ), found["as_of"]


def test_find_contact_through_the_assistant_lists_every_match_and_marks_shared_fields(
    tmp_path: Path,
    radicale: Radicale,  # noqa: F811
    keyring_env: SecretService,  # noqa: F811
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "ana.vcf").write_text(ANA, encoding="utf-8", newline="")
    user, password = radicale.new_user()
    AddressBook(radicale, user, "team", "Team").put(
        "ana2.vcf", vcard("ana2", "Ana Ruiz", "ana.ruiz@example.com")
    )
    home = profile(tmp_path, {"files": [str(folder)]})
    _account(home, radicale, user, password, "shared", apart=True)
    assert cli(home, "contacts", "sync").returncode == 0
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps([xml_call("find_contact", query="Ana"), "Which Ana?"]))
    done = cli(home, "ask", "--replay", str(replay), "--json", "--approve", "deny", "email Ana")
    data = json.loads(done.stdout)
    [call] = data["tool_calls"]
    assert call["ok"] and call["decision"] == "allowed"
    result = json.loads(call["result"]) if isinstance(call["result"], str) else call["result"]
    assert [c["name"] for c in result["contacts"]] == ["Ana López", "Ana Ruiz"]
    assert "ask the person which one" in result["note"]
    assert data["approvals"] == []


def test_add_and_update_contact_run_with_undo_in_the_own_book_and_ask_in_a_shared_one(
    tmp_path: Path,
) -> None:
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    (mine / "ana.vcf").write_text(
        ANA.replace("END:VCARD", "ADR;TYPE=home:;;1 Rue Haute;Lyon;;69001;France\r\nEND:VCARD"),
        encoding="utf-8",
        newline="",
    )
    (theirs / "bob.vcf").write_text(vcard("bob", "Bob Stone", "bob@example.net"), newline="")
    home = profile(tmp_path, {"files": [str(mine)], "shared_files": [str(theirs)]})

    def ask(text: str, *turns: str, approve: str = "deny") -> dict[str, Any]:
        replay = tmp_path / "replay.json"
        replay.write_text(json.dumps([*turns, "Done."]))
        done = cli(home, "ask", "--replay", str(replay), "--json", "--approve", approve, text)
        assert done.returncode == 0, done.stderr
        data: dict[str, Any] = json.loads(done.stdout)
        return data

    added = ask(
        "add Marco Rossi to my contacts, marco@example.it",
        xml_call("add_contact", name="Marco Rossi", emails="marco@example.it"),
    )
    [call] = added["tool_calls"]
    assert call["ok"] and call["decision"] == "allowed" and added["approvals"] == [], added
    [new] = [p for p in mine.glob("*.vcf") if p.name != "ana.vcf"]
    assert "FN:Marco Rossi" in new.read_text() and "EMAIL:marco@example.it" in new.read_text()
    assert names(cli_json(home, "contacts", "find", "marco")) == ["Marco Rossi"]
    undone = cli(home, "undo", "--approve", "deny")
    assert undone.returncode == 0, undone.stderr
    assert not new.exists()
    assert cli_json(home, "contacts", "find", "marco")["matches"] == 0

    ana = cli_json(home, "contacts", "find", "ana")["contacts"][0]["id"]
    changed = ask(
        "change Ana's email in my contacts to ana@lopez.example",
        xml_call("update_contact", contact=ana, emails="ana@lopez.example"),
    )
    assert changed["tool_calls"][0]["decision"] == "allowed", changed
    text = (mine / "ana.vcf").read_text()
    assert "ana@lopez.example" in text and "ana@example.org" not in text
    assert "1 Rue Haute" in text and "Anita" in text  # what the tool does not know stays
    assert cli(home, "undo", "--approve", "deny").returncode == 0
    text = (mine / "ana.vcf").read_text()
    assert "ana@example.org" in text and "ana@lopez.example" not in text

    bob = cli_json(home, "contacts", "find", "bob")["contacts"][0]["id"]
    shared = ask(
        "change Bob's email in my contacts to bob@new.example",
        xml_call("update_contact", contact=bob, emails="bob@new.example"),
    )
    [approval] = shared["approvals"]
    assert approval["tool"] == "update_contact" and "shared address book" in approval["receipt"]
    assert shared["tool_calls"][0]["decision"] == "denied"
    assert "bob@example.net" in (theirs / "bob.vcf").read_text()


def test_whose_birthday_is_this_week_by_the_apps_clock(tmp_path: Path) -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from botpsy_desktop.agent.events import ToolResult
    from botpsy_desktop.app import build_app
    from botpsy_desktop.llm.engines.replay import ReplayBackend

    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "book.vcf").write_text(
        vcard("ana", "Ana López", "ana@example.org", extra="BDAY:1990-04-12")
        + vcard("mum", "Maria Silva", extra="NICKNAME:Mum\r\nBDAY:--0415")
        + vcard("bob", "Bob Stone", extra="X-ANNIVERSARY:20100420")
        + vcard("leap", "Lea Leap", extra="BDAY:20000229"),
        encoding="utf-8",
        newline="",
    )
    home = profile(tmp_path, {"files": [str(folder)]})
    config = json.loads((home / "config" / "config.json").read_text())
    config["calendar"] = {"time_zone": "Pacific/Auckland"}
    (home / "config" / "config.json").write_text(json.dumps(config))
    auckland = ZoneInfo("Pacific/Auckland")

    def ask(now: datetime, days: int) -> dict[str, Any]:
        app = build_app(home, now=lambda: now)
        try:
            turns = [xml_call("upcoming_birthdays", days=days), "Here they are."]
            session = app.session(ReplayBackend(turns))
            [result] = [
                e for e in session.run("whose birthday is it soon?") if isinstance(e, ToolResult)
            ]
        finally:
            app.close()
        assert result.ok, result.output
        data: dict[str, Any] = json.loads(result.output)
        return data

    # 11 April 2027 10:00 in Auckland is still 10 April in UTC: the person's day counts
    week = ask(datetime(2027, 4, 10, 22, 0, tzinfo=ZoneInfo("UTC")), 7)
    assert week["from"] == "2027-04-11"
    assert [(d["name"], d["date"], d["in_days"], d.get("years")) for d in week["dates"]] == [
        ("Ana López", "2027-04-12", 1, 37),
        ("Maria Silva", "2027-04-15", 4, None),
    ]
    leap = ask(datetime(2027, 2, 27, 9, 0, tzinfo=auckland), 3)
    assert [(d["name"], d["date"], d["years"]) for d in leap["dates"]] == [
        ("Lea Leap", "2027-02-28", 27)
    ]
    later = ask(datetime(2027, 4, 16, 9, 0, tzinfo=auckland), 10)
    assert [(d["name"], d["what"], d["in_days"]) for d in later["dates"]] == [
        ("Bob Stone", "anniversary", 4)
    ]
