"""Addresses seen in the person's mail: who wrote to them (the inbox) and whom they wrote to
(the sent folder), kept as "seen in mail", never as contacts the person made.

Anyone can send a mail, so every name and address here is outside content, and an address
that is only seen in mail is one the receipt warns about (agent/people.py). Read with the mail
adapter's own IMAP client (the account, its password, its timeouts), headers only.
"""

from __future__ import annotations

from collections import Counter

from botpsy_desktop.adapters.contacts.cache import ContactCache
from botpsy_desktop.adapters.contacts.sources import Synced
from botpsy_desktop.adapters.contacts.vcard import Card
from botpsy_desktop.adapters.email.client import MailClient
from botpsy_desktop.core.addresses import EMAIL_RE
from botpsy_desktop.core.errors import BotpsyError

SEEN_KIND = "mail"
"""The cache's kind of a "seen in mail" book."""


class MailSeenSource:
    """The last ``messages`` messages of a mail account's inbox (senders) and sent folder
    (recipients), as one "seen in mail" book."""

    def __init__(self, client: MailClient, *, messages: int = 500) -> None:
        self.client = client
        self.messages = messages
        self.name = f"mail:{client.name}"
        self.label = f"seen in mail ({client.name})"

    def _read(self) -> dict[str, Counter[str]]:
        from email.utils import getaddresses  # the email package when mail is read

        seen: dict[str, Counter[str]] = {}
        me = self.client.account.address.casefold()
        with self.client.imap() as conn:
            sent = self.client.special_folder(conn, "\\Sent", self.client.account.sent_folder)
            for folder, field in (("INBOX", "sender"), (sent, "to")):
                self.client.select(conn, folder, readonly=True)
                uids = self.client.uids(conn, None)[-self.messages :]
                for summary in self.client.summaries(conn, uids):
                    for name, address in getaddresses([getattr(summary, field)]):
                        address = address.strip()
                        if not EMAIL_RE.match(address) or address.casefold() == me:
                            continue
                        names = seen.setdefault(address.casefold(), Counter())
                        names[" ".join(name.split())[:100]] += 1
        return seen

    def sync(self, cache: ContactCache, at: float) -> list[Synced]:
        cache.ensure_book(self.name, self.label, False, SEEN_KIND)
        report = Synced(self.name, self.label)
        try:
            seen = self._read()
        except BotpsyError as exc:
            report.error = str(exc)
            cache.failed(self.name, report.error, at)
            return [report]
        except Exception as exc:  # a folder the server refuses: the sync says so
            report.error = " ".join(str(exc).split())[:200] or type(exc).__name__
            cache.failed(self.name, report.error, at)
            return [report]
        cached = cache.etags(self.name)
        put = []
        for address, names in seen.items():
            name = next((n for n, _ in names.most_common() if n), address)
            etag = name
            if cached.get(address) != etag:
                put.append((address, etag, Card(uid=address, name=name, emails=(address,))))
        remove = [h for h in cached if h not in seen]
        report.written, report.removed = cache.apply(
            self.name, put=put, remove=remove, version=None, at=at
        )
        report.unchanged = not put and not remove
        return [report]
