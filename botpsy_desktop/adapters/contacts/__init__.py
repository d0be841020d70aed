"""Contacts: vCard files and CardDAV address books in a local cache, and the model's tools."""

from botpsy_desktop.adapters.contacts.service import ContactsService, contacts_service
from botpsy_desktop.adapters.contacts.tools import contacts_tools

__all__ = ["ContactsService", "contacts_service", "contacts_tools"]
