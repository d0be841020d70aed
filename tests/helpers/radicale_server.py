"""A real Radicale CalDAV server on 127.0.0.1: a subprocess with a temp storage folder."""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(
        f"{what} did not listen on {port}: {log.read_text(errors='replace')[-2000:]}"
    )


@dataclass
class Radicale:
    url: str
    users: dict[str, str]
    storage: Path
    _next: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def new_user(self) -> tuple[str, str]:
        """A user no other test has used (all are in the htpasswd file from the start)."""
        user = f"user{next(self._next)}"
        if user not in self.users:
            raise RuntimeError("all CalDAV test users are used; raise the count")
        return user, self.users[user]

    def client(self, user: str) -> Any:
        """A second, independent CalDAV client (the caldav library) for checking what landed."""
        from caldav.davclient import DAVClient

        return DAVClient(url=self.url, username=user, password=self.users[user], timeout=10)


@contextmanager
def radicale(folder: Path, users: dict[str, str]) -> Iterator[Radicale]:
    """Radicale with htpasswd (plain) auth for ``users``, each owning only their collections.

    No delay on a 401: Radicale holds every answer to a request without credentials (the
    caldav library's first request of each client) or with wrong ones for a second, to slow
    down password guessing; here that second was most of each CalDAV test's time."""
    folder.mkdir(parents=True, exist_ok=True)
    htpasswd = folder / "users"
    htpasswd.write_text("".join(f"{u}:{p}\n" for u, p in users.items()), encoding="utf-8")
    port = free_port()
    config = folder / "config"
    config.write_text(
        f"""[server]
hosts = 127.0.0.1:{port}
[auth]
type = htpasswd
htpasswd_filename = {htpasswd}
htpasswd_encryption = plain
delay = 0
[storage]
filesystem_folder = {folder / "collections"}
[rights]
type = owner_only
[logging]
level = warning
""",
        encoding="utf-8",
    )
    log = folder / "radicale.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "radicale", "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_port(port, proc, "Radicale", log)
        yield Radicale(f"http://127.0.0.1:{port}/", dict(users), folder / "collections")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
