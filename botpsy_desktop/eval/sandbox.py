"""A case's sandbox: a throwaway profile and home, seeded through the real app and its tools."""

from __future__ import annotations

import base64
import functools
import json
import math
import os
import shutil
import socket
import struct
import tempfile
import time
import uuid
import wave
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime
from pathlib import Path
from typing import Any

from mutagen.flac import FLAC
from mutagen.id3 import TALB, TCON, TDRC, TIT2, TPE1, TRCK
from mutagen.wave import WAVE

from botpsy_desktop.adapters.music import PlayerState
from botpsy_desktop.agent.hardening import clean_output
from botpsy_desktop.agent.tools import ToolRegistry
from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.accounts import AccountBook, MailAccount
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.eval.checks import Context
from botpsy_desktop.eval.imap import ImapServer, Mailbox
from botpsy_desktop.eval.spec import Case, FileSpec, MailSpec, TrackSpec
from botpsy_desktop.eval.weather import WeatherStandIn

MAIL_ACCOUNT = "mail"
MAIL_ADDRESS = "me@example.org"
MAIL_PASSWORD = "sandbox"
_TEXT_SUFFIXES = {".txt", ".md", ".csv", ".json", ".py", ".html", ".log", ".ini", ".yaml", ".xml"}


class SandboxError(BotpsyError):
    """A case's sandbox could not be built (a seed the real tools refused, a bad file)."""


class SilentPlayer:
    """The speakers of the sandbox: plays nothing, keeps what it was told (file, state, volume)."""

    name = "silent"

    def __init__(self) -> None:
        self.loaded: Path | None = None
        self.volume: float | None = None
        self._state = PlayerState.STOPPED

    def can_play(self, path: Path) -> bool:
        return True

    def load(self, path: Path) -> None:
        self.loaded = path

    def play(self) -> None:
        self._state = PlayerState.PLAYING

    def pause(self) -> None:
        if self._state is PlayerState.PLAYING:
            self._state = PlayerState.PAUSED

    def resume(self) -> None:
        if self._state is PlayerState.PAUSED:
            self._state = PlayerState.PLAYING

    def stop(self) -> None:
        self._state = PlayerState.STOPPED

    def set_volume(self, volume: float) -> bool:
        self.volume = volume
        return True

    def position(self) -> float:
        return 0.0

    def state(self) -> PlayerState:
        return self._state

    def on_finished(self, callback: Callable[[], None]) -> None:
        """Nothing ever finishes: the sandbox run is shorter than any track would be."""

    def last_error(self) -> str | None:
        return None

    def close(self) -> None:
        self._state = PlayerState.STOPPED


@dataclass
class Sandbox:
    """One case's world while it runs."""

    case: Case
    root: Path
    home: Path
    app: App
    player: SilentPlayer
    context: Context
    tracks: dict[Path, TrackSpec] = field(default_factory=dict)
    mailbox: Mailbox = field(default_factory=Mailbox)


@dataclass(frozen=True)
class SandboxSettings:
    """What every case's profile shares: model settings and the weather stand-in."""

    weather: WeatherStandIn
    model: Mapping[str, Any] = field(default_factory=dict)
    agent: Mapping[str, Any] = field(default_factory=dict)
    keep: bool = False


@contextmanager
def _environment(home: Path, zone: str) -> Iterator[None]:
    """The user's home and time zone for the run: ``~`` and local time as the case has them."""
    names = ("HOME", "XDG_DATA_HOME", "TZ", "USERPROFILE")
    saved = {n: os.environ.get(n) for n in names}
    os.environ["HOME"] = str(home)
    os.environ["USERPROFILE"] = str(home)
    os.environ["XDG_DATA_HOME"] = str(home / ".local" / "share")
    os.environ["TZ"] = zone
    if hasattr(time, "tzset"):
        time.tzset()
    try:
        yield
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
        if hasattr(time, "tzset"):
            time.tzset()


