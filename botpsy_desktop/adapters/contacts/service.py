"""The person's address books: synced into a local cache, looked up without the network."""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime, tzinfo
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.contacts import edit
from botpsy_desktop.adapters.contacts.cache import ContactCache, Stored, fold
from botpsy_desktop.adapters.contacts.lookalike import near, skeleton
from botpsy_desktop.adapters.contacts.sources import CardDAVSource, Source, Synced, VcfSource
from botpsy_desktop.core.accounts import Account, CalDAVAccount, MailAccount
from botpsy_desktop.core.config import ContactsSettings
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.outside import outside
from botpsy_desktop.core.people import Entry
from botpsy_desktop.core.secrets import SecretStore

log = logging.getLogger(__name__)

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def age(seconds: float) -> str:
    """'3 minutes', '2 hours', '5 days'."""
    seconds = max(0.0, seconds)
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return "less than a minute"


class ContactsService:
    """Address books (vCard files, CardDAV accounts) over one SQLite cache.

    Look-ups read the cache only. :meth:`sync` brings every book up to date (the CLI's
    ``botpsy contacts sync``); a look-up whose books are older than ``sync_every_s`` starts one
    in the background (vCard files, being local, are refreshed first, in a few milliseconds
    when unchanged), and answers from the cache meanwhile."""

    def __init__(
        self,
        cache: ContactCache,
        sources: Sequence[Source],
        settings: ContactsSettings,
        *,
        now: Callable[[], datetime] | None = None,
        problem: str | None = None,
    ) -> None:
        self.cache = cache
        self.sources = list(sources)
        self.settings = settings
        self._now = now or (lambda: datetime.now(UTC))
        self.problem = problem
        self._sync_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._files_seen: dict[str, tuple[tuple[str, int, int], ...]] = {}
        """Each vCard source's files as its last sync read them (a look-up skips an
        unchanged source without touching the cache)."""

    @property
    def configured(self) -> bool:
        return bool(self.sources)

    def _at(self) -> float:
        return self._now().timestamp()

    # --- sync ------------------------------------------------------------------------------

    def sync(self, only: Callable[[Source], bool] | None = None) -> list[Synced]:
        """Sync every book (or those ``only`` picks); one report per book, errors included."""
        with self._sync_lock:
            reports: list[Synced] = []
            for source in self.sources:
                if only is not None and not only(source):
                    continue
                try:
                    if isinstance(source, VcfSource):
                        seen = source.fingerprint()
                        reports += source.sync(self.cache, self._at())
                        self._files_seen[source.name] = seen
                        continue
                    reports += source.sync(self.cache, self._at())
                except Exception as exc:  # one broken source never stops the others
                    log.warning("contacts sync of %s failed: %s", source.name, exc)
                    reports.append(Synced(source.name, source.name, error=str(exc)))
            keep = {b.id for b in self.cache.books() if self._belongs(b.id)}
            self.cache.forget_books(keep)
            return reports

    def _belongs(self, book_id: str) -> bool:
        return any(book_id == s.name or book_id.startswith(f"{s.name}:") for s in self.sources)

    def refresh(self) -> None:
        """Before a look-up: local files at once (only those changed since the last sync);
        remote books in the background when old."""
        seen = {s.name: s.fingerprint() for s in self.sources if isinstance(s, VcfSource)}
        changed = {n for n, f in seen.items() if self._files_seen.get(n) != f}
        if changed:
            self.sync(lambda s: s.name in changed)
        remote = [s for s in self.sources if not isinstance(s, VcfSource)]
        if not remote or (self._worker is not None and self._worker.is_alive()):
            return
        books = {b.id: b for b in self.cache.books()}
        at = self._at()
        stale = False
        for source in remote:
            mine = [b for b in books.values() if b.id.startswith(f"{source.name}:")]
            tried = max((b.tried_at or 0.0 for b in mine), default=0.0)
            stale |= at - tried >= self.settings.sync_every_s
        if stale:
            self._worker = threading.Thread(
                target=self.sync,
                args=(lambda s: not isinstance(s, VcfSource),),
                name="contacts-sync",
                daemon=True,
            )
            self._worker.start()

    def close(self) -> None:
        if self._worker is not None:
            self._worker.join(self.settings.timeout_s * 3)

    # --- look-ups for the tools ---------------------------------------------------------------

    def _shown(self, item: Stored, *, whole: bool = False) -> dict[str, Any]:
        """A card for the model: fields from a book someone else can write are marked as
        outside content (core/outside.py) one by one; the person's own book's are theirs."""
        mark: Callable[[str], str] = (lambda t: t) if item.own else outside
        card = item.card
        out: dict[str, Any] = {
            "id": item.ref,
            "name": mark(card.name),
            "emails": [mark(e) for e in card.emails],
        }
        for key, value in (
            ("nicknames", [mark(n) for n in card.nicknames]),
            ("phones", [mark(p) for p in card.phones]),
            ("company", mark(card.org) if card.org else ""),
        ):
            if value:
                out[key] = value
        if whole:
            for key, text in (
                ("title", card.title),
                ("birthday", card.birthday),
                ("anniversary", card.anniversary),
                ("note", card.note),
            ):
                if text:
                    out[key] = mark(text)
        out["address_book"] = item.label if item.own else outside(item.label)
        out["own_book"] = item.own
        return out

    def _as_of(self) -> dict[str, str]:
        """How old each book's copy is; outside content where a book's name or error came
        from a server or a shared book."""
        said = self.staleness(always=True)
        if not said:
            return {}
        shared = any(not b.own for b in self.cache.books() if self._belongs(b.id))
        return {"as_of": outside(said) if shared else said}

    def find(self, query: str) -> dict[str, Any]:
        if not self.sources:
            raise ToolError(
                "No address book is set up.",
                "Add .vcf files under [contacts] files in the settings, or an account's "
                "address books with `botpsy account add caldav NAME --contacts own|shared`.",
            )
        if not query.strip():
            raise ToolError("Say whom to look for: a name, nickname, email, phone or company.")
        self.refresh()
        found, total = self.cache.search(query, self.settings.max_results, seen=False)
        out: dict[str, Any] = {"query": query, "matches": total}
        out["contacts"] = [self._shown(item) for item in found]
        if total == 0:
            mail, _ = self.cache.search(query, 5, seen=True)
            if mail:
                out["seen_in_mail"] = [
                    {"name": outside(i.card.name), "email": outside(i.card.emails[0])}
                    for i in mail
                    if i.card.emails
                ]
        if total > len(found):
            out["more"] = f"{total - len(found)} more match; ask the person to say more"
        elif total > 1:
            out["note"] = "several people match: ask the person which one they mean"
        elif total == 0:
            out["note"] = "nobody in the address books matches; never guess an address"
            if "seen_in_mail" in out:
                out["note"] += (
                    "; seen_in_mail lists addresses from mail (not contacts: anyone can send "
                    "mail), ask the person before using one"
                )
        return {**out, **self._as_of()}

    def details(self, contact: str) -> dict[str, Any]:
        if not self.sources:
            return self.find(contact)
        self.refresh()
        item = (
            self.cache.by_ref(contact) if re.fullmatch(r"c[0-9a-f]{8}", contact.strip()) else None
        )
        if item is None:
            found, total = self.cache.search(contact, self.settings.max_results)
            if total != 1:
                listed = self.find(contact)
                listed["note"] = "give one of these ids for the details of one contact"
                return listed
            item = found[0]
        return {"contact": self._shown(item, whole=True), **self._as_of()}

    def birthdays(self, days: int, tz: tzinfo | None = None) -> dict[str, Any]:
        """Birthdays and anniversaries in the next ``days`` days (today included), by the
        app's clock in ``tz``: who, which day, in how many days, and the age when the year is
        known. A 29 February is kept on the 28th in other years."""
        if not self.sources:
            return self.find("")
        self.refresh()
        today = self._now().astimezone(tz).date() if tz else self._now().date()
        found = []
        for item in self.cache.with_dates():
            for kind, text in (
                ("birthday", item.card.birthday),
                ("anniversary", item.card.anniversary),
            ):
                parsed = _month_day(text)
                if parsed is None:
                    continue
                year, month, day = parsed
                for candidate_year in (today.year, today.year + 1):
                    when = _on(candidate_year, month, day)
                    if when >= today:
                        break
                away = (when - today).days
                if away >= days:
                    continue
                mark: Callable[[str], str] = (lambda t: t) if item.own else outside
                row: dict[str, Any] = {
                    "name": mark(item.card.name),
                    "id": item.ref,
                    "what": kind,
                    "date": when.isoformat(),
                    "in_days": away,
                }
                if year:
                    row["years"] = when.year - year
                found.append(row)
        found.sort(key=lambda r: (r["in_days"], str(r["name"])))
        return {"from": today.isoformat(), "days": days, "dates": found, **self._as_of()}

    # --- changes (the person's own vCard folders; see edit.py) ------------------------------

    def _source_of(self, item: Stored) -> VcfSource:
        for source in self.sources:
            if isinstance(source, VcfSource) and source.name == item.book:
                return source
        raise ToolError(
            f"{item.card.name} is in {item.label}, an address book on a server: changing it "
            "from here is not supported yet.",
            "Change it in your contacts app; the next sync brings the change here.",
        )

    def own_folder(self) -> VcfSource:
        for source in self.sources:
            if isinstance(source, VcfSource) and source.own and source.path.is_dir():
                return source
        raise ToolError(
            "There is no address-book folder of yours to add a contact to.",
            "Add a folder of .vcf files under contacts.files in the settings.",
        )

    def resolve_one(self, contact: str) -> Stored:
        """The one cached card ``contact`` (an id or a name) names; else a clear error."""
        self.refresh()
        ref = contact.strip()
        item = self.cache.by_ref(ref) if re.fullmatch(r"c[0-9a-f]{8}", ref) else None
        if item is not None:
            return item
        found, total = self.cache.search(ref, 5)
        if total == 1:
            return found[0]
        if total == 0:
            raise ToolError(f"No contact matches {contact!r}.", "Look it up with find_contact.")
        names = "; ".join(f"{f.card.name} ({f.ref})" for f in found)
        raise ToolError(
            f"{total} contacts match {contact!r}: {names}.", "Give the id of the one you mean."
        )

    def is_own(self, contact: str) -> bool:
        return self.resolve_one(contact).own

    def state(self, contact: str) -> dict[str, Any] | None:
        """The card's file as it is now (its digest), or None when it is gone."""
        try:
            item = self.resolve_one(contact)
            path = edit.card_file(self._source_of(item), item)
            return {"digest": edit.digest(path)}
        except (ToolError, OSError):
            return None

    def add(self, values: dict[str, str]) -> dict[str, Any]:
        edit.check(values)
        source = self.own_folder()
        path = edit.new_card(source.path, values)
        self.sync(lambda s: s is source)
        found = self.cache.card(source.name, f"{path.name}#0")
        if found is None:
            raise ToolError(f"The new card {path} could not be read back.")
        return {
            "added": self._shown(found, whole=True),
            "inverse": {
                "tool": "delete_contact",
                "arguments": {"contact": found.ref},
                "expect": {"digest": edit.digest(path)},
            },
        }

    def update(self, contact: str, values: dict[str, str]) -> dict[str, Any]:
        edit.check(values)
        if not values:
            raise ToolError("Say what to change: name, emails, phones, nicknames, company...")
        item = self.resolve_one(contact)
        source = self._source_of(item)
        path = edit.card_file(source, item)
        before = edit.fields_of(item)
        edit.change(path, values)
        self.sync(lambda s: s is source)
        after = self.cache.card(item.book, item.href)
        if after is None:
            raise ToolError(f"The changed card {path} could not be read back.")
        back = {k: before[k] for k in values if k in before}
        return {
            "updated": self._shown(after, whole=True),
            "inverse": {
                "tool": "update_contact",
                "arguments": {"contact": after.ref, **back},
                "expect": {"digest": edit.digest(path)},
            },
        }

    def delete(self, contact: str) -> dict[str, Any]:
        item = self.resolve_one(contact)
        source = self._source_of(item)
        path = edit.card_file(source, item)
        path.unlink()
        self.sync(lambda s: s is source)
        return {"deleted": {"name": item.card.name, "emails": list(item.card.emails)}}

    # --- the gate's view (core/people.py AddressBookView) ----------------------------------

    def _entry(self, item: Stored, address: str) -> Entry:
        changed = ""
        found = self.cache.change(item.book, item.href)
        if found is not None and not item.own:
            old, when = found
            stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M UTC")
            changed = f"its address changed in the sync of {stamp} (was {old or 'none'})"
        seen = item.book.startswith("mail:")
        return Entry(item.card.name, address, item.label, item.own, changed, item.ref, seen)

    def holders(self, address: str) -> list[Entry]:
        wanted = address.strip().casefold()
        out = []
        for item in self.cache.holders(wanted):
            shown = next((e for e in item.card.emails if e.casefold() == wanted), address)
            out.append(self._entry(item, shown))
        return out

    def named(self, typed: str) -> dict[str, list[Entry]]:
        words = [w for w in _WORD.findall(fold(typed)) if len(w) >= 2]
        pairs = [f"{a} {b}" for a, b in itertools.pairwise(words)]
        out: dict[str, list[Entry]] = {}
        for word, items in self.cache.named([*words, *pairs]).items():
            entries = [
                self._entry(i, e)
                for i in items
                if not i.book.startswith("mail:")  # a sender's name is not the person's word
                for e in i.card.emails
            ]
            if entries:
                out[word] = entries
        return out

    def lookalikes(self, address: str) -> list[Entry]:
        wanted = address.strip().casefold()
        mine = skeleton(wanted)
        out = []
        for known, book, href in self.cache.candidates(wanted):
            if known == wanted:
                continue
            if skeleton(known) == mine or near(known, wanted):
                item = self.cache.card(book, href)
                if item is not None:
                    shown = next((e for e in item.card.emails if e.casefold() == known), known)
                    out.append(self._entry(item, shown))
        return out

    def staleness(self, *, always: bool = False) -> str:
        """How old the cache is, where it matters: a book whose last sync failed or is older
        than ``stale_after_s`` (``always``: the oldest book's age in any case)."""
        at = self._at()
        said = []
        for book in self.cache.books():
            if not self._belongs(book.id):
                continue
            synced = book.synced_at
            when = f"synced {age(at - synced)} ago" if synced else "never synced"
            if book.error:
                said.append(f"{book.label}: {when}; the last try failed ({book.error})")
            elif synced is None or at - synced >= self.settings.stale_after_s or always:
                said.append(f"{book.label}: {when}")
        return "; ".join(said)


