"""The local copy of every address book: SQLite in the data folder, read without the network.

A look-up (find_contact, the gate's check of a recipient) reads only this file, so it answers
at once with the server gone; a sync writes it, one book at a time, in one transaction per book
(a sync cut short leaves the book as it was). Names, nicknames, addresses, phone digits and the
company are kept folded (lower case, no accents) in a search column and a table of name words.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
import unicodedata
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.contacts.lookalike import parts, skeleton
from botpsy_desktop.adapters.contacts.vcard import Card

SCHEMA_VERSION = 1
"""A cache of another layout is emptied and filled again by the next sync (it is only a copy)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS books (
    id TEXT PRIMARY KEY, label TEXT NOT NULL, own INTEGER NOT NULL, kind TEXT NOT NULL,
    version TEXT, synced_at REAL, tried_at REAL, error TEXT, problems TEXT
);
CREATE TABLE IF NOT EXISTS cards (
    book TEXT NOT NULL, href TEXT NOT NULL, etag TEXT, data TEXT NOT NULL, search TEXT NOT NULL,
    ref TEXT NOT NULL, PRIMARY KEY (book, href)
);
CREATE INDEX IF NOT EXISTS cards_ref ON cards (ref);
CREATE TABLE IF NOT EXISTS names (book TEXT NOT NULL, href TEXT NOT NULL, word TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS names_word ON names (word);
CREATE INDEX IF NOT EXISTS names_card ON names (book, href);
CREATE TABLE IF NOT EXISTS emails (
    book TEXT NOT NULL, href TEXT NOT NULL, address TEXT NOT NULL, local TEXT NOT NULL,
    domain TEXT NOT NULL, skeleton TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS emails_address ON emails (address);
CREATE INDEX IF NOT EXISTS emails_local ON emails (local);
CREATE INDEX IF NOT EXISTS emails_domain ON emails (domain);
CREATE INDEX IF NOT EXISTS emails_skeleton ON emails (skeleton);
CREATE INDEX IF NOT EXISTS emails_card ON emails (book, href);
CREATE TABLE IF NOT EXISTS changes (
    book TEXT NOT NULL, href TEXT NOT NULL, old TEXT NOT NULL, new TEXT NOT NULL, at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_card ON changes (book, href);
"""

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def fold(text: str) -> str:
    """Lower case, no accents, full-width letters plain ("Ana López" -> "ana lopez")."""
    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", text).casefold())
    return "".join(c for c in text if not unicodedata.combining(c))


def card_ref(book: str, href: str) -> str:
    """A short, stable id for a cached card (what find_contact lists, contact_details takes)."""
    return "c" + hashlib.sha256(f"{book}\n{href}".encode()).hexdigest()[:8]


def digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def name_words(card: Card) -> set[str]:
    """The words a person may call this card by: its name's words, given and family name,
    each nickname whole and word by word."""
    words: set[str] = set()
    for part in (card.name, card.given, card.family, *card.nicknames):
        words |= set(_WORD.findall(fold(part)))
    words |= {fold(n).strip() for n in card.nicknames if n.strip()}
    return {w for w in words if len(w) >= 2}


def search_text(card: Card) -> str:
    parts = [card.name, card.given, card.family, *card.nicknames, *card.emails, card.org]
    parts += [card.title]
    text = " | ".join(fold(p) for p in parts if p)
    return text + " | " + " ".join(digits(p) for p in card.phones)


@dataclass(frozen=True)
class Stored:
    """A cached card with the book it came from."""

    book: str
    label: str
    own: bool
    href: str
    card: Card

    @property
    def ref(self) -> str:
        return card_ref(self.book, self.href)


@dataclass(frozen=True)
class BookState:
    id: str
    label: str
    own: bool
    kind: str
    version: str | None
    synced_at: float | None
    tried_at: float | None
    error: str | None
    problems: list[str]


class ContactCache:
    """The SQLite cache (see the module's notes). Thread-safe: one connection per call."""

    def __init__(self, file: Path) -> None:
        self.file = file
        self._lock = threading.Lock()
        self._ready = False

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self.file.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.file, timeout=30)
        try:
            if not self._ready:
                with self._lock:
                    version = db.execute("PRAGMA user_version").fetchone()[0]
                    if version != SCHEMA_VERSION:
                        for table in ("books", "cards", "names", "emails", "changes"):
                            db.execute(f"DROP TABLE IF EXISTS {table}")
                        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    db.executescript(_SCHEMA)
                    self._ready = True
            yield db
        finally:
            db.close()

    # --- books -----------------------------------------------------------------------------

    def book(self, book_id: str) -> BookState | None:
        with self._db() as db:
            row = db.execute(
                "SELECT id, label, own, kind, version, synced_at, tried_at, error, problems "
                "FROM books WHERE id = ?",
                (book_id,),
            ).fetchone()
        return None if row is None else _state(row)

    def books(self) -> list[BookState]:
        with self._db() as db:
            rows = db.execute(
                "SELECT id, label, own, kind, version, synced_at, tried_at, error, problems "
                "FROM books ORDER BY id"
            ).fetchall()
        return [_state(r) for r in rows]

    def ensure_book(self, book_id: str, label: str, own: bool, kind: str) -> None:
        with self._db() as db, db:
            db.execute(
                "INSERT INTO books (id, label, own, kind) VALUES (?, ?, ?, ?) ON CONFLICT(id) "
                "DO UPDATE SET label = excluded.label, own = excluded.own, kind = excluded.kind",
                (book_id, label, int(own), kind),
            )

    def forget_books(self, keep: Iterable[str]) -> list[str]:
        """Remove the books not in ``keep`` (an account removed) and their cards."""
        keep = set(keep)
        gone = [b.id for b in self.books() if b.id not in keep]
        with self._db() as db, db:
            for book in gone:
                for table in ("cards", "names", "emails", "changes"):
                    db.execute(f"DELETE FROM {table} WHERE book = ?", (book,))
                db.execute("DELETE FROM books WHERE id = ?", (book,))
        return gone

    def failed(self, book_id: str, error: str, at: float) -> None:
        with self._db() as db, db:
            db.execute(
                "UPDATE books SET error = ?, tried_at = ? WHERE id = ?", (error, at, book_id)
            )

    def etags(self, book_id: str) -> dict[str, str]:
        with self._db() as db:
            rows = db.execute("SELECT href, etag FROM cards WHERE book = ?", (book_id,)).fetchall()
        return {str(h): str(e or "") for h, e in rows}

    def apply(
        self,
        book_id: str,
        *,
        put: Iterable[tuple[str, str, Card]] = (),
        remove: Iterable[str] = (),
        version: str | None = None,
        problems: Iterable[str] = (),
        at: float,
    ) -> tuple[int, int]:
        """One sync of one book, in one transaction: cards added or changed (href, etag, card),
        hrefs removed, the book's new version, its problems. Changed addresses are recorded.
        Returns (cards written, cards removed)."""
        put = list(put)
        remove = list(remove)
        with self._db() as db, db:
            before: dict[str, list[str]] = {}
            for href, address in db.execute(
                "SELECT href, address FROM emails WHERE book = ?", (book_id,)
            ):
                before.setdefault(str(href), []).append(str(address))
            known = {
                str(h) for (h,) in db.execute("SELECT href FROM cards WHERE book = ?", (book_id,))
            }
            changes = []
            for href, _, card in put:
                if href in known:
                    old = sorted(before.get(href, []))
                    new = sorted(e.casefold() for e in card.emails)
                    if old != new:
                        changes.append((book_id, href, ", ".join(old), ", ".join(new), at))
            gone = [(book_id, h) for h in {*(h for h, _, _ in put), *remove} if h in known]
            for table in ("cards", "names", "emails"):
                db.executemany(f"DELETE FROM {table} WHERE book = ? AND href = ?", gone)
            db.executemany(
                "DELETE FROM changes WHERE book = ? AND href = ?",
                [(book_id, h) for h in remove if h in known],
            )
            db.executemany("INSERT INTO changes VALUES (?, ?, ?, ?, ?)", changes)
            db.executemany(
                "INSERT INTO cards VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        book_id,
                        href,
                        etag,
                        json.dumps(card.as_dict()),
                        search_text(card),
                        card_ref(book_id, href),
                    )
                    for href, etag, card in put
                ],
            )
            db.executemany(
                "INSERT INTO names VALUES (?, ?, ?)",
                [(book_id, href, w) for href, _, card in put for w in name_words(card)],
            )
            db.executemany(
                "INSERT INTO emails VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (book_id, href, e.casefold(), *parts(e), skeleton(e))
                    for href, _, card in put
                    for e in card.emails
                ],
            )
            written = len(put)
            removed = sum(1 for h in remove if h in known)
            db.execute(
                "UPDATE books SET version = ?, synced_at = ?, tried_at = ?, error = NULL, "
                "problems = ? WHERE id = ?",
                (version, at, at, json.dumps(list(problems)), book_id),
            )
        return written, removed

    # --- look-ups --------------------------------------------------------------------------

    _CARD_SQL = (
        "SELECT c.book, b.label, b.own, c.href, c.data FROM cards c JOIN books b ON b.id = c.book"
    )

    def search(
        self, query: str, limit: int = 10, *, seen: bool | None = None
    ) -> tuple[list[Stored], int]:
        """Cards matching every word of ``query`` (folded; phone numbers by their digits) in a
        name, nickname, address, phone or company; the first ``limit`` and how many in all.
        ``seen``: only addresses seen in mail (True), none of them (False), or all (None)."""
        words = _WORD.findall(fold(query)) or [fold(query).strip()]
        number = digits(query)
        clauses, params = [], []
        if len(number) >= 4 and len(number) >= len(query.replace(" ", "")) // 2:
            # a national number ("06 12...") matches the international one ("+33 6 12..."):
            # the leading zeros (trunk or international prefix) are left out
            clauses.append("c.search LIKE ?")
            params.append(f"%{number.lstrip('0') or number}%")
        else:
            for word in words:
                if word:
                    clauses.append("c.search LIKE ?")
                    params.append(f"%{word}%")
        if not clauses:
            return [], 0
        if seen is not None:
            clauses.append("c.book LIKE 'mail:%'" if seen else "c.book NOT LIKE 'mail:%'")
        where = " AND ".join(clauses)
        with self._db() as db:
            total = db.execute(
                f"SELECT COUNT(*) FROM cards c WHERE {where}",
                params,
            ).fetchone()[0]
            rows = db.execute(
                f"{self._CARD_SQL} WHERE {where} ORDER BY b.own DESC, "
                "json_extract(c.data, '$.name') LIMIT ?",
                [*params, limit],
            ).fetchall()
        return [_stored(r) for r in rows], int(total)

    def card(self, book: str, href: str) -> Stored | None:
        with self._db() as db:
            row = db.execute(
                f"{self._CARD_SQL} WHERE c.book = ? AND c.href = ?", (book, href)
            ).fetchone()
        return None if row is None else _stored(row)

    def by_ref(self, ref: str) -> Stored | None:
        with self._db() as db:
            row = db.execute(f"{self._CARD_SQL} WHERE c.ref = ?", (ref.strip(),)).fetchone()
        return None if row is None else _stored(row)

    def holders(self, address: str) -> list[Stored]:
        with self._db() as db:
            rows = db.execute(
                f"{self._CARD_SQL} JOIN emails e ON e.book = c.book AND e.href = c.href "
                "WHERE e.address = ?",
                (address.strip().casefold(),),
            ).fetchall()
        return [_stored(r) for r in rows]

    def named(self, words: Iterable[str]) -> dict[str, list[Stored]]:
        out: dict[str, list[Stored]] = {}
        with self._db() as db:
            for word in dict.fromkeys(words):
                rows = db.execute(
                    f"{self._CARD_SQL} JOIN names n ON n.book = c.book AND n.href = c.href "
                    "WHERE n.word = ? LIMIT 50",
                    (word,),
                ).fetchall()
                if rows:
                    out[word] = [_stored(r) for r in rows]
        return out

    def candidates(self, address: str) -> list[tuple[str, str, str]]:
        """The (address, book, href) that may look like ``address``: the same skeleton, the
        same local part or the same domain (one edit changes only one of them)."""
        local, domain = parts(address)
        with self._db() as db:
            rows = db.execute(
                "SELECT address, book, href FROM emails WHERE skeleton = ? OR local = ? "
                "OR domain = ? LIMIT 5000",
                (skeleton(address), local, domain),
            ).fetchall()
        return [(str(a), str(b), str(h)) for a, b, h in rows]

    def change(self, book: str, href: str) -> tuple[str, float] | None:
        """The newest address change a sync recorded for this card: (old addresses, when)."""
        with self._db() as db:
            row = db.execute(
                "SELECT old, at FROM changes WHERE book = ? AND href = ? ORDER BY at DESC LIMIT 1",
                (book, href),
            ).fetchone()
        return None if row is None else (str(row[0]), float(row[1]))

    def with_dates(self) -> list[Stored]:
        """Every card with a birthday or an anniversary."""
        with self._db() as db:
            rows = db.execute(
                f"{self._CARD_SQL} WHERE json_extract(c.data, '$.birthday') != '' "
                "OR json_extract(c.data, '$.anniversary') != ''"
            ).fetchall()
        return [_stored(r) for r in rows]

    def count(self) -> int:
        with self._db() as db:
            return int(db.execute("SELECT COUNT(*) FROM cards").fetchone()[0])


def _state(row: Any) -> BookState:
    return BookState(
        str(row[0]),
        str(row[1]),
        bool(row[2]),
        str(row[3]),
        row[4],
        row[5],
        row[6],
        row[7],
        json.loads(row[8]) if row[8] else [],
    )


def _stored(row: Any) -> Stored:
    return Stored(
        str(row[0]), str(row[1]), bool(row[2]), str(row[3]), Card.from_dict(json.loads(row[4]))
    )


def now() -> float:
    return time.time()
