"""The model's address-book tools: find a contact, read one contact's details."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.contacts.service import ContactsService
from botpsy_desktop.core.tools import Effect, Tier, Tool, make_tool

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


def contacts_tools(service: ContactsService) -> list[Tool]:
    """find_contact and contact_details. Both read the local copy of the address books (never
    waiting for the network). Their results are the app's own copy of the person's books,
    declared ``untrusted_output=False``; every field from a book someone else can write is
    marked as outside content where it is read (ContactsService._shown), so a result that holds
    one taints the request, field by field, as the declaration rules say (core/tools.py)."""

    def find_contact(args: FindContactArgs) -> dict[str, Any]:
        return service.find(args.query)

    def contact_details(args: ContactDetailsArgs) -> dict[str, Any]:
        return service.details(args.contact)

    read = [Effect.READ]
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
    ]