def _closed_port() -> socket.socket:
    """A bound, never-listening socket on 127.0.0.1: connecting to its port is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def open_sandbox(case: Case, settings: SandboxSettings) -> Iterator[Sandbox]:
    """Build the case's profile and home, seed it, and yield it; everything is removed after."""
    root = Path(tempfile.mkdtemp(prefix=f"botpsy-eval-{case.id[:40]}-"))
    home = root / "home"
    home.mkdir()
    closed = _closed_port()
    mailbox = sandbox_mailbox(case)
    imap = ImapServer(mailbox, MAIL_ADDRESS, MAIL_PASSWORD).start()
    try:
        with _environment(home, case.time_zone):
            tracks = _write_home(case, home)
            profile = root / "profile"
            paths = Paths.resolve(profile)
            paths.ensure()
            port = closed.getsockname()[1]
            _write_config(case, paths, home, port, settings, imap.port)
            player = SilentPlayer()
            moment = case.moment
            app = build_app(profile, player=player, now=lambda: moment)
            try:
                app.secrets.set(MAIL_ACCOUNT, MAIL_PASSWORD, session_only=True)
                settings.weather.serve(case.sandbox.weather, moment)
                box = Sandbox(
                    case,
                    root,
                    home,
                    app,
                    player,
                    Context(moment, case.zone, home),
                    {home / p: t for p, t in tracks.items()},
                    mailbox,
                )
                _seed(box)
                yield box
            finally:
                app.close()
    finally:
        imap.close()
        closed.close()
        if not settings.keep:
            shutil.rmtree(root, ignore_errors=True)


def _write_config(
    case: Case, paths: Paths, home: Path, port: int, settings: SandboxSettings, imap_port: int
) -> None:
    weather = settings.weather
    config: dict[str, Any] = {
        "model": dict(settings.model),
        "agent": dict(settings.agent),
        "files": {"roots": [str(home)]},
        "music": {"folders": [str(home / "Music")], "player": "none", "rescan_s": 0},
        "alarms": {"time_zone": case.time_zone},
        "calendar": {"time_zone": case.time_zone},
        "weather": {
            "geocoding_url": weather.geocoding_url,
            "forecast_url": weather.forecast_url,
            "units": "metric",
            "default_location": case.sandbox.weather.default_location,
            "cache_s": 0,
        },
    }
    paths.config_file.write_text(json.dumps(config, indent=1), encoding="utf-8")
    AccountBook.for_paths(paths).add(
        MailAccount(
            name=MAIL_ACCOUNT,
            username=MAIL_ADDRESS,
            address=MAIL_ADDRESS,
            display_name="Sandbox User",
            imap_host="127.0.0.1",
            imap_port=imap_port,
            imap_security="none",
            smtp_host="127.0.0.1",
            smtp_port=port,
            smtp_security="none",
        )
    )


def sandbox_mailbox(case: Case) -> Mailbox:
    """The case's mailbox: each ``sandbox.mail`` entry as a message in its folder, in order (so
    the UIDs of a folder are 1, 2, ... in the order the case lists its messages)."""
    mailbox = Mailbox()
    for i, spec in enumerate(case.sandbox.mail):
        raw, at = _mail_message(case, spec, i)
        mailbox.add(spec.folder, raw, () if spec.unread else ("\\Seen",), at)
    return mailbox


