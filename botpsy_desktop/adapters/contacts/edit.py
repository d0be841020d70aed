"""Changes to the person's vCard folders: add a card, change one, remove one (Undo's way back).

Only local vCard folders are written: one card per file, named after its UID, replaced
atomically. A card is changed in place through vobject (the properties the tools do not know,
a photo or a postal address, stay as they were). A CardDAV book is not written from here yet:
the tools say so and name the contacts app to use.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.contacts.cache import Stored
from botpsy_desktop.adapters.contacts.sources import VcfSource
from botpsy_desktop.adapters.contacts.vcard import split_cards
from botpsy_desktop.core.addresses import parse_addresses
from botpsy_desktop.core.errors import ToolError

FIELDS = ("name", "emails", "phones", "nicknames", "company", "birthday")
"""What add_contact and update_contact set; lists are comma-separated in the arguments."""


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listed(text: str) -> list[str]:
    return [p.strip() for p in re.split(r"[,;]", text) if p.strip()]


def fields_of(item: Stored) -> dict[str, str]:
    """A cached card's fields as update_contact's arguments (what an undo puts back)."""
    card = item.card
    return {
        "name": card.name,
        "emails": ", ".join(card.emails),
        "phones": ", ".join(card.phones),
        "nicknames": ", ".join(card.nicknames),
        "company": card.org,
        "birthday": card.birthday,
    }


def check(values: Mapping[str, str]) -> None:
    """Bad input is refused with what to do, before anything is written."""
    if "name" in values and not values["name"].strip():
        raise ToolError("A contact needs a name.", "Give the person's name.")
    for address in listed(values.get("emails", "")):
        parse_addresses(address, "emails")


def apply(component: Any, values: Mapping[str, str]) -> None:
    """Set ``values`` on a vobject vCard, leaving every other property as it was."""
    import vobject

    def replace(key: str, items: list[Any]) -> None:
        component.contents.pop(key, None)
        for item in items:
            component.add(key).value = item

    if "name" in values:
        name = " ".join(values["name"].split())
        given, _, family = name.partition(" ")
        replace("fn", [name])
        replace("n", [vobject.vcard.Name(family=family, given=given)])
    if "emails" in values:
        replace("email", listed(values["emails"]))
    if "phones" in values:
        replace("tel", listed(values["phones"]))
    if "nicknames" in values:
        replace("nickname", [",".join(listed(values["nicknames"]))] if values["nicknames"] else [])
    if "company" in values:
        replace("org", [[values["company"]]] if values["company"].strip() else [])
    if "birthday" in values:
        replace("bday", [values["birthday"].strip()] if values["birthday"].strip() else [])


def write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def new_card(folder: Path, values: Mapping[str, str]) -> Path:
    """A new one-card file in ``folder``; its path."""
    import vobject

    uid = str(uuid.uuid4())
    card: Any = vobject.vCard()
    card.add("version").value = "3.0"
    card.add("uid").value = uid
    apply(card, {"name": values.get("name", ""), **values})
    path = folder / f"{uid}.vcf"
    write(path, card.serialize())
    return path


def card_file(source: VcfSource, item: Stored) -> Path:
    """The file of a cached card that can be changed here: a one-card file of a vCard folder."""
    key, _, index = item.href.rpartition("#")
    path = source.path / key if source.path.is_dir() else source.path
    try:
        cards = split_cards(path.read_bytes())
    except OSError as exc:
        raise ToolError(f"Cannot read {path}: {exc.strerror}.") from None
    if len(cards) != 1 or index != "0":
        raise ToolError(
            f"{item.card.name} is in {path}, a file holding {len(cards)} cards: it is not "
            "changed from here, so the other cards cannot be touched by mistake.",
            "Change it in your contacts app, or keep one card per file.",
        )
    return path


def change(path: Path, values: Mapping[str, str]) -> None:
    import vobject

    component: Any = vobject.readOne(path.read_text(encoding="utf-8"), validate=False)
    apply(component, values)
    write(path, component.serialize())
