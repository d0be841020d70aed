"""Who the person named: recipients weighed against their address books, for the receipt.

The gate's rules for an address in a recipient field (to, cc, attendees...), read from the
address books' local copy (core/people.py; never the network):

* **named by the person**: the request they are typing now holds a name or nickname ("Ana",
  "Mum") of a card that holds this address, every card that name fits in every book holds this
  same address, and at least one such card is in a book only the person writes (their own).
  The receipt says "To: Ana López <ana@…> (from your address book)", and the address no longer
  counts as copied from outside content (it is the person's choice, not a planted one);
* **asks, saying why** (these calls always ask; the reason is what the person must weigh):
  several addresses fit the name typed (several Anas, or a shared book's "Ana" with another
  address: a swap); the name fits only cards in a book someone else can write (a shared or
  synced book); the address is in no book, only seen in mail (a sender's name is never taken
  for a name the person typed); the address is in no book but looks like one that is (one
  letter off, a digit for a letter, another top-level domain); the person typed a name whose
  cards hold other addresses; a shared book's sync changed the card's address since it was
  first seen.

Written by hand, like agent/grounding.py: small rules the gate applies, reviewed word by word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from botpsy_desktop.agent.policy import EMAIL_RE, is_recipient, leaves
from botpsy_desktop.core.people import AddressBookView, Entry

FROM_BOOK = "(from your address book)"


@dataclass(frozen=True)
class Recipients:
    """What the address books say about a call's recipients."""

    lines: tuple[str, ...] = ()
    concerns: tuple[str, ...] = ()
    named: frozenset[str] = frozenset()
    """The addresses (case-folded) the person named through their own address book."""


def _where(entry: Entry) -> str:
    if entry.own:
        return f"your address book “{entry.book}”"
    return f"the shared address book “{entry.book}”, which someone else can change"


def _listed(entries: list[Entry]) -> str:
    seen: dict[str, Entry] = {}
    for e in entries:
        seen.setdefault(f"{e.address.casefold()}|{e.book}", e)
    return "; ".join(f"{e.shown()} in {_where(e)}" for e in seen.values())


def weigh(
    arguments: Mapping[str, Any],
    book: AddressBookView | None,
    typed: str | None,
    stored: tuple[str, ...] = (),
) -> Recipients:
    """The receipt lines and reasons for the recipients of one call (see the module's notes);
    ``stored``: arguments whose addresses the tool keeps, not contacts (``Tool.stores``)."""
    if book is None:
        return Recipients()
    found: list[tuple[str, str]] = []
    for key, text in leaves(dict(arguments)):
        if is_recipient(key.split(".")[0]) and key.split(".")[0] not in stored:
            found += [(key, a) for a in dict.fromkeys(EMAIL_RE.findall(text))]
    if not found:
        return Recipients()
    try:
        names = book.named(typed) if typed else {}
    except Exception:  # a cache that cannot be read names nobody; the call still asks
        names = {}
    lines: list[str] = []
    concerns: list[str] = []
    named: set[str] = set()
    used_book = False
    for key, address in found:
        label = key.replace("_", " ").capitalize()
        wanted = address.casefold()
        try:
            found_in = book.holders(address)
        except Exception:
            found_in = []
        holders = [h for h in found_in if not h.seen]
        seen = [h for h in found_in if h.seen]
        typed_for = {
            w: es for w, es in names.items() if any(e.address.casefold() == wanted for e in es)
        }
        if holders:
            used_book = True
            first = next((h for h in holders if h.own), holders[0])
            shared_only = not any(h.own for h in holders)
            if typed_for:
                # the cards every name word typed for this address fits ("Ana López" is
                # one card even when there are two Anas)
                fitting = set.intersection(*(set(es) for es in typed_for.values()))
                everyone = sorted(fitting, key=lambda e: (not e.own, e.book, e.address))
                several = {e.card or e.address.casefold() for e in everyone}
                if len(several) > 1:
                    word = " ".join(typed_for)
                    lines.append(f"{label}: {first.shown()} (in {_where(first)})")
                    concerns.append(
                        f"you typed “{word}”, and more than one address in your address books "
                        f"goes by that name ({_listed(everyone)}): check that "
                        f"{address} is the one you mean"
                    )
                elif shared_only or not any(e.own for e in everyone):
                    lines.append(f"{label}: {first.shown()} (in {_where(first)})")
                    concerns.append(
                        f"{address} is only in {_where(first)}: check that it is the address "
                        "you know"
                    )
                else:
                    lines.append(f"{label}: {first.shown()} {FROM_BOOK}")
                    named.add(wanted)
            else:
                lines.append(f"{label}: {first.shown()} (in {_where(first)})")
            for h in holders:
                if h.changed:
                    concerns.append(f"the card of {h.name} in {_where(h)}: {h.changed}")
            continue
        if seen:
            used_book = True
            lines.append(
                f"{label}: {seen[0].shown()} (seen in your mail, not in your address books)"
            )
            concerns.append(
                f"{address} is in none of your address books, only seen in your mail (anyone "
                "can send mail): check that it is the address you know"
            )
        try:
            alike = [a for a in book.lookalikes(address) if not a.seen]
        except Exception:
            alike = []
        if alike:
            used_book = True
            if not seen:
                lines.append(f"{label}: {address} (in none of your address books)")
            concerns.append(f"{address} looks like {_listed(alike)}, but is a different address")
        others = {w: es for w, es in names.items() if es}
        if others and not alike:
            used_book = True
            word = next(iter(others))
            if not seen:
                lines.append(f"{label}: {address} (in none of your address books)")
            concerns.append(
                f"you typed “{word}”, and your address books know {_listed(others[word])}, "
                f"not {address}"
            )
    if used_book:
        try:
            old = book.staleness()
        except Exception:
            old = ""
        if old:
            lines.append(f"The address books answered from their last copy ({old}).")
    return Recipients(tuple(dict.fromkeys(lines)), tuple(dict.fromkeys(concerns)), frozenset(named))
