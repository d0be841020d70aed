"""Where calendar objects live: a local folder of .ics files, or a CalDAV server."""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from botpsy_desktop.adapters.calendar.ical import (
    CalendarDataError,
    Kind,
    Stored,
    finish,
    kinds_of,
    parse_ics,
    short_id,
    uid_of,
)
from botpsy_desktop.core.accounts import CalDAVAccount
from botpsy_desktop.core.errors import BotpsyError, ToolError
from botpsy_desktop.core.outside import Outside, outside
from botpsy_desktop.core.tools import check_stopped

if TYPE_CHECKING:
    import icalendar

LOCAL = "local"


@dataclass
class Fetched:
    """Objects read from a source, and the ones that could not be read (one sentence each)."""

    items: list[Stored] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Source(Protocol):
    """A place holding calendars: read objects of a kind, create, replace and remove them."""

    name: str

    def read(
        self, kind: Kind, start: datetime | None, end: datetime | None, calendar: str | None
    ) -> Fetched: ...

    def create(self, ical: icalendar.Calendar, kind: Kind, calendar: str | None) -> Stored: ...

    def replace(self, item: Stored, ical: icalendar.Calendar) -> None: ...

    def remove(self, item: Stored) -> None: ...

    def check(self) -> str: ...


class LocalSource:
    """The local calendar: one ``.ics`` file per event or task in a folder (a vdir).

    Works with no account. Each change replaces one file atomically; a file that is not valid
    iCalendar is skipped with a note naming it, never overwritten.
    """

    def __init__(self, folder: Path) -> None:
        self.name = LOCAL
        self.folder = folder
        self._lock = threading.Lock()

    def read(
        self, kind: Kind, start: datetime | None, end: datetime | None, calendar: str | None
    ) -> Fetched:
        fetched = Fetched()
        if not self.folder.is_dir():
            return fetched
        for path in sorted(self.folder.glob("*.ics")):
            try:
                data = path.read_bytes()
            except OSError as exc:
                fetched.problems.append(f"Cannot read {path}: {exc.strerror}.")
                continue
            try:
                cal = parse_ics(data, f"The local calendar file {path}")
            except CalendarDataError as exc:
                fetched.problems.append(str(exc))
                continue
            uid = uid_of(cal)
            if uid is None or kind not in kinds_of(cal):
                continue
            fetched.items.append(Stored(uid, cal, LOCAL, LOCAL, path))
        return fetched

    def create(self, ical: icalendar.Calendar, kind: Kind, calendar: str | None) -> Stored:
        if calendar not in (None, "", LOCAL):
            raise ToolError(
                f"The local calendar has no calendar named {calendar!r}.",
                'Leave calendar out, or use "local".',
            )
        uid = uid_of(ical)
        assert uid is not None
        stem = re.sub(r"[^A-Za-z0-9._@-]", "_", uid)[:80] or "event"
        path = self.folder / f"{stem}-{short_id(uid)}.ics"
        with self._lock:
            if path.exists():
                raise ToolError(f"An event with UID {uid} already exists in the local calendar.")
            self._write(path, ical)
        return Stored(uid, ical, LOCAL, LOCAL, path)

    def replace(self, item: Stored, ical: icalendar.Calendar) -> None:
        with self._lock:
            self._write(Path(item.handle), ical)
        item.ical = ical

    def remove(self, item: Stored) -> None:
        with self._lock, contextlib.suppress(FileNotFoundError):
            Path(item.handle).unlink()

    def check(self) -> str:
        fetched = self.read("VEVENT", None, None, None)
        return f"local calendar in {self.folder}: {len(fetched.items)} events"

    def _write(self, path: Path, ical: icalendar.Calendar) -> None:
        self.folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        finish(ical)
        tmp = path.with_name(f".{path.name}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(ical.to_ical())
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)


PasswordProvider = Callable[[], str]


