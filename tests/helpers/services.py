"""Pytest fixtures for the real servers the calendar, mail and keyring tests talk to.

Import the fixtures a test module needs from here. Each server is started once per session on
127.0.0.1; tests isolate themselves with their own users, calendars and mailboxes. A test that
needs a server is skipped only when the server's program is not installed (CI installs them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from tests.helpers import keyring_service, mail_servers, radicale_server

_SERVERS = pytest.StashKey[dict[str, Any]]()


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
        pytest.skip("dovecot is not installed (Debian: apt install dovecot-imapd)")
    folder = tmp_path_factory.mktemp("dovecot")
    server: mail_servers.Dovecot = _shared(request, "dovecot", lambda: mail_servers.dovecot(folder))
    return server


@pytest.fixture(scope="session")
def secret_service(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> keyring_service.SecretService:
    if not keyring_service.available():
        pytest.skip("gnome-keyring or dbus is not installed (apt install gnome-keyring dbus)")
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
