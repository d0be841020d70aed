"""Secrets in the OS keyring; a missing keyring backend is reported, never replaced by plaintext."""

from __future__ import annotations

from dataclasses import dataclass

SERVICE = "botpsy-desktop"


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