class CalDAVSource:
    """The calendars of one CalDAV account. Each call connects, does its work and closes.

    The password comes from ``password()`` at the moment of use (the keyring), so a missing
    keyring or password is a clear error when a tool runs, never at start.
    """

    def __init__(
        self, account: CalDAVAccount, password: PasswordProvider, *, timeout_s: float = 20.0
    ) -> None:
        self.name = account.name
        self.account = account
        self._password = password
        self.timeout_s = timeout_s

    # --- connection ----------------------------------------------------------------------

    @contextmanager
    def _client(self) -> Iterator[Any]:
        from caldav.davclient import DAVClient

        password = self._password()
        client = DAVClient(
            url=self.account.url,
            username=self.account.username,
            password=password,
            timeout=max(1, math.ceil(self.timeout_s)),
            ssl_verify_cert=self.account.ca_file or True,
            enable_rfc6764=False,
        )
        try:
            with self._errors():
                yield client
        finally:
            client.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        from caldav.lib import error as dav

        where = f"the CalDAV server of account '{self.name}' ({self.account.url})"
        try:
            yield
        except BotpsyError:
            raise
        except dav.AuthorizationError:
            raise ToolError(
                f"{where[0].upper()}{where[1:]} refused the user name or password.",
                f"Check them with `botpsy account test {self.name}`; Nextcloud, Fastmail and "
                "iCloud need an app password.",
            ) from None
        except dav.NotFoundError:
            raise ToolError(
                f"Nothing was found at {self.account.url} on {where}.",
                "Check the account's CalDAV URL.",
            ) from None
        except dav.DAVError as exc:
            raise ToolError(
                f"{where[0].upper()}{where[1:]} answered with an error: {_short(exc)}.",
                "Try again later, or check the account with `botpsy account test`.",
            ) from None
        except TimeoutError:
            raise ToolError(
                f"{where[0].upper()}{where[1:]} did not answer within {self.timeout_s:g} s.",
                "Check the network, or try again later.",
            ) from None
        except OSError as exc:
            text = _reason(exc)
            if "certificate" in text:
                raise ToolError(
                    f"{where[0].upper()}{where[1:]} has a {text}.",
                    "If the server uses its own certificate, set the account's ca_file to it.",
                ) from None
            if "timed out" in text.lower() or "timeout" in type(exc).__name__.lower():
                raise ToolError(
                    f"{where[0].upper()}{where[1:]} did not answer within {self.timeout_s:g} s.",
                    "Check the network, or try again later.",
                ) from None
            raise ToolError(
                f"Cannot reach {where}: {text}.",
                "Check the network and the URL, and that the server is running.",
            ) from None

    def _calendars(self, client: Any, kind: Kind) -> list[Any]:
        calendars = client.principal().get_calendars()
        supported = []
        for cal in calendars:
            try:
                components = cal.get_supported_components()
            except Exception:
                components = ["VEVENT", "VTODO"]
            if kind in components:
                supported.append(cal)
        return supported

    def _pick(self, calendars: list[Any], wanted: str | None, kind: Kind) -> Any:
        what = "events" if kind == "VEVENT" else "tasks"
        if not calendars:
            raise ToolError(
                f"Account '{self.name}' has no calendar that holds {what}.",
                "Create one in your calendar app, or use another calendar.",
            )
        name = wanted or self.account.calendar
        if not name:
            return calendars[0]
        for cal in calendars:
            if _display_name(cal).casefold() == name.casefold():
                return cal
        names = ", ".join(_display_name(c) for c in calendars)
        raise ToolError(
            f"Account '{self.name}' has no calendar named {name!r} for {what} (it has: {names}).",
            "Use one of those names.",
        )

    # --- Source ----------------------------------------------------------------------------

    def read(
        self, kind: Kind, start: datetime | None, end: datetime | None, calendar: str | None
    ) -> Fetched:
        fetched = Fetched()
        with self._client() as client:
            calendars = self._calendars(client, kind)
            if calendar:
                calendars = [self._pick(calendars, calendar, kind)]
            for cal in calendars:
                label = _display_name(cal)
                # the server's objects as they are: no expansion of repeats and no filtering
                # on this side (the library would expand every rule over the whole range
                # before anything could bound it); ical.occurrences expands them, bounded
                plain = {"expand": False, "post_filter": False}
                if kind == "VTODO":
                    objects = cal.search(todo=True, include_completed=True, **plain)
                elif start is not None and end is not None:
                    objects = cal.search(start=start, end=end, event=True, **plain)
                else:
                    objects = cal.search(event=True, **plain)
                for obj in objects:
                    check_stopped()
                    where = f"An object of calendar '{label}' of account '{self.name}' ({obj.url})"
                    try:
                        ical = parse_ics(obj.data, where)
                    except CalendarDataError as exc:
                        fetched.problems.append(str(exc))
                        continue
                    uid = uid_of(ical)
                    if uid is not None and kind in kinds_of(ical):
                        fetched.items.append(Stored(uid, ical, self.name, label, str(obj.url)))
        return fetched

    def create(self, ical: icalendar.Calendar, kind: Kind, calendar: str | None) -> Stored:
        finish(ical)
        with self._client() as client:
            calendars = self._calendars(client, kind)
            target = self._pick(calendars, calendar, kind)
            data = ical.to_ical().decode("utf-8")
            if kind == "VEVENT":
                obj = target.add_event(data, no_overwrite=True, increase_seqno=False)
            else:
                obj = target.add_todo(data, no_overwrite=True, increase_seqno=False)
            uid = uid_of(ical)
            assert uid is not None
            label = _display_name(target)
            return Stored(uid, ical, self.name, label, str(obj.url), choices=len(calendars))

    def replace(self, item: Stored, ical: icalendar.Calendar) -> None:
        finish(ical)
        with self._client() as client:
            obj = _resource(client, item, ical.to_ical().decode("utf-8"))
            obj.save(increase_seqno=False, only_this_recurrence=False)
        item.ical = ical

    def remove(self, item: Stored) -> None:
        with self._client() as client:
            _resource(client, item, None).delete()

    def check(self) -> str:
        with self._client() as client:
            calendars = client.principal().get_calendars()
            names = ", ".join(_display_name(c) for c in calendars) or "none"
            return f"CalDAV ok: {len(calendars)} calendar(s) ({names})"