def _mail_message(case: Case, spec: MailSpec, index: int) -> tuple[bytes, datetime]:
    at = datetime.fromisoformat(spec.date).replace(tzinfo=case.zone)
    msg = EmailMessage()
    try:
        msg["From"] = spec.sender
        msg["To"] = spec.to
        if spec.cc:
            msg["Cc"] = spec.cc
        msg["Subject"] = spec.subject
        msg["Date"] = format_datetime(at)
        msg["Message-ID"] = f"<{case.id}.{index + 1}@sandbox.example.org>"
        msg.set_content(spec.body)
        fills: list[tuple[str, int]] = []
        for a in spec.attachments:
            maintype, _, subtype = a.type.partition("/")
            msg.add_attachment(
                b"",
                maintype=maintype,
                subtype=subtype or "octet-stream",
                filename=a.name,
            )
            marker = f"attachment-{uuid.uuid4().hex}"
            list(msg.iter_attachments())[-1].set_payload(marker)
            fills.append((marker, a.size))
        raw = msg.as_bytes(policy=policy.SMTP)
        # the filler's base64 goes in afterwards: the email generator writes megabytes slowly
        unit = b"sandbox attachment\n"
        for marker, size in fills:
            data = base64.encodebytes((unit * (size // len(unit) + 1))[:size])
            raw = raw.replace(marker.encode(), data.rstrip(b"\n").replace(b"\n", b"\r\n"), 1)
        return raw, at
    except (ValueError, TypeError, IndexError) as exc:
        raise SandboxError(
            f"Case {case.id}: sandbox mail #{index + 1} ({spec.subject!r}) cannot be built: {exc}.",
            "Fix its from, to, cc or attachment type.",
        ) from None


def _local_timestamp(text: str, case: Case) -> float:
    moment = (
        datetime.fromisoformat(text) if "T" in text else datetime.fromisoformat(text + "T12:00")
    )
    return moment.replace(tzinfo=case.zone).timestamp()


def _write_home(case: Case, home: Path) -> dict[str, TrackSpec]:
    for spec in case.sandbox.files:
        _write_file(case, home, spec)
    tracks: dict[str, TrackSpec] = {}
    for track in case.sandbox.music:
        _write_track(home / track.path, track)
        tracks[track.path] = track
    (home / "Music").mkdir(exist_ok=True)
    return tracks


def _write_file(case: Case, home: Path, spec: FileSpec) -> None:
    path = home / spec.path
    if spec.folder:
        path.mkdir(parents=True, exist_ok=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        if spec.text is not None:
            path.write_text(spec.text, encoding="utf-8")
        elif spec.base64 is not None:
            try:
                path.write_bytes(base64.b64decode(spec.base64, validate=True))
            except ValueError as exc:
                raise SandboxError(
                    f"Case {case.id}: sandbox file {spec.path} has invalid base64 ({exc}).",
                    "Fix the base64 text.",
                ) from None
        else:
            size = spec.size if spec.size is not None else 0
            text_like = path.suffix.lower() in _TEXT_SUFFIXES
            unit = b"lorem ipsum dolor sit amet\n" if text_like else bytes(range(256))
            path.write_bytes((unit * (size // len(unit) + 1))[:size])
    if spec.modified is not None:
        stamp = _local_timestamp(spec.modified, case)
        os.utime(path, (stamp, stamp))


_TONE_RATE = 8000


@functools.cache
def _tone(frames: int) -> bytes:
    """A 440 Hz tone of ``frames`` 16-bit mono samples at 8 kHz (the same for every track of
    that length: computed once a process, not once a case)."""
    step = 2 * math.pi * 440 / _TONE_RATE
    return b"".join(struct.pack("<h", int(6000 * math.sin(i * step))) for i in range(frames))


def _write_track(path: Path, track: TrackSpec) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tags = {
        "title": track.title,
        "artist": track.artist,
        "album": track.album,
        "genre": track.genre,
        "date": str(track.year) if track.year else "",
        "tracknumber": str(track.track) if track.track else "",
    }
    if path.suffix.lower() == ".flac":
        rate, samples = 44100, int(44100 * track.seconds)
        packed = (rate << 44) | (0 << 41) | (15 << 36) | samples
        info = struct.pack(">HH", 4096, 4096) + bytes(6) + packed.to_bytes(8, "big") + bytes(16)
        path.write_bytes(b"fLaC" + bytes([0x80]) + len(info).to_bytes(3, "big") + info)
        audio: Any = FLAC(path)  # type: ignore[no-untyped-call]
        audio.add_tags()
        for key, value in tags.items():
            if value:
                audio[key] = value
        audio.save()
        return
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(_TONE_RATE)
        out.writeframes(_tone(int(_TONE_RATE * track.seconds)))
    wav: Any = WAVE(path)  # type: ignore[no-untyped-call]
    wav.add_tags()
    id3 = wav.tags
    assert id3 is not None
    frames_by_tag: dict[str, Any] = {
        "title": TIT2,
        "artist": TPE1,
        "album": TALB,
        "genre": TCON,
        "date": TDRC,
    }
    for key, frame in frames_by_tag.items():
        if tags[key]:
            id3.add(frame(encoding=3, text=tags[key]))
    if tags["tracknumber"]:
        id3.add(TRCK(encoding=3, text=tags["tracknumber"]))  # type: ignore[no-untyped-call]
    wav.save()


def run_tool(box: Sandbox, name: str, arguments: Mapping[str, Any], why: str) -> str:
    """Run one tool straight on the sandbox (seeding, given history); its output as the loop
    would show it to the model. A refusal stops the case with ``why`` in the message."""
    tool = box.app.registry.get(name)
    if tool is None:
        raise SandboxError(
            f"Case {box.case.id}: {why} uses the tool {name!r}, which the app does not have.",
            "Use a tool listed by `botpsy tools`.",
        )
    try:
        value = tool.call(tool.validate(dict(arguments)))
    except BotpsyError as exc:
        raise SandboxError(f"Case {box.case.id}: {why} failed: {exc}", "Fix the case.") from None
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return clean_output(text, box.app.config.agent.max_observation_chars, frozenset())


def _seed(box: Sandbox) -> None:
    sandbox = box.case.sandbox
    for i, event in enumerate(sandbox.events):
        args: dict[str, Any] = {"title": event.title, "start": event.start}
        for key in ("end", "duration"):
            if getattr(event, key):
                args[key] = getattr(event, key)
        for key in ("location", "description", "repeat"):
            if getattr(event, key):
                args[key] = getattr(event, key)
        if event.attendees:
            args["attendees"] = ", ".join(event.attendees)
            args.pop("repeat", None)
        tool = "create_meeting" if event.attendees else "create_event"
        run_tool(box, tool, args, f"sandbox event #{i + 1} ({event.title!r})")
    for i, task in enumerate(sandbox.tasks):
        targs: dict[str, Any] = {"title": task.title}
        if task.due:
            targs["due"] = task.due
        run_tool(box, "add_task", targs, f"sandbox task #{i + 1} ({task.title!r})")
        if task.done:
            run_tool(box, "complete_task", {"task": task.title}, f"sandbox task #{i + 1}")
    for i, alarm in enumerate(sandbox.alarms):
        why = f"sandbox alarm #{i + 1}"
        if alarm.kind == "timer":
            run_tool(box, "set_timer", {"duration": alarm.duration, "label": alarm.label}, why)
        elif alarm.kind == "alarm":
            aargs = {"time": alarm.time, "label": alarm.label, "repeat": alarm.repeat}
            run_tool(box, "set_alarm", aargs, why)
        else:
            rargs = {"time": alarm.time, "text": alarm.text, "repeat": alarm.repeat}
            run_tool(box, "set_reminder", rargs, why)
    if sandbox.music:
        run_tool(box, "scan_music_library", {}, "indexing the sandbox music")


def sandbox_tools() -> ToolRegistry:
    """The tools every case's profile offers (the app's, with the sandbox's mail account), for
    checking cases and writing replays; their clients are already closed."""
    probe = Case.model_validate(
        {
            "id": "probe",
            "domain": "none",
            "category": "irrelevance",
            "language": "en",
            "now": "2026-01-01T12:00",
            "time_zone": "UTC",
            "request": "hi",
            "expect": {"no_call": True},
        }
    )
    with open_sandbox(probe, SandboxSettings(WeatherStandIn(base="http://127.0.0.1:9"))) as box:
        return box.app.registry
