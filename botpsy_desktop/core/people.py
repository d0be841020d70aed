"""What the gate may ask an address book: who holds an address, who a typed name is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Entry:
    """One card's address, as the gate weighs it.

    ``own``: the book is the person's own (only they write it: a local vCard folder they
    declared theirs, an account they declared own); else someone else can change it (a shared
    or synced book), and what it says is outside content. ``changed``: when a sync last changed
    this card's addresses and what it held before ("" when never changed since first seen)."""

    name: str
    address: str
    book: str
    own: bool
    changed: str = ""
    card: str = ""
    """Which card (its id): one person's several addresses are still one person."""
    seen: bool = False
    """Only seen in the person's mail (a sender or a recipient), not a contact they made."""

    def shown(self) -> str:
        return f"{self.name} <{self.address}>"


class AddressBookView(Protocol):
    """The cached address books, read only (never waits for the network)."""

    def holders(self, address: str) -> list[Entry]:
        """Every card holding ``address`` (compared case-insensitively)."""
        ...

    def named(self, typed: str) -> dict[str, list[Entry]]:
        """The names in ``typed`` (a request's text) that name cards of the address books
        (not addresses only seen in mail): each name word or nickname found (folded, as
        typed) -> the entries of every card it names."""
        ...

    def lookalikes(self, address: str) -> list[Entry]:
        """Known addresses that look like ``address`` without being it (one or two letters
        off, a digit for a letter, another top-level domain)."""
        ...

    def staleness(self) -> str:
        """'' when every book synced recently, else a sentence saying how old the cache is."""
        ...
