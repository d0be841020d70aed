"""A real desktop session for the device tools' tests: a private D-Bus session bus, a PulseAudio
server with two null sinks (real output devices without a sound card), GNOME's settings through
dconf on that bus, desktop entries in a private XDG data folder, and a screen saver service.

The screen saver is the one stand-in: no desktop shell runs here, so a small service owns
``org.freedesktop.ScreenSaver`` on the private bus and records the ``Lock`` calls it gets, as
GNOME's or KDE's would lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

PROGRAMS = ("dbus-daemon", "pulseaudio", "gsettings", "gio")
INSTALL = (
    "apt install dbus pulseaudio libglib2.0-bin dconf-service gsettings-desktop-schemas"
    " gnome-settings-daemon-common"
)


def available() -> bool:
    return all(shutil.which(p) for p in PROGRAMS)


@dataclass
class DesktopSession:
    env: dict[str, str]
    """What a process needs to be in this session (bus, pulse server, XDG folders)."""
    pulse_server: str
    applications: Path
    launched: Path
    """Each start of a test app appends its arguments here, one line per start."""
    locks: list[str] = field(default_factory=list)
    """The Lock calls the screen saver got (the caller's bus name each)."""

    def apply(self) -> dict[str, str | None]:
        """Put the session into this process's environment; returns what to restore."""
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        return saved

    def add_app(
        self, file_name: str, name: str, *, mime: str = "", extra: str = "", takes: str = "%F"
    ) -> Path:
        """A desktop entry whose program writes its arguments to :attr:`launched`."""
        script = self.applications.parent / f"{file_name}.sh"
        script.write_text(f'#!/bin/sh\necho "{name}: $*" >> "{self.launched}"\n', encoding="utf-8")
        script.chmod(0o755)
        entry = self.applications / f"{file_name}.desktop"
        lines = [
            "[Desktop Entry]",
            "Type=Application",
            f"Name={name}",
            f"Exec={script} {takes}",
            *([f"MimeType={mime};"] if mime else []),
            extra,
        ]
        entry.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return entry

    def default_app(self, mime: str, entry: Path) -> None:
        """Make ``entry`` the default app for ``mime`` (mimeapps.list, as the desktop does)."""
        subprocess.run(
            ["gio", "mime", mime, entry.name],
            env={**os.environ, **self.env},
            check=True,
            capture_output=True,
        )

    def launches(self, count: int, timeout: float = 10.0) -> list[str]:
        """The first ``count`` launch lines, waiting for them (apps start asynchronously)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.launched.exists():
                lines = self.launched.read_text(encoding="utf-8").splitlines()
                if len(lines) >= count:
                    return lines
            time.sleep(0.05)
        return (
            self.launched.read_text(encoding="utf-8").splitlines() if self.launched.exists() else []
        )


@contextmanager
def desktop_session(folder: Path) -> Iterator[DesktopSession]:
    folder.mkdir(parents=True, exist_ok=True)
    home, runtime, data, config = (folder / n for n in ("home", "run", "data", "config"))
    for d in (home, runtime, data / "applications", config):
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    env = {
        "HOME": str(home),
        "XDG_RUNTIME_DIR": str(runtime),
        "XDG_DATA_HOME": str(data),
        # its own first (apps, mimeapps), then the system's (GSettings schemas, real apps)
        "XDG_DATA_DIRS": f"{data}:/usr/local/share:/usr/share",
        "XDG_CONFIG_HOME": str(config),
        "GSETTINGS_BACKEND": "dconf",
    }
    procs: list[subprocess.Popen[str]] = []
    stop = threading.Event()
    thread: threading.Thread | None = None
    log = (folder / "pulseaudio.log").open("w", encoding="utf-8")
    try:
        bus = subprocess.Popen(
            ["dbus-daemon", "--session", "--nofork", "--print-address=1",
             f"--address=unix:path={runtime}/bus"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, **env}, text=True,
        )  # fmt: skip
        procs.append(bus)
        assert bus.stdout is not None
        address = bus.stdout.readline().strip()
        if not address:
            raise RuntimeError("dbus-daemon did not start")
        env["DBUS_SESSION_BUS_ADDRESS"] = address
        socket = runtime / "pulse-native"
        pulse = subprocess.Popen(
            ["pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no",
             "--disallow-exit", "--log-target=stderr",
             "-L", f"module-native-protocol-unix socket={socket} auth-anonymous=1",
             "-L", "module-null-sink sink_name=speakers "
                   "sink_properties=device.description=Speakers",
             "-L", "module-null-sink sink_name=headphones "
                   "sink_properties=device.description=Headphones"],
            stdout=subprocess.DEVNULL, stderr=log,
            env={**os.environ, **env}, text=True,
        )  # fmt: skip
        procs.append(pulse)
        server = f"unix:{socket}"
        _wait_for_pulse(server, pulse)
        session = DesktopSession(env, server, data / "applications", folder / "launched.txt")
        thread = threading.Thread(
            target=_screen_saver, args=(address, session.locks, stop), daemon=True
        )
        thread.start()
        yield session
    finally:
        stop.set()
        if thread is not None:
            thread.join(5)
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        log.close()
        # dconf-service was started by the bus for gsettings; it ends with its bus


def _wait_for_pulse(server: str, proc: subprocess.Popen[str]) -> None:
    import pulsectl

    deadline = time.monotonic() + 30
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"pulseaudio exited with {proc.returncode}")
        try:
            with pulsectl.Pulse("botpsy-tests", server=server) as pulse:
                if len(pulse.sink_list()) >= 2:
                    pulse.sink_default_set("speakers")
                    for sink in pulse.sink_list():
                        pulse.volume_set_all_chans(sink, 0.5)
                    return
        except Exception as exc:  # not up yet
            last = exc
        time.sleep(0.1)
    raise RuntimeError(f"pulseaudio did not come up: {last}")


def _screen_saver(address: str, locks: list[str], stop: threading.Event) -> None:
    """Own org.freedesktop.ScreenSaver on the bus and answer Lock (recording who asked)."""
    from jeepney import HeaderFields, MessageType, new_error, new_method_return
    from jeepney.bus_messages import message_bus
    from jeepney.io.blocking import open_dbus_connection

    with open_dbus_connection(address) as conn:
        conn.send_and_get_reply(message_bus.RequestName("org.freedesktop.ScreenSaver"))
        while not stop.is_set():
            try:
                msg = conn.receive(timeout=0.2)
            except TimeoutError:
                continue
            except OSError:  # the bus went away
                return
            if msg.header.message_type is not MessageType.method_call:
                continue
            member = msg.header.fields.get(HeaderFields.member)
            if member == "Lock":
                locks.append(str(msg.header.fields.get(HeaderFields.sender)))
                conn.send(new_method_return(msg))
            else:
                conn.send(new_error(msg, "org.freedesktop.DBus.Error.UnknownMethod"))
