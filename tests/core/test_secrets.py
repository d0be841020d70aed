"""Passwords in the OS keyring (a real gnome-keyring), never in plain text; clear errors without."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail

from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.secrets import FIX_HINT, KeyringUnavailable, SecretStore
from tests.helpers.keyring_service import SecretService
from tests.helpers.services import keyring_env, secret_service  # noqa: F401


def test_round_trip_in_a_real_secret_service(keyring_env: SecretService) -> None:  # noqa: F811
    store = SecretStore(keyring_env.backend(), service="botpsy-test")
    assert store.get("work") is None
    store.set("work", "s3cret pw é")
    assert store.get("work") == "s3cret pw é"
    assert SecretStore(keyring_env.backend(), service="botpsy-test").get("work") == "s3cret pw é"
    assert store.require("work") == "s3cret pw é"
    assert store.delete("work") is True
    assert store.get("work") is None
    assert store.delete("work") is False
    with pytest.raises(BotpsyError, match="No password is stored for account 'work'"):
        store.require("work")


def test_no_keyring_says_how_to_fix_it_and_never_falls_back(tmp_path: Path) -> None:
    store = SecretStore(fail.Keyring())
    with pytest.raises(KeyringUnavailable) as exc:
        store.set("work", "pw")
    assert "No OS keyring is available" in exc.value.message
    assert "never saved in plain text" in exc.value.message
    assert exc.value.hint == FIX_HINT
    assert "gnome-keyring" in FIX_HINT and "for this session only" in FIX_HINT
    with pytest.raises(KeyringUnavailable):
        store.get("work")
    assert not store.in_session("work")


def test_session_only_is_kept_in_memory_when_chosen() -> None:
    store = SecretStore(fail.Keyring())
    store.set("work", "for-now", session_only=True)
    assert store.in_session("work")
    assert store.get("work") == "for-now"
    assert SecretStore(fail.Keyring()).in_session("work") is False  # not shared, not stored
    with pytest.raises(KeyringUnavailable):
        store.delete("work")  # the keyring part still says it is missing...
    assert not store.in_session("work")  # ...but the session copy is gone


class _Hanging(KeyringBackend):
    """A keyring stuck on an unlock prompt nobody answers (what a locked desktop keyring does)."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def get_password(self, service: str, username: str) -> str | None:
        self.release.wait(10)
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        self.release.wait(10)

    def delete_password(self, service: str, username: str) -> None:
        self.release.wait(10)


def test_a_keyring_that_does_not_answer_times_out() -> None:
    backend = _Hanging()
    store = SecretStore(backend, timeout_s=0.2)
    try:
        with pytest.raises(KeyringUnavailable, match=r"did not answer within 0\.2 s"):
            store.get("work")
    finally:
        backend.release.set()
