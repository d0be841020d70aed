"""The Accounts tab against real Radicale and gnome-keyring: add, test, password, remove."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from keyring.backends import fail
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.secrets import SecretStore
from botpsy_desktop.ui.accounts import AccountForm, AccountsPanel, Result
from botpsy_desktop.ui.settings import SettingsDialog
from tests.helpers.keyring_service import SecretService
from tests.helpers.radicale_server import Radicale
from tests.helpers.services import keyring_env, radicale, secret_service  # noqa: F401


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    config = {
        "files": {"roots": [str(tmp_path / "files")]},
        "music": {"folders": [str(tmp_path / "music")], "player": "none"},
        "calendar": {"time_zone": "Europe/Paris", "timeout_s": 1.5},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


@pytest.fixture
def app(home: Path) -> Iterator[App]:
    built = build_app(home)
    yield built
    built.close()


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    worker = threading.Thread(target=accept, daemon=True)
    worker.start()
    yield int(server.getsockname()[1])
    stop.set()
    worker.join(2)
    for conn in held:
        conn.close()
    server.close()


def fill_caldav(form: AccountForm, name: str, url: str, user: str, password: str) -> None:
    form.set_kind("caldav")
    form.name.setText(name)
    form.url.setText(url)
    form.dav_username.setText(user)
    form.secret.password.setText(password)


def add_caldav(
    qtbot: QtBot, panel: AccountsPanel, name: str, url: str, user: str, password: str
) -> Result:
    form = panel.add()
    fill_caldav(form, name, url, user, password)
    with qtbot.waitSignal(panel.finished, timeout=20000) as blocker:
        form.ok_button.click()
    assert blocker.args is not None
    result: Result = blocker.args[0]
    qtbot.waitUntil(lambda: any(r.name == name for r in panel.rows), timeout=10000)
    return result


def all_profile_text(home: Path) -> str:
    return "\n".join(
        p.read_text(encoding="utf-8", errors="replace") for p in home.rglob("*") if p.is_file()
    )


def test_caldav_account_added_tested_repassworded_and_removed(
    qtbot: QtBot,
    app: App,
    home: Path,
    radicale: Radicale,  # noqa: F811
    keyring_env: SecretService,  # noqa: F811
) -> None:
    user, cal_pw = radicale.new_user()
    radicale.client(user).principal().make_calendar(name="Personal")
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    dialog.show()
    panel = dialog.accounts
    qtbot.waitUntil(lambda: [r.name for r in panel.rows] == ["local"], timeout=10000)
    assert panel.form is None and not panel.remove_button.isEnabled()

    form = panel.add()
    assert form.secret.password.echoMode() == form.secret.password.EchoMode.Password
    fill_caldav(form, "cloud", "http://cloud.example.org/dav/", user, cal_pw)
    form.ok_button.click()  # a plain-http URL to another host is refused in the form
    assert form.isVisible() and "not encrypted" in form.error.text()
    form.reject()

    added = add_caldav(qtbot, panel, "cloud", radicale.url, user, cal_pw)
    assert added.ok and "password in the OS keyring" in added.message, added.message
    assert keyring_env.backend().get_password("botpsy-desktop", "account:cloud") == cal_pw
    assert cal_pw not in all_profile_text(home)
    saved = json.loads((home / "config" / "accounts.json").read_text(encoding="utf-8"))
    assert saved == [{"name": "cloud", "username": user, "kind": "caldav", "url": radicale.url}]
    row = next(r for r in panel.rows if r.name == "cloud")
    assert row.password == "keyring" and user in row.summary

    panel.select("cloud")
    with qtbot.waitSignal(panel.finished, timeout=20000) as blocker:
        panel.test_button.click()
        assert panel.busy and not panel.test_button.isEnabled()
    assert blocker.args is not None
    tested: Result = blocker.args[0]
    assert tested.ok, tested.message
    assert tested.message == "cloud (caldav): CalDAV ok: 1 calendar(s) (Personal)"
    assert panel.status.text() == tested.message

    box = panel.change_password()
    assert box is not None
    box.secret.password.setText("wrong-password")
    with qtbot.waitSignal(panel.finished, timeout=20000) as blocker:
        box.ok_button.click()
    assert blocker.args is not None and blocker.args[0].ok
    assert keyring_env.backend().get_password("botpsy-desktop", "account:cloud") == (
        "wrong-password"
    )
    with qtbot.waitSignal(panel.finished, timeout=20000) as blocker:
        panel.test_button.click()
    assert blocker.args is not None
    failed: Result = blocker.args[0]
    assert not failed.ok
    assert "CalDAV failed: The CalDAV server of account 'cloud'" in failed.message
    assert "refused the user name or password" in failed.message
    assert "refused the user name or password" in panel.status.text()

    confirm = panel.remove()
    assert confirm is not None and confirm.isVisible()
    with qtbot.waitSignal(panel.finished, timeout=20000) as blocker:
        confirm.button(QMessageBox.StandardButton.Yes).click()
    assert blocker.args is not None
    removed: Result = blocker.args[0]
    assert removed.message == "Removed account 'cloud' and its password."
    qtbot.waitUntil(lambda: [r.name for r in panel.rows] == ["local"], timeout=10000)
    assert keyring_env.backend().get_password("botpsy-desktop", "account:cloud") is None
    assert json.loads((home / "config" / "accounts.json").read_text(encoding="utf-8")) == []


def test_a_slow_server_never_blocks_the_gui_thread(
    qtbot: QtBot,
    app: App,
    silent_server: int,
    keyring_env: SecretService,  # noqa: F811
) -> None:
    panel = AccountsPanel(app)
    qtbot.addWidget(panel)
    panel.show()
    url = f"http://127.0.0.1:{silent_server}/dav/"
    assert add_caldav(qtbot, panel, "slow", url, "me", "pw").ok
    panel.select("slow")
    gaps: list[float] = []
    last = [time.monotonic()]

    def tick() -> None:
        now = time.monotonic()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.timeout.connect(tick)
    timer.start(10)
    started = time.monotonic()
    with qtbot.waitSignal(panel.finished, timeout=30000) as blocker:
        panel.test_button.click()
        clicked = time.monotonic() - started
    timer.stop()
    took = time.monotonic() - started
    assert blocker.args is not None
    result: Result = blocker.args[0]
    assert not result.ok and "CalDAV failed" in result.message, result.message
    assert clicked < 0.5  # the click returned long before the 1.5 s check: it runs on a worker
    assert took >= 1.0  # the server kept it waiting for its timeout (1.5 s)...
    assert len(gaps) > 40 and max(gaps) < 0.75, max(gaps)  # ...and the GUI kept painting


def test_without_a_keyring_the_password_is_kept_for_this_session_only(
    qtbot: QtBot, app: App, home: Path
) -> None:
    app.secrets = SecretStore(fail.Keyring())  # what a system without any keyring gives
    panel = AccountsPanel(app)
    qtbot.addWidget(panel)
    qtbot.waitUntil(lambda: bool(panel.rows), timeout=10000)
    form = panel.add()
    fill_caldav(form, "cloud", "https://cloud.example.org/dav/", "me", "s3cret-pw")
    with qtbot.waitSignal(panel.finished, timeout=20000) as blocker:
        form.ok_button.click()
    assert blocker.args is not None
    added: Result = blocker.args[0]
    assert not added.ok and added.keyring_missing
    assert "No OS keyring is available" in added.message
    assert "for this session only" in added.message and "gnome-keyring" in added.message
    assert panel.session_button.isVisibleTo(panel)
    assert not (home / "config" / "accounts.json").exists()  # nothing half-done

    with qtbot.waitSignal(panel.finished, timeout=20000) as blocker:
        panel.session_button.click()
    assert blocker.args is not None
    kept: Result = blocker.args[0]
    assert kept.ok and "for this session only" in kept.message, kept.message
    assert not panel.session_button.isVisibleTo(panel)
    assert app.secrets.in_session("cloud") and app.secrets.get("cloud") == "s3cret-pw"
    qtbot.waitUntil(lambda: any(r.name == "cloud" for r in panel.rows), timeout=10000)
    assert next(r for r in panel.rows if r.name == "cloud").password == "this session only"
    assert "s3cret-pw" not in all_profile_text(home)


def test_a_caldav_accounts_address_books_are_chosen_in_the_form(
    qtbot: QtBot,
    app: App,
    home: Path,
    radicale: Radicale,  # noqa: F811
    keyring_env: SecretService,  # noqa: F811
) -> None:
    user, cal_pw = radicale.new_user()
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    dialog.show()
    panel = dialog.accounts
    qtbot.waitUntil(lambda: [r.name for r in panel.rows] == ["local"], timeout=10000)
    form = panel.add()
    fill_caldav(form, "cloud", radicale.url, user, cal_pw)
    assert form.dav_contacts.currentData() is None  # not read unless chosen
    form.dav_contacts.setCurrentIndex(form.dav_contacts.findData("shared"))
    with qtbot.waitSignal(panel.finished, timeout=20000) as blocker:
        form.ok_button.click()
    assert blocker.args is not None and blocker.args[0].ok, blocker.args
    saved = json.loads((home / "config" / "accounts.json").read_text(encoding="utf-8"))
    assert saved == [
        {
            "name": "cloud",
            "username": user,
            "kind": "caldav",
            "url": radicale.url,
            "contacts": "shared",
        }
    ]
