"""Address books on the test Radicale (CardDAV), written as another client would write them."""

from __future__ import annotations

from tests.helpers.radicale_server import Radicale

_MKCOL = (
    '<?xml version="1.0" encoding="utf-8"?><D:mkcol xmlns:D="DAV:" '
    'xmlns:C="urn:ietf:params:xml:ns:carddav"><D:set><D:prop><D:resourcetype><D:collection/>'
    "<C:addressbook/></D:resourcetype><D:displayname>{name}</D:displayname></D:prop></D:set>"
    "</D:mkcol>"
)


def vcard(uid: str, name: str, *emails: str, version: str = "3.0", extra: str = "") -> str:
    """A vCard with CRLF line ends, as servers store them."""
    given, _, family = name.partition(" ")
    lines = [
        "BEGIN:VCARD",
        f"VERSION:{version}",
        f"UID:{uid}",
        f"FN:{name}",
        f"N:{family};{given};;;",
        *(f"EMAIL:{e}" for e in emails),
        *([extra] if extra else []),
        "END:VCARD",
    ]
    return "\r\n".join(lines) + "\r\n"


class AddressBook:
    """One address book of a Radicale user, changed through a second, independent client."""

    def __init__(self, server: Radicale, user: str, slug: str, name: str) -> None:
        self.client = server.client(user)
        self.url = f"{server.url}{user}/{slug}/"
        made = self.client.request(self.url, "MKCOL", _MKCOL.format(name=name))
        assert made.status == 201, made.status

    def put(self, href: str, text: str) -> None:
        done = self.client.request(self.url + href, "PUT", text, {"Content-Type": "text/vcard"})
        assert done.status in (201, 204), done.status

    def delete(self, href: str) -> None:
        done = self.client.request(self.url + href, "DELETE")
        assert done.status in (200, 204), done.status
