"""Pytest fixtures for the real servers the tests talk to, and the one rule for a missing one.

Import the fixtures a test module needs from here. Each server is started once per session on
127.0.0.1; tests isolate themselves with their own users, calendars and mailboxes.

A test that needs a program, server or library that is not installed goes through ``missing``
(directly, or with the ``needs`` mark): locally it is skipped with the reason and what to
install; under CI (``CI=true``) it fails, so CI proves that every test ran.
``tools/install-test-deps.sh`` installs all of them on Debian and Ubuntu.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any, NoReturn

import pytest

from tests.helpers import keyring_service, mail_servers, radicale_server

_SERVERS = pytest.StashKey[dict[str, Any]]()

INSTALLER = "tools/install-test-deps.sh"


def under_ci() -> bool:
    """True where the CI environment variable says so (GitHub Actions and most CIs set it)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing(what: str, install: str, *, module: bool = False) -> NoReturn:
    """Skip the running test (``module``: the whole module) because ``what`` is not installed;
    under CI, fail it instead. ``install`` says how to get it (on Debian/Ubuntu)."""
    reason = f"{what} is not installed ({install}; {INSTALLER} installs what apt can)"
    if under_ci():
        pytest.fail(f"CI runs every test, but {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=module)


def programs(*names: str) -> bool:
    """Whether every program in ``names`` is on PATH."""
    return all(shutil.which(name) for name in names)


def needs(present: bool, what: str, install: str) -> pytest.MarkDecorator:
    """Mark a test (or a module, as ``pytestmark``) that needs ``what``; when not ``present`` it
    goes through ``missing`` as it is set up (tests/conftest.py)."""
    return pytest.mark.needs(present=present, what=what, install=install)


def _shared(request: pytest.FixtureRequest, key: str, start: Callable[[], Any]) -> Any:
    """One server per test session, whichever test module asks first (a fixture imported into
    several modules is a separate fixture in each); stopped when the session ends."""
    cache = request.config.stash.setdefault(_SERVERS, {})
    if key not in cache:
        stack = ExitStack()
        request.config.add_cleanup(stack.close)
        cache[key] = stack.enter_context(start())
    return cache[key]


@pytest.fixture(scope="session")
def radicale(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> radicale_server.Radicale:
    if importlib.util.find_spec("radicale") is None:
        missing("Radicale (a CalDAV server)", 'pip install -e ".[test]"')
    users = {f"user{i}": f"cal-pw-{i}-{os.urandom(4).hex()}" for i in range(1, 61)}
    folder = tmp_path_factory.mktemp("radicale")
    server: radicale_server.Radicale = _shared(
        request, "radicale", lambda: radicale_server.radicale(folder, users)
    )
    return server


@pytest.fixture(scope="session")
def dovecot(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> mail_servers.Dovecot:
    if mail_servers.dovecot_binary() is None:
        missing("Dovecot (an IMAP server)", "apt install dovecot-imapd")
    folder = tmp_path_factory.mktemp("dovecot")
    server: mail_servers.Dovecot = _shared(request, "dovecot", lambda: mail_servers.dovecot(folder))
    return server


@pytest.fixture(scope="session")
def secret_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> keyring_service.SecretService:
    if not keyring_service.available():
        missing("gnome-keyring or dbus-daemon (a Secret Service)", "apt install gnome-keyring dbus")
    folder = tmp_path_factory.mktemp("keyring")
    service: keyring_service.SecretService = _shared(
        request, "keyring", lambda: keyring_service.secret_service(folder)
    )
    return service


@pytest.fixture
def keyring_env(
    secret_service: keyring_service.SecretService, monkeypatch: pytest.MonkeyPatch
) -> Iterator[keyring_service.SecretService]:
    """The real Secret Service as this process's keyring (restored afterwards)."""
    import keyring
    import keyring.core

    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", secret_service.env["DBUS_SESSION_BUS_ADDRESS"])
    previous = keyring.core._keyring_backend
    keyring.set_keyring(secret_service.backend())
    try:
        yield secret_service
    finally:
        keyring.core._keyring_backend = previous
