"""The model's address-book tools: find a contact, read one contact's details."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import tzinfo
from typing import Any

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.contacts.service import ContactsService
from botpsy_desktop.core.tools import (
    Effect,
    Inverse,
    Resolved,
    Tier,
    Tool,
    given,
    make_tool,
    result_inverse,
)

DOMAIN = "people"


class FindContactArgs(BaseModel):
    """Look up people in the user's address books by name, nickname, part of a name, email,
    phone or company. Lists every match with an id; when several match, ask the user which one
    they mean. Never guess an email address: use one this tool returned."""

    query: str = Field(min_length=1, description="A name, nickname, email, phone or company.")


class ContactDetailsArgs(BaseModel):
    """All the details of one contact (emails, phones, company, birthday, anniversary, note):
    give the id find_contact listed, or a name that fits one contact only."""

    contact: str = Field(min_length=1, description="The contact's id (like c1a2b3c4d) or name.")


_LIST = "comma-separated"


class UpcomingBirthdaysArgs(BaseModel):
    """Birthdays and anniversaries from the user's address books in the coming days (today
    included): whose, which day, in how many days, how many years."""

    days: int = Field(7, ge=1, le=366, description="How many days ahead (7: this week).")


class AddContactArgs(BaseModel):
    """Add a person to the user's own address book (a vCard folder). Undo removes it."""

    name: str = Field(min_length=1, description="Full name, e.g. Ana López.")
    emails: str = Field("", description=f"Email addresses, {_LIST}.")
    phones: str = Field("", description=f"Phone numbers, {_LIST}.")
    nicknames: str = Field("", description=f"Nicknames, {_LIST} (e.g. Mum).")
    company: str = Field("", description="Company or organisation.")
    birthday: str = Field("", description="Birthday as YYYY-MM-DD or --MM-DD.")


class UpdateContactArgs(BaseModel):
    """Change a contact: each field given replaces that field (lists comma-separated); fields
    left out stay. Undo puts the old values back."""

    contact: str = Field(min_length=1, description="The contact's id from find_contact.")
    name: str | None = Field(None, description="New full name.")
    emails: str | None = Field(None, description=f"All its email addresses, {_LIST}.")
    phones: str | None = Field(None, description=f"All its phone numbers, {_LIST}.")
    nicknames: str | None = Field(None, description=f"All its nicknames, {_LIST}.")
    company: str | None = Field(None, description="Company or organisation.")
    birthday: str | None = Field(None, description="Birthday as YYYY-MM-DD or --MM-DD.")


class DeleteContactArgs(BaseModel):
    """Remove a contact from the user's own address book."""

    contact: str = Field(min_length=1, description="The contact's id from find_contact.")


_FIELDS = ("name", "emails", "phones", "nicknames", "company", "birthday")


def _values(args: BaseModel) -> dict[str, str]:
    return {k: str(v) for k in _FIELDS if (v := getattr(args, k, None)) is not None}


def contacts_tools(service: ContactsService, tz: tzinfo | None = None) -> list[Tool]:
    """find_contact and contact_details. Both read the local copy of the address books (never
    waiting for the network). Their results are the app's own copy of the person's books,
    declared ``untrusted_output=False``; every field from a book someone else can write is
    marked as outside content where it is read (ContactsService._shown), so a result that holds
    one taints the request, field by field, as the declaration rules say (core/tools.py)."""

    def find_contact(args: FindContactArgs) -> dict[str, Any]:
        return service.find(args.query)

    def contact_details(args: ContactDetailsArgs) -> dict[str, Any]:
        return service.details(args.contact)

    def upcoming_birthdays(args: UpcomingBirthdaysArgs) -> dict[str, Any]:
        return service.birthdays(args.days, tz)

    def add_contact(args: AddContactArgs) -> dict[str, Any]:
        return service.add({k: v for k, v in _values(args).items() if v or k == "name"})

    def update_contact(args: UpdateContactArgs) -> dict[str, Any]:
        return service.update(args.contact, _values(args))

    def delete_contact(args: DeleteContactArgs) -> dict[str, Any]:
        return service.delete(args.contact)

    def contact(arguments: Mapping[str, Any]) -> list[Resolved]:
        item = service.resolve_one(str(arguments.get("contact") or ""))
        where = "your address book" if item.own else "a shared address book"
        shown = f"{item.card.name} <{', '.join(item.card.emails) or 'no email'}> in {where}"
        state = service.state(item.ref) or {}
        return [Resolved("contact", item.ref, f"contact {shown} “{item.label}”", state)]

    def state(arguments: Mapping[str, Any]) -> dict[str, Any] | None:
        return service.state(str(arguments.get("contact") or ""))

    def own_or_ask(arguments: Mapping[str, Any]) -> Tier:
        """changes at once with Undo when the card is in your own address book, and asks when
        it is in a book others can change"""
        return Tier.REVERSIBLE if service.is_own(str(arguments.get("contact"))) else Tier.ASK

    def back(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
        updated = result.get("updated") if isinstance(result, Mapping) else None
        own = isinstance(updated, Mapping) and updated.get("own_book") is True
        found = result_inverse(result, Tier.REVERSIBLE if own else None)
        return found if found is not None else "the result does not say what to restore"

    def removed(arguments: Mapping[str, Any], result: Any) -> Inverse | str:
        found = result_inverse(result, Tier.REVERSIBLE)
        return found if found is not None else "the result does not name the added contact"

    read, local = [Effect.READ], [Effect.LOCAL_WRITE]
    return [
        make_tool(
            find_contact,
            effects=read,
            tier=Tier.READ,
            domain=DOMAIN,
            untrusted_output=False,
            summary=lambda a: f"Look up “{a.get('query')}” in your address books",
        ),
        make_tool(
            contact_details,
            effects=read,
            tier=Tier.READ,
            domain=DOMAIN,
            untrusted_output=False,
            summary=lambda a: f"Show the details of contact {a.get('contact')}",
        ),
        make_tool(
            upcoming_birthdays,
            effects=read,
            tier=Tier.READ,
            domain=DOMAIN,
            untrusted_output=False,
            summary=lambda a: f"List the birthdays of the next {a.get('days', 7)} days",
        ),
        make_tool(
            add_contact,
            effects=local,
            tier=Tier.REVERSIBLE,
            domain=DOMAIN,
            inverse=removed,
            untrusted_output=False,  # the new card as given: its own arguments
            summary=lambda a: (
                f"Add {a.get('name')} to your address book" + given(a, "emails", " ({})")
            ),
            state=state,
            stores=("emails",),  # kept in the card; nobody is written to
        ),
        make_tool(
            update_contact,
            effects=local,
            tier=own_or_ask,
            domain=DOMAIN,
            targets=("contact",),
            inverse=back,
            untrusted_output=False,  # fields of a shared book are marked where read
            summary=lambda a: (
                f"Change contact {a.get('contact')}: "
                + ", ".join(f"{k} “{a[k]}”" for k in _FIELDS if a.get(k) is not None)
            ),
            state=state,
            resolve=contact,
            stores=("emails",),
        ),
        make_tool(
            delete_contact,
            effects=[Effect.DESTRUCTIVE],
            tier=Tier.ASK,
            domain=DOMAIN,
            targets=("contact",),
            summary=lambda a: f"Remove contact {a.get('contact')} from your address book",
            state=state,
            resolve=contact,
        ),
    ]
