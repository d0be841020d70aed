"""Where address books come from: vCard files and folders, and CardDAV accounts.

CardDAV is spoken here over the caldav library's ``DAVClient`` (the same HTTP session, login,
certificate and timeout handling the calendar uses, with the same account and keyring entry):
caldav 3.6 discovers CardDAV services but has no address-book objects, so the few WebDAV
requests a read-only sync needs are written here: PROPFIND for the principal, its
``addressbook-home-set`` and the books in it (with ``sync-token`` or ``getctag``, to skip a
book that did not change), PROPFIND Depth 1 for each changed book's ETags, and
``addressbook-multiget`` REPORTs for the cards whose ETag is new. A card gone from the server
is removed from the cache. XML is parsed by caldav (lxml, entities not resolved, no network).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urljoin, urlsplit

from botpsy_desktop.adapters.contacts.cache import BookState, ContactCache
from botpsy_desktop.adapters.contacts.vcard import (
    MAX_CARD_BYTES,
    Card,
    CardError,
    parse_card,
    split_cards,
)
from botpsy_desktop.core.accounts import CalDAVAccount
from botpsy_desktop.core.errors import BotpsyError, ToolError


@dataclass
class Synced:
    """What one sync did to one book."""

    book: str
    label: str
    written: int = 0
    removed: int = 0
    unchanged: bool = False
    problems: list[str] = field(default_factory=list)
    error: str = ""

    def line(self) -> str:
        if self.error:
            return f"{self.label}: not synced: {self.error}"
        if self.unchanged:
            said = "unchanged"
        else:
            said = f"{self.written} card(s) added or changed, {self.removed} removed"
        skipped = f"; {len(self.problems)} skipped" if self.problems else ""
        return f"{self.label}: {said}{skipped}"


class Source(Protocol):
    """A place holding one or more address books."""

    name: str

    def sync(self, cache: ContactCache, at: float) -> list[Synced]: ...


# --- vCard files and folders ------------------------------------------------------------------


class VcfSource:
    """A .vcf file or a folder of them (searched recursively); a book of its own.

    Incremental by file: a file whose size and change time are as cached is not read again;
    a file gone takes its cards with it."""

    def __init__(self, path: Path, *, own: bool, max_card_bytes: int = MAX_CARD_BYTES) -> None:
        self.path = path.expanduser()
        self.own = own
        self.name = f"files:{self.path}"
        self.label = (
            f"{self.path.name or self.path} (vCard {'folder' if self.path.is_dir() else 'file'})"
        )
        self.max_card_bytes = max_card_bytes

    def _files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        if self.path.is_dir():
            return sorted(
                p for p in self.path.rglob("*") if p.suffix.lower() == ".vcf" and p.is_file()
            )
        return []

    def fingerprint(self) -> tuple[tuple[str, int, int], ...]:
        """Each file's name, size and change time: what decides whether a sync reads it."""
        out = []
        for file in self._files():
            try:
                stat = file.stat()
            except OSError:
                continue
            out.append((str(file), stat.st_size, stat.st_mtime_ns))
        return tuple(out)

    def sync(self, cache: ContactCache, at: float) -> list[Synced]:
        cache.ensure_book(self.name, self.label, self.own, "vcf")
        report = Synced(self.name, self.label)
        if not self.path.exists():
            report.error = f"{self.path} does not exist (check [contacts] files in the settings)"
            cache.failed(self.name, report.error, at)
            return [report]
        cached = cache.etags(self.name)
        by_file: dict[str, dict[str, str]] = {}
        for href, etag in cached.items():
            by_file.setdefault(href.rsplit("#", 1)[0], {})[href] = etag
        put: list[tuple[str, str, Card]] = []
        remove: list[str] = []
        seen: set[str] = set()
        for file in self._files():
            key = str(file.relative_to(self.path)) if self.path.is_dir() else file.name
            seen.add(key)
            try:
                stat = file.stat()
                etag = f"{stat.st_mtime_ns}-{stat.st_size}"
                before = by_file.get(key, {})
                if before and all(e == etag for e in before.values()):
                    continue
                data = file.read_bytes()
            except OSError as exc:
                report.problems.append(f"Cannot read {file}: {exc.strerror}.")
                continue
            fresh: set[str] = set()
            for i, chunk in enumerate(split_cards(data)):
                href = f"{key}#{i}"
                try:
                    card = parse_card(chunk, f"Card {i + 1} of {file}", self.max_card_bytes)
                except CardError as exc:
                    report.problems.append(str(exc))
                    continue
                put.append((href, etag, card))
                fresh.add(href)
            remove += [h for h in before if h not in fresh]
        remove += [h for f, hrefs in by_file.items() if f not in seen for h in hrefs]
        report.written, report.removed = cache.apply(
            self.name, put=put, remove=remove, version=None, problems=report.problems, at=at
        )
        report.unchanged = not put and not remove
        return [report]


