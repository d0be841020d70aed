"""vCard text (3.0 and 4.0) read into plain cards; a bad card is named and skipped, never fatal.

Parsed with vobject (pinned in pyproject.toml): the long-kept vCard/iCalendar parser that
Radicale itself uses, so what the test server stores and what the app reads go through the same
code. It reads vCard 3.0 fully (line folding, quoted-printable, parameters, escaped commas) and
the properties of 4.0 we use (FN, N, NICKNAME, EMAIL, TEL, ORG, BDAY, ANNIVERSARY; 4.0's
``tel:`` URIs are unwrapped here). Two things are done by hand around it: a file is split into
its cards first (one broken card must not cost the others), and NICKNAME is read from the card's
own lines, because vobject keeps only the first of a comma-separated list.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

MAX_CARD_BYTES = 1_000_000
"""A card larger than this (a huge embedded photo) is reported and skipped, not parsed."""

_CARD = re.compile(rb"^BEGIN:VCARD\r?$.*?^END:VCARD\r?$", re.IGNORECASE | re.MULTILINE | re.DOTALL)
_NICK = re.compile(r"^(?:[A-Za-z0-9-]+\.)?NICKNAME(?:;[^:]*)?:(.*)$", re.IGNORECASE | re.MULTILINE)


class CardError(ValueError):
    """A card that cannot be used; the message names it and says why."""


@dataclass(frozen=True)
class Card:
    """One person or organisation from a vCard, reduced to what the tools and the gate use."""

    uid: str
    name: str
    given: str = ""
    family: str = ""
    nicknames: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    phones: tuple[str, ...] = ()
    org: str = ""
    title: str = ""
    birthday: str = ""
    anniversary: str = ""
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "name": self.name,
            "given": self.given,
            "family": self.family,
            "nicknames": list(self.nicknames),
            "emails": list(self.emails),
            "phones": list(self.phones),
            "org": self.org,
            "title": self.title,
            "birthday": self.birthday,
            "anniversary": self.anniversary,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Card:
        return cls(
            uid=str(data.get("uid") or ""),
            name=str(data.get("name") or ""),
            given=str(data.get("given") or ""),
            family=str(data.get("family") or ""),
            nicknames=tuple(data.get("nicknames") or ()),
            emails=tuple(data.get("emails") or ()),
            phones=tuple(data.get("phones") or ()),
            org=str(data.get("org") or ""),
            title=str(data.get("title") or ""),
            birthday=str(data.get("birthday") or ""),
            anniversary=str(data.get("anniversary") or ""),
            note=str(data.get("note") or ""),
        )


def split_cards(data: bytes) -> list[bytes]:
    """The cards of a .vcf file (or a CardDAV resource), each as its own bytes."""
    return [m.group(0) for m in _CARD.finditer(data)]


def parse_card(data: bytes, where: str, max_bytes: int = MAX_CARD_BYTES) -> Card:
    """One card from its bytes; CardError naming ``where`` and the fix when it cannot be used."""
    if len(data) > max_bytes:
        raise CardError(
            f"{where} is {len(data) / 1_000_000:.1f} MB, over the {max_bytes / 1_000_000:g} MB a "
            "card may have (usually a very large photo); it was skipped. Make the photo smaller "
            "in your contacts app."
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CardError(
            f"{where} is not valid UTF-8 (byte {exc.start}); it was skipped. Export it again as "
            "vCard 3.0 or 4.0, which are UTF-8."
        ) from None
    import vobject

    try:
        component: Any = vobject.readOne(text, validate=False, ignoreUnreadable=True)
    except Exception as exc:  # vobject raises several kinds of error for broken text
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise CardError(f"{where} could not be read ({reason}); it was skipped.") from None
    return _card(component, text, where)


def _values(component: Any, key: str) -> list[Any]:
    return [line.value for line in component.contents.get(key, [])]


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " ".join(_text(v) for v in value if _text(v))
    return " ".join(str(value or "").split())


def _card(component: Any, text: str, where: str) -> Card:
    if str(getattr(component, "name", "")).upper() != "VCARD":
        raise CardError(f"{where} is not a vCard; it was skipped.")
    name = next((_text(v) for v in _values(component, "fn") if _text(v)), "")
    if not name:
        raise CardError(
            f"{where} has no name (FN), which every vCard must have; it was skipped. Give the "
            "contact a name in your contacts app."
        )
    given = family = ""
    for n in _values(component, "n"):
        given = _text(getattr(n, "given", "")) or given
        family = _text(getattr(n, "family", "")) or family
    unfolded = re.sub(r"\r?\n[ \t]", "", text)
    nicknames: list[str] = []
    for raw in _NICK.findall(unfolded):
        for part in re.split(r"(?<!\\),", raw.strip()):
            part = part.replace("\\,", ",").strip()
            if part and part not in nicknames:
                nicknames.append(part)
    emails = tuple(dict.fromkeys(_text(v).strip() for v in _values(component, "email") if v))
    phones = []
    for v in _values(component, "tel"):
        phone = _text(v)
        phones.append(phone[4:] if phone.lower().startswith("tel:") else phone)
    uid = next((_text(v) for v in _values(component, "uid") if _text(v)), "")
    return Card(
        uid=uid,
        name=name,
        given=given,
        family=family,
        nicknames=tuple(nicknames),
        emails=tuple(e for e in emails if e),
        phones=tuple(p for p in dict.fromkeys(phones) if p),
        org=next((_text(v) for v in _values(component, "org") if _text(v)), ""),
        title=next((_text(v) for v in _values(component, "title") if _text(v)), ""),
        birthday=next((_text(v) for v in _values(component, "bday") if _text(v)), ""),
        anniversary=next(
            (
                _text(v)
                for key in ("anniversary", "x-anniversary")
                for v in _values(component, key)
                if _text(v)
            ),
            "",
        ),
        note=next((_text(v) for v in _values(component, "note") if _text(v)), "")[:500],
    )


def write_card(card: Card) -> str:
    """A vCard 3.0 text for ``card`` (what add_contact stores)."""
    import vobject

    v: Any = vobject.vCard()
    v.add("version").value = "3.0"
    v.add("uid").value = card.uid
    v.add("fn").value = card.name
    v.add("n").value = vobject.vcard.Name(family=card.family, given=card.given)
    if card.nicknames:
        v.add("nickname").value = ",".join(card.nicknames)
    for email in card.emails:
        v.add("email").value = email
    for phone in card.phones:
        v.add("tel").value = phone
    if card.org:
        v.add("org").value = [card.org]
    if card.birthday:
        v.add("bday").value = card.birthday
    text: str = v.serialize()
    return text