_DATE = re.compile(r"^(?:(\d{4})|--)-?(\d{2})-?(\d{2})")


def _month_day(text: str) -> tuple[int, int, int] | None:
    """(year or 0, month, day) of a vCard date: 1985-04-12, 19850412, --0412, --04-12."""
    found = _DATE.match(text.strip())
    if found is None:
        return None
    year, month, day = int(found.group(1) or 0), int(found.group(2)), int(found.group(3))
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return year, month, day


def _on(year: int, month: int, day: int) -> date:
    """That day in ``year`` (29 February in a common year: the 28th; a bad day: the month's
    last)."""
    while day > 28:
        try:
            return date(year, month, day)
        except ValueError:
            day -= 1
    return date(year, month, day)


def contacts_service(
    settings: ContactsSettings,
    folder: Path,
    accounts: Sequence[Account],
    secrets: SecretStore,
    problem: str | None = None,
    now: Callable[[], datetime] | None = None,
) -> ContactsService:
    """The address books of a profile: its .vcf files and its accounts' CardDAV books."""
    sources: list[Source] = []
    for path, own in [(p, True) for p in settings.files] + [
        (p, False) for p in settings.shared_files
    ]:
        sources.append(VcfSource(Path(path), own=own, max_card_bytes=settings.max_card_bytes))
    for account in accounts:
        if isinstance(account, CalDAVAccount) and account.contacts is not None:
            sources.append(
                CardDAVSource(
                    account,
                    secrets.provider(account.name),
                    own=account.contacts == "own",
                    timeout_s=settings.timeout_s,
                    max_card_bytes=settings.max_card_bytes,
                )
            )
    for account in accounts:
        if isinstance(account, MailAccount) and settings.seen_in_mail:
            from botpsy_desktop.adapters.contacts.seen import MailSeenSource
            from botpsy_desktop.adapters.email.client import MailClient

            client = MailClient(
                account, secrets.provider(account.name), timeout_s=settings.timeout_s
            )
            sources.append(MailSeenSource(client, messages=settings.seen_in_mail_messages))
    return ContactsService(
        ContactCache(folder / "contacts.sqlite3"), sources, settings, now=now, problem=problem
    )
