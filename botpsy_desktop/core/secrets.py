"""Secrets in the OS keyring; a missing keyring backend is reported, never replaced by plaintext."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from botpsy_desktop.core.errors import BotpsyError

SERVICE = "botpsy-desktop"
DEFAULT_TIMEOUT_S = 10.0

FIX_HINT = (
    "Install and unlock a Secret Service keyring such as gnome-keyring (Debian/Ubuntu: "
    "`apt install gnome-keyring`, then log in again or run `gnome-keyring-daemon --unlock`) "
    "or KWallet, or enter the password for this session only."
)

T = TypeVar("T")


class KeyringUnavailable(BotpsyError):
    """The OS keyring cannot store or give back secrets; ``hint`` says how to fix it."""

    def __init__(self, message: str, hint: str = FIX_HINT) -> None:
        super().__init__(message, hint)


@dataclass(frozen=True)
class KeyringStatus:
    usable: bool
    backend: str
    detail: str


def keyring_status() -> KeyringStatus:
    """Which keyring backend the OS offers, and whether secrets can be stored in it."""
    try:
        import keyring
        from keyring.backends import fail
    except ImportError as exc:  # pragma: no cover - keyring is a dependency
        return KeyringStatus(False, "none", f"the keyring package is missing ({exc})")
    backend = keyring.get_keyring()
    name = f"{type(backend).__module__}.{type(backend).__name__}"
    if isinstance(backend, fail.Keyring):
        return KeyringStatus(
            False,
            name,
            "no keyring service is running (on Linux: GNOME Keyring or KWallet via Secret "
            "Service); passwords for mail and calendars cannot be stored",
        )
    return KeyringStatus(True, name, "secrets are stored in the OS keyring")


def _name(backend: Any) -> str:
    return f"{type(backend).__module__}.{type(backend).__name__}"


def _entry(account: str) -> str:
    """The keyring user name under which an account's password is kept."""
    return f"account:{account}"


def engine_entry(origin: str) -> str:
    """The keyring user name of the API key of the engine (llama-server) at ``origin``
    (scheme://host:port): a key is only ever sent to the server it was stored for."""
    return f"engine:{origin}"


class SecretStore:
    """Passwords by account name: in the OS keyring, or in memory for this session only.

    The in-memory copy is used only when the caller asks for it (``session_only=True``, the
    user's explicit choice); nothing is ever written to disk in plain text. Every keyring call
    runs on a helper thread and gives up after ``timeout_s`` (a locked keyring may wait for a
    password prompt forever), so a caller on a UI thread is never blocked longer than that.
    """

    def __init__(
        self,
        backend: Any | None = None,
        *,
        service: str = SERVICE,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._backend = backend
        self.service = service
        self.timeout_s = timeout_s
        self._session: dict[str, str] = {}
        self._lock = threading.Lock()
        self._seen: set[str] = set()  # passwords handled this session: never logged

    def backend(self) -> Any:
        """The keyring backend in use (the OS default unless one was given)."""
        if self._backend is None:
            import keyring

            self._backend = keyring.get_keyring()
        return self._backend

    def get(self, account: str, *, entry: str | None = None) -> str | None:
        """The account's password, or None if none is stored. Raises KeyringUnavailable.

        ``entry`` names another keyring entry than an account's (``engine_entry``)."""
        key = entry or _entry(account)
        with self._lock:
            if key in self._session:
                return self._session[key]
        backend = self.backend()
        value = self._call(lambda: backend.get_password(self.service, key), "read")
        if value is None:
            return None
        with self._lock:
            self._seen.add(str(value))
        return str(value)

    def set(
        self, account: str, secret: str, *, session_only: bool = False, entry: str | None = None
    ) -> None:
        """Store the password in the keyring, or (``session_only``) in memory until exit."""
        if not secret:
            raise BotpsyError("The password is empty.", "Enter the account's password.")
        key = entry or _entry(account)
        with self._lock:
            self._seen.add(secret)
        if session_only:
            with self._lock:
                self._session[key] = secret
            return
        backend = self.backend()
        self._call(lambda: backend.set_password(self.service, key, secret), "store")
        with self._lock:
            self._session.pop(key, None)

    def delete(self, account: str, *, entry: str | None = None) -> bool:
        """Forget the password (session copy and keyring entry); True if there was one."""
        key = entry or _entry(account)
        with self._lock:
            had = self._session.pop(key, None) is not None
        from keyring.errors import PasswordDeleteError

        backend = self.backend()

        def remove() -> bool:
            try:
                backend.delete_password(self.service, key)
            except PasswordDeleteError:
                return False
            return True

        return self._call(remove, "delete") or had

    def require(self, account: str) -> str:
        """The account's password for a connection; a sentence saying what to do if there is none.

        Raises KeyringUnavailable (no keyring, locked, no answer) or BotpsyError (none stored).
        """
        secret = self.get(account)
        if not secret:
            raise BotpsyError(
                f"No password is stored for account '{account}'.",
                f"Store it with `botpsy account password {account}`, or enter it for this "
                "session only.",
            )
        return secret

    def provider(self, account: str) -> Callable[[], str]:
        """A callable giving the account's password when a connection is made (never earlier)."""
        return lambda: self.require(account)

    def known_values(self) -> frozenset[str]:
        """Every password read, stored or given this session (the log filter removes them)."""
        with self._lock:
            return frozenset(self._seen | set(self._session.values()))

    def in_session(self, account: str) -> bool:
        """Whether a this-session-only password is held for the account."""
        with self._lock:
            return _entry(account) in self._session

    def _call(self, fn: Callable[[], T], what: str) -> T:
        from keyring.errors import KeyringError, KeyringLocked, NoKeyringError

        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["value"] = fn()
            except BaseException as exc:
                result["error"] = exc

        worker = threading.Thread(target=run, name=f"keyring-{what}", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            raise KeyringUnavailable(
                f"The OS keyring did not answer within {self.timeout_s:g} s (it may be locked "
                "and waiting for its own password)."
            )
        error = result.get("error")
        if error is None:
            value: T = result["value"]
            return value
        if isinstance(error, NoKeyringError):
            raise KeyringUnavailable(
                f"No OS keyring is available to {what} passwords (keyring backend "
                f"{_name(self.backend())}): passwords are never saved in plain text."
            ) from None
        if isinstance(error, KeyringLocked):
            raise KeyringUnavailable(f"The OS keyring is locked; cannot {what} the password.")
        if isinstance(error, KeyringError):
            raise KeyringUnavailable(
                f"The OS keyring failed to {what} the password ({type(error).__name__}: "
                f"{str(error)[:200]})."
            ) from None
        if isinstance(error, Exception):
            raise KeyringUnavailable(
                f"The OS keyring failed to {what} the password ({type(error).__name__})."
            ) from None
        raise error