def _resource(client: Any, item: Stored, data: str | None) -> Any:
    """The server object behind ``item`` (``handle`` is its URL), on a live connection."""
    from caldav.calendarobjectresource import Event, Todo
    from caldav.collection import Calendar

    url = str(item.handle)
    parent = Calendar(client=client, url=url[: url.rstrip("/").rfind("/") + 1])
    cls = Todo if "VTODO" in kinds_of(item.ical) else Event
    return cls(client=client, url=url, data=data, parent=parent)


def _display_name(cal: Any) -> Outside:
    try:
        name = cal.get_display_name()
    except Exception:
        name = None
    # set on the server (by whoever owns a shared calendar): outside content wherever it goes
    if name:
        return outside(str(name))
    return outside(str(cal.url).rstrip("/").rsplit("/", 1)[-1])


def _reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words, from the exception or anything it wraps."""
    import ssl  # here, not at start: about 4 MiB with OpenSSL in the app's process

    pending: list[BaseException] = [exc]
    seen: set[int] = set()
    while pending:
        e = pending.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"certificate this computer does not trust ({e.verify_message})"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, socket.gaierror):
            return f"unknown host ({e.strerror})"
        pending += [
            x for x in (e.__cause__, e.__context__, *e.args) if isinstance(x, BaseException)
        ]
    text = _short(exc)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "certificate this computer does not trust"
    errno = re.search(r"\[Errno -?\d+\] ([^'\"()\]]+)", text)
    return errno.group(1).strip().lower() if errno else text


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:200]
