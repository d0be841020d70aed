"""Servers on 127.0.0.1 that misbehave on purpose: accept and stay silent, or trickle bytes."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

Mode = Literal["silent", "trickle", "forward"]


@dataclass
class HangingServer:
    """A TCP server whose ``mode`` can change between connections.

    ``silent``: accepts and never sends a byte (nor reads). ``trickle``: reads the request,
    answers an HTTP 200 promising a large body, then sends one byte every ``trickle_s`` seconds,
    so no single read ever times out. ``forward``: relays the connection to ``upstream``
    (host, port), i.e. behaves like the real server behind it.
    """

    port: int = 0
    mode: Mode = "silent"
    upstream: tuple[str, int] | None = None
    trickle_s: float = 0.2
    connections: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _serve(state: HangingServer, listener: socket.socket) -> None:
    while not state.stop.is_set():
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        state.connections += 1
        threading.Thread(
            target=_handle, args=(state, conn, state.mode), name="hanging-conn", daemon=True
        ).start()


def _handle(state: HangingServer, conn: socket.socket, mode: Mode) -> None:
    with conn:
        if mode == "silent":
            state.stop.wait()
        elif mode == "trickle":
            conn.settimeout(5)
            with contextlib.suppress(OSError):
                conn.recv(65536)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 1000000\r\n\r\n{"
                )
                while not state.stop.wait(state.trickle_s):
                    conn.sendall(b" ")
        else:
            assert state.upstream is not None, "forward mode needs an upstream"
            with socket.create_connection(state.upstream, timeout=5) as up:
                pump = threading.Thread(target=_pipe, args=(up, conn), daemon=True)
                pump.start()
                _pipe(conn, up)
                pump.join(5)


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)


@contextmanager
def hanging_server(
    mode: Mode = "silent", *, upstream: tuple[str, int] | None = None
) -> Iterator[HangingServer]:
    """Listen on a free port of 127.0.0.1 for the ``with`` block; every connection is dropped
    at the end (the silent and trickling ones included)."""
    listener = socket.create_server(("127.0.0.1", 0))
    state = HangingServer(port=listener.getsockname()[1], mode=mode, upstream=upstream)
    thread = threading.Thread(target=_serve, args=(state, listener), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop.set()
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(5)
