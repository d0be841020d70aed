"""A private D-Bus session with a real org.freedesktop.Notifications server on it (for tests)."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from jeepney import HeaderFields, MessageType, new_error, new_method_return, new_signal
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection
from jeepney.wrappers import DBusAddress

NAME = "org.freedesktop.Notifications"
PATH = "/org/freedesktop/Notifications"

_INTROSPECT = """<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
<node>
 <interface name="org.freedesktop.DBus.Introspectable">
  <method name="Introspect"><arg direction="out" type="s"/></method>
 </interface>
 <interface name="org.freedesktop.Notifications">
  <method name="GetCapabilities"><arg direction="out" type="as"/></method>
  <method name="Notify">
   <arg name="app_name" direction="in" type="s"/>
   <arg name="replaces_id" direction="in" type="u"/>
   <arg name="app_icon" direction="in" type="s"/>
   <arg name="summary" direction="in" type="s"/>
   <arg name="body" direction="in" type="s"/>
   <arg name="actions" direction="in" type="as"/>
   <arg name="hints" direction="in" type="a{sv}"/>
   <arg name="expire_timeout" direction="in" type="i"/>
   <arg direction="out" type="u"/>
  </method>
  <method name="CloseNotification"><arg name="id" direction="in" type="u"/></method>
  <method name="GetServerInformation">
   <arg direction="out" type="s"/><arg direction="out" type="s"/>
   <arg direction="out" type="s"/><arg direction="out" type="s"/>
  </method>
  <signal name="NotificationClosed"><arg type="u"/><arg type="u"/></signal>
  <signal name="ActionInvoked"><arg type="u"/><arg type="s"/></signal>
 </interface>
</node>"""


class NotificationServer:
    """Implements the freedesktop notification spec's methods and emits its signals.

    Runs in its own process (``python -m tests.helpers.notification_server ADDRESS CAPS``):
    each Notify is printed as a JSON line; ``invoke ID ACTION`` on stdin is a user clicking an
    action button.
    """

    def __init__(self, address: str, capabilities: list[str]) -> None:
        self.conn = open_dbus_connection(address)
        self.capabilities = capabilities
        self.count = 0
        self.lock = threading.Lock()
        reply = self.conn.send_and_get_reply(message_bus.RequestName(NAME, 4))
        if reply.body[0] != 1:
            raise RuntimeError(f"could not own {NAME}: {reply.body}")

    def serve(self) -> None:
        while True:
            try:
                msg = self.conn.receive()
            except (OSError, ValueError, EOFError):
                return
            if msg.header.message_type != MessageType.method_call:
                continue
            with self.lock:
                self.conn.send(self._answer(msg, msg.header.fields.get(HeaderFields.member)))

    def _answer(self, msg: Any, member: str | None) -> Any:
        if member == "Introspect":
            return new_method_return(msg, "s", (_INTROSPECT,))
        if member == "GetCapabilities":
            return new_method_return(msg, "as", (self.capabilities,))
        if member == "GetServerInformation":
            return new_method_return(msg, "ssss", ("test-server", "botpsy", "1", "1.2"))
        if member == "Notify":
            if msg.header.fields.get(HeaderFields.signature) != "susssasa{sv}i":
                sig = msg.header.fields.get(HeaderFields.signature)
                return new_error(
                    msg, "org.freedesktop.DBus.Error.InvalidArgs", "s", (f"signature {sig}",)
                )
            app, replaces, _icon, summary, body, actions, hints, timeout = msg.body
            self.count += 1
            nid = replaces or self.count
            plain = {k: v[1] for k, v in hints.items()}
            record = {
                "event": "notify",
                "id": nid,
                "app_name": app,
                "summary": summary,
                "body": body,
                "actions": list(actions),
                "hints": plain,
                "timeout": timeout,
            }
            print(json.dumps(record), flush=True)
            return new_method_return(msg, "u", (nid,))
        if member == "CloseNotification":
            (nid,) = msg.body
            print(json.dumps({"event": "close", "id": nid}), flush=True)
            self._emit("NotificationClosed", "uu", (nid, 3))
            return new_method_return(msg, "", ())
        return new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod", "s", (str(member),))

    def _emit(self, name: str, signature: str, body: tuple[Any, ...]) -> None:
        self.conn.send(new_signal(DBusAddress(PATH, interface=NAME), name, signature, body))

    def invoke(self, nid: int, action: str) -> None:
        """What a user clicking an action button in the notification does."""
        with self.lock:
            self._emit("ActionInvoked", "us", (nid, action))
            self._emit("NotificationClosed", "uu", (nid, 2))


def _main(argv: list[str]) -> None:
    server = NotificationServer(argv[0], [c for c in argv[1].split(",") if c])
    print(json.dumps({"event": "ready"}), flush=True)
    threading.Thread(target=server.serve, daemon=True).start()
    for line in sys.stdin:
        words = line.split()
        if len(words) == 3 and words[0] == "invoke":
            server.invoke(int(words[1]), words[2])


class ServerProcess:
    """The test's handle on the server process: what it received, and clicks on actions."""

    def __init__(self, address: str, capabilities: list[str]) -> None:
        self.address = address
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.helpers.notification_server",
                address,
                ",".join(capabilities),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if not self.wait_for(lambda e: e["event"] == "ready", 10):
            raise RuntimeError("the notification server did not start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.events.append(json.loads(line))
                self._cond.notify_all()

    def wait_for(self, match: Any, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for event in self.events:
                    if match(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def notifications(self) -> list[dict[str, Any]]:
        with self._cond:
            return [e for e in self.events if e["event"] == "notify"]

    def invoke(self, nid: int, action: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"invoke {nid} {action}\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()  # the server ends when its stdin does
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()


@contextlib.contextmanager
def private_bus() -> Iterator[str]:
    """A dbus-daemon of our own (never the user's session bus); yields its address."""
    daemon = shutil.which("dbus-daemon")
    if daemon is None:
        raise RuntimeError("dbus-daemon is missing: install Debian's `dbus` package")
    proc = subprocess.Popen(
        [daemon, "--session", "--nofork", "--nopidfile", "--print-address=1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        address = proc.stdout.readline().strip()
        if not address:
            raise RuntimeError("dbus-daemon printed no address")
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


@contextlib.contextmanager
def notification_server(capabilities: list[str] | None = None) -> Iterator[ServerProcess]:
    """A private bus with a notification server on it; ``server.address`` is the bus address."""
    caps = ["body", "actions"] if capabilities is None else capabilities
    with private_bus() as address:
        server = ServerProcess(address, caps)
        try:
            yield server
        finally:
            server.stop()


if __name__ == "__main__":
    _main(sys.argv[1:])