# --- CardDAV ----------------------------------------------------------------------------------

DAV = "DAV:"
CARD = "urn:ietf:params:xml:ns:carddav"
CS = "http://calendarserver.org/ns/"
_NS = f'xmlns:D="{DAV}" xmlns:C="{CARD}" xmlns:CS="{CS}"'
MULTIGET_CHUNK = 100

PasswordProvider = Callable[[], str]


class CardDAVSource:
    """The address books of a CalDAV/CardDAV account (the same account, URL discovery and
    keyring entry as its calendars). ``own``: the person declared these books theirs alone."""

    def __init__(
        self,
        account: CalDAVAccount,
        password: PasswordProvider,
        *,
        own: bool,
        timeout_s: float = 20.0,
        max_card_bytes: int = MAX_CARD_BYTES,
    ) -> None:
        self.account = account
        self.url = account.contacts_url or account.url
        """Where its address books are found: the account's CardDAV URL, else its CalDAV
        URL (one server serves both: Nextcloud, Radicale)."""
        self.name = f"carddav:{account.name}"
        self.own = own
        self._password = password
        self.timeout_s = timeout_s
        self.max_card_bytes = max_card_bytes

    @contextmanager
    def _client(self) -> Iterator[Any]:
        from caldav.davclient import DAVClient

        client = DAVClient(
            url=self.url,
            username=self.account.username,
            password=self._password(),
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

        where = f"the server of account '{self.account.name}' ({self.url})"
        try:
            yield
        except BotpsyError:
            raise
        except dav.AuthorizationError:
            raise ToolError(
                f"{where[0].upper()}{where[1:]} refused the user name or password.",
                f"Check them with `botpsy account test {self.account.name}`.",
            ) from None
        except dav.DAVError as exc:
            raise ToolError(
                f"{where[0].upper()}{where[1:]} answered with an error: {exc}."
            ) from None
        except (OSError, Exception) as exc:  # niquests' connection errors are not OSErrors
            text = " ".join(str(exc).split())[:200] or type(exc).__name__
            raise ToolError(
                f"Cannot reach {where}: {text}.",
                "Check the network and that the server is running; the address book answers "
                "from its last copy meanwhile.",
            ) from None

    def _url(self, href: str) -> str:
        return urljoin(self.url, href)

    def _propfind(self, client: Any, url: str, props: str, depth: int) -> list[tuple[str, Any]]:
        body = (
            f'<?xml version="1.0" encoding="utf-8"?><D:propfind {_NS}>'
            f"<D:prop>{props}</D:prop></D:propfind>"
        )
        response = client.request(
            url,
            "PROPFIND",
            body,
            {"Depth": str(depth), "Content-Type": "application/xml; charset=utf-8"},
        )
        return self._multistatus(response, "PROPFIND", url)

    def _multistatus(self, response: Any, what: str, url: str) -> list[tuple[str, Any]]:
        if response.status not in (200, 207) or response.tree is None:
            raise ToolError(
                f"The server of account '{self.account.name}' answered {what} on {url} with "
                f"status {response.status}.",
                "Check the account's URL; the server may not serve address books (CardDAV).",
            )
        out = []
        for item in response.tree.iter(f"{{{DAV}}}response"):
            href = item.find(f"{{{DAV}}}href")
            if href is None or not (href.text or "").strip():
                continue
            props = [
                p
                for st in item.iter(f"{{{DAV}}}propstat")
                if _ok(st)
                for p in st.iter(f"{{{DAV}}}prop")
            ]
            out.append((unquote((href.text or "").strip()), props))
        return out

    def books(self, client: Any) -> list[tuple[str, str, str]]:
        """(url, display name, version) of each address book of the account."""
        root = self._propfind(
            client,
            self.url,
            "<D:current-user-principal/><C:addressbook-home-set/>",
            0,
        )
        home = _first_href(root, f"{{{CARD}}}addressbook-home-set")
        if home is None:
            principal = _first_href(root, f"{{{DAV}}}current-user-principal")
            if principal is not None:
                found = self._propfind(client, self._url(principal), "<C:addressbook-home-set/>", 0)
                home = _first_href(found, f"{{{CARD}}}addressbook-home-set")
        home_url = self._url(home) if home else self.url
        listed = self._propfind(
            client,
            home_url,
            "<D:resourcetype/><D:displayname/><D:sync-token/><CS:getctag/>",
            1,
        )
        books = []
        for href, props in listed:
            if not any(
                p.find(f"{{{DAV}}}resourcetype/{{{CARD}}}addressbook") is not None for p in props
            ):
                continue
            name = _text(props, f"{{{DAV}}}displayname") or href.rstrip("/").rsplit("/", 1)[-1]
            version = _text(props, f"{{{DAV}}}sync-token") or _text(props, f"{{{CS}}}getctag")
            books.append((self._url(href), name, version))
        return books

    def sync(self, cache: ContactCache, at: float) -> list[Synced]:
        reports: list[Synced] = []
        try:
            with self._client() as client:
                books = self.books(client)
                if not books:
                    raise ToolError(
                        f"Account '{self.account.name}' has no address book on its server.",
                        "Create one in your contacts app, or turn contacts off for it.",
                    )
                for url, label, version in books:
                    reports.append(self._sync_book(client, cache, url, label, version, at))
        except BotpsyError as exc:
            known: list[BookState | None] = [
                b for b in cache.books() if b.id.startswith(f"{self.name}:")
            ]
            for book in known or [None]:
                book_id = book.id if book else f"{self.name}:"
                label = book.label if book else f"{self.account.name} (CardDAV)"
                if book is None:
                    cache.ensure_book(book_id, label, self.own, "carddav")
                cache.failed(book_id, str(exc), at)
                reports.append(Synced(book_id, label, error=str(exc)))
        return reports

    def _sync_book(
        self, client: Any, cache: ContactCache, url: str, name: str, version: str, at: float
    ) -> Synced:
        book_id = f"{self.name}:{urlsplit(url).path}"
        label = f"{name} ({self.account.name}, CardDAV)"
        cache.ensure_book(book_id, label, self.own, "carddav")
        report = Synced(book_id, label)
        state = cache.book(book_id)
        if version and state is not None and state.version == version and state.synced_at:
            cache.apply(book_id, version=version, problems=state.problems, at=at)
            report.unchanged = True
            return report
        listed = self._propfind(client, url, "<D:getetag/><D:resourcetype/>", 1)
        etags: dict[str, str] = {}
        for href, props in listed:
            if any(p.find(f"{{{DAV}}}resourcetype/{{{DAV}}}collection") is not None for p in props):
                continue
            etags[urlsplit(self._url(href)).path] = _text(props, f"{{{DAV}}}getetag")
        cached = cache.etags(book_id)
        wanted = [h for h, e in etags.items() if cached.get(h) != e or not e]
        put: list[tuple[str, str, Card]] = []
        for start in range(0, len(wanted), MULTIGET_CHUNK):
            for href, etag, data in self._multiget(
                client, url, wanted[start : start + MULTIGET_CHUNK]
            ):
                cards = split_cards(data)
                if not cards:
                    report.problems.append(f"{href} in {label} holds no vCard; it was skipped.")
                    continue
                try:
                    put.append(
                        (
                            href,
                            etag,
                            parse_card(
                                cards[0], f"The card {href} in {label}", self.max_card_bytes
                            ),
                        )
                    )
                except CardError as exc:
                    report.problems.append(str(exc))
        remove = [h for h in cached if h not in etags]
        failed = {h for h in wanted} - {h for h, _, _ in put}
        remove += [h for h in failed if h in cached]  # a card that broke is not kept stale
        report.written, report.removed = cache.apply(
            book_id, put=put, remove=remove, version=version, problems=report.problems, at=at
        )
        return report

    def _multiget(self, client: Any, url: str, hrefs: list[str]) -> list[tuple[str, str, bytes]]:
        if not hrefs:
            return []
        from xml.sax.saxutils import escape  # here: xml.sax, urllib.request and http.client

        listed = "".join(f"<D:href>{escape(h)}</D:href>" for h in hrefs)
        body = (
            f'<?xml version="1.0" encoding="utf-8"?><C:addressbook-multiget {_NS}>'
            f"<D:prop><D:getetag/><C:address-data/></D:prop>{listed}</C:addressbook-multiget>"
        )
        response = client.request(
            url, "REPORT", body, {"Depth": "1", "Content-Type": "application/xml; charset=utf-8"}
        )
        out = []
        for href, props in self._multistatus(response, "REPORT", url):
            data = _text(props, f"{{{CARD}}}address-data", strip=False)
            out.append(
                (
                    urlsplit(self._url(href)).path,
                    _text(props, f"{{{DAV}}}getetag"),
                    data.encode("utf-8"),
                )
            )
        return out


def _ok(propstat: Any) -> bool:
    status = propstat.find(f"{{{DAV}}}status")
    return status is None or " 200 " in f" {status.text or ''} "


def _text(props: list[Any], tag: str, *, strip: bool = True) -> str:
    for prop in props:
        found = prop.find(tag)
        if found is not None and found.text:
            return found.text.strip() if strip else str(found.text)
    return ""


def _first_href(listed: list[tuple[str, Any]], tag: str) -> str | None:
    for _, props in listed:
        for prop in props:
            found = prop.find(f"{tag}/{{{DAV}}}href")
            if found is not None and (found.text or "").strip():
                return unquote(found.text.strip())
    return None
