"""A real Secret Service for tests: a private D-Bus session bus and an unlocked gnome-keyring."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def available() -> bool:
    return bool(shutil.which("dbus-daemon") and shutil.which("gnome-keyring-daemon"))


BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>{address}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
"""
"""The session bus's own configuration less its service folders (no activation)."""


@dataclass
class SecretService:
    """The environment a process needs to reach the keyring (DBUS_SESSION_BUS_ADDRESS...)."""

    env: dict[str, str]

    def backend(self) -> Any:
        """keyring's Secret Service backend, talking to this bus (set the env first)."""
        from keyring.backends import SecretService as backend

        return backend.Keyring()


@contextmanager
def secret_service(folder: Path) -> Iterator[SecretService]:
    """Start dbus-daemon and gnome-keyring-daemon (unlocked with a throwaway password)."""
    folder.mkdir(parents=True, exist_ok=True)
    home, runtime = folder / "home", folder / "run"
    for d in (home, runtime):
        d.mkdir(mode=0o700, exist_ok=True)
    env = {
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CONFIG_HOME": str(home / "config"),
    }
    # a session bus that starts no service by itself: with the system's service files, a
    # client asking for the Secret Service before our daemon had registered (a loaded machine)
    # made the bus start a second gnome-keyring without the password, which took the name and
    # kept its login keyring locked ("another secret service is running")
    config = folder / "bus.conf"
    config.write_text(BUS_CONFIG.format(address=f"unix:path={runtime}/bus"), encoding="utf-8")
    bus = subprocess.Popen(
        ["dbus-daemon", f"--config-file={config}", "--nofork", "--print-address=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
        text=True,
    )
    keyring_daemon: subprocess.Popen[str] | None = None
    try:
        assert bus.stdout is not None
        address = bus.stdout.readline().strip()
        if not address:
            raise RuntimeError("dbus-daemon did not start")
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        # the daemon is started again (with a fresh keyring folder) when it has not registered
        # an unlocked login keyring in time: on a loaded CI machine it once never did
        for attempt in range(1, 4):
            log = folder / f"keyring-daemon-{attempt}.log"
            keyring_daemon = _start_keyring(env, log)
            problem = _wait_for_secrets(env, keyring_daemon, 20.0 * attempt)
            if problem is None:
                break
            _stop(keyring_daemon)
            problem += f"; the daemon said: {_tail(log)}"
            shutil.rmtree(home / "data" / "keyrings", ignore_errors=True)
        else:
            raise RuntimeError(f"gnome-keyring did not come up in three starts: {problem}")
        yield SecretService(env)
    finally:
        for proc in (keyring_daemon, bus):
            if proc is not None:
                _stop(proc)
        if bus.stdout is not None:
            bus.stdout.close()


def _start_keyring(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    with log.open("w", encoding="utf-8") as err:
        daemon = subprocess.Popen(
            ["gnome-keyring-daemon", "--foreground", "--unlock", "--components=secrets"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **env},
            text=True,
        )
    assert daemon.stdin is not None
    daemon.stdin.write("test-keyring-unlock")
    daemon.stdin.close()
    return daemon


def _tail(log: Path) -> str:
    try:
        text = log.read_text(encoding="utf-8", errors="replace").strip()
    except OSError as exc:
        return f"(no log: {exc})"
    return text[-600:] or "(nothing)"


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for_secrets(
    env: dict[str, str], daemon: subprocess.Popen[str], within_s: float
) -> str | None:
    """Until the keyring answers a round trip (the daemon registers on the bus asynchronously);
    None when it did, else what was wrong.

    First until the unlocked login keyring is there as the default collection, asked on one
    connection that is closed each time: a round trip tried before that makes the daemon ask to
    create a collection, which fails with nobody to answer ("Prompt dismissed"), and each
    attempt through keyring's backend leaves a connection open for the garbage collector to
    warn about in some later test.

    A login keyring the daemon left locked ("failed to unlock login keyring on startup") is set
    aside after a few seconds: a new collection is made with the throwaway password through
    gnome-keyring's own no-prompt call, as its tools do, and becomes the default one.
    """
    from jeepney.io.blocking import open_dbus_connection
    from secretstorage.collection import get_collection_by_alias

    deadline = time.monotonic() + within_s
    saved = os.environ.get("DBUS_SESSION_BUS_ADDRESS")
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = env["DBUS_SESSION_BUS_ADDRESS"]
    try:
        last: Exception | None = None
        locked_since: float | None = None
        while time.monotonic() < deadline:
            if daemon.poll() is not None:
                return f"gnome-keyring-daemon exited with {daemon.returncode}"
            try:
                with open_dbus_connection(bus="SESSION") as conn:
                    collection = get_collection_by_alias(conn, "default")
                    if not collection.is_locked():
                        break
                    last = RuntimeError("the login keyring is locked")
                    locked_since = locked_since or time.monotonic()
                    if time.monotonic() - locked_since > 3.0:
                        _replace_the_default_collection(conn)
                        locked_since = None
            except Exception as exc:  # not up yet
                last = exc
            time.sleep(0.1)
        else:
            return f"not ready after {within_s:.0f} s: {last}"
        from keyring.backends import SecretService as backend

        k = backend.Keyring()
        k.set_password("botpsy-test-probe", "probe", "ok")
        if k.get_password("botpsy-test-probe", "probe") != "ok":
            raise RuntimeError("gnome-keyring did not return what was stored")
        k.delete_password("botpsy-test-probe", "probe")
        return None
    finally:
        if saved is None:
            os.environ.pop("DBUS_SESSION_BUS_ADDRESS", None)
        else:
            os.environ["DBUS_SESSION_BUS_ADDRESS"] = saved


def _replace_the_default_collection(conn: Any) -> None:
    """A new unlocked collection, made with the throwaway password, as the default one."""
    from secretstorage.util import (
        SERVICE_IFACE,
        SS_PATH,
        DBusAddressWrapper,
        format_secret,
        open_session,
    )

    session = open_session(conn)
    internal = DBusAddressWrapper(
        SS_PATH, "org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface", conn
    )
    (path,) = internal.call(
        "CreateWithMasterPassword",
        "a{sv}(oayays)",
        {"org.freedesktop.Secret.Collection.Label": ("s", "tests")},
        format_secret(session, b"test-keyring-unlock", "text/plain"),
    )
    DBusAddressWrapper(SS_PATH, SERVICE_IFACE, conn).call("SetAlias", "so", "default", path)
