"""The accounts file: non-secret settings only, validated, written privately and atomically."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from botpsy_desktop.core.accounts import AccountBook, CalDAVAccount, MailAccount, is_loopback
from botpsy_desktop.core.errors import BotpsyError, ConfigError


def mail(**extra: object) -> MailAccount:
    fields: dict[str, object] = {
        "name": "work",
        "address": "me@example.org",
        "username": "me@example.org",
        "imap_host": "imap.example.org",
        "smtp_host": "smtp.example.org",
    }
    return MailAccount.model_validate({**fields, **extra})


def test_round_trip_and_private_file(tmp_path: Path) -> None:
    book = AccountBook(tmp_path / "config" / "accounts.json")
    assert book.load() == []
    book.add(mail())
    book.add(CalDAVAccount(name="cloud", url="https://cloud.example.org/dav/", username="me"))
    assert [a.name for a in book.load()] == ["work", "cloud"]
    assert stat.S_IMODE(book.file.stat().st_mode) == 0o600
    data = json.loads(book.file.read_text())
    assert data[0]["kind"] == "mail" and "password" not in json.dumps(data)
    with pytest.raises(BotpsyError, match="already an account named 'work'"):
        book.add(mail())
    assert book.remove("work").name == "work"
    with pytest.raises(BotpsyError, match=r"no account named 'work' \(accounts: cloud\)"):
        book.remove("work")


def test_a_password_in_the_file_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "accounts.json"
    record = mail().model_dump()
    file.write_text(json.dumps([{**record, "password": "hunter2"}]))
    with pytest.raises(ConfigError, match="holds a password for account 'work'") as exc:
        AccountBook(file).load()
    assert "hunter2" not in str(exc.value)


def test_invalid_files_name_the_problem(tmp_path: Path) -> None:
    file = tmp_path / "accounts.json"
    file.write_text("{not json")
    with pytest.raises(ConfigError, match="Cannot read the accounts file"):
        AccountBook(file).load()
    file.write_text(json.dumps([{"kind": "mail", "name": "x"}]))
    with pytest.raises(ConfigError, match=r"invalid entries .*address"):
        AccountBook(file).load()


def test_unencrypted_connections_only_to_this_computer() -> None:
    with pytest.raises(ValueError, match="not encrypted: use https"):
        CalDAVAccount(name="c", url="http://cloud.example.org/dav", username="me")
    assert CalDAVAccount(name="c", url="http://127.0.0.1:5232/", username="me")
    with pytest.raises(ValueError, match="must not contain a user name or password"):
        CalDAVAccount(name="c", url="https://me:pw@cloud.example.org/", username="me")
    with pytest.raises(ValueError, match="smtp_security none sends the password unencrypted"):
        mail(smtp_security="none")
    assert mail(imap_host="localhost", imap_security="none").imap_port_or_default == 143
    assert mail(smtp_security="starttls").smtp_port_or_default == 587
    assert is_loopback("::1") and is_loopback("127.0.0.2") and not is_loopback("10.0.0.1")
