"""Email addresses as people write them: "ana@example.com, Bob <bob@example.org>"."""

from __future__ import annotations

import re

from botpsy_desktop.core.errors import ToolError

EMAIL_RE = re.compile(r"^[^@\s<>,;\"]+@[^@\s<>,;\"]+\.[^@\s<>,;\"]+$")


def parse_addresses(text: str, field: str, *, one_line: bool = False) -> list[tuple[str, str]]:
    """(name, address) pairs from "a@x.org, Bob <b@y.org>"; a clear error for a bad one.

    ``field`` names the argument in the error; ``one_line`` refuses a line break (a mail header).
    """
    if one_line and ("\n" in text or "\r" in text):
        raise ToolError(f"{field} has a line break.", "Give the addresses on one line.")
    from email.utils import getaddresses  # the email package (~1.3 MiB) when addresses are given

    pairs = []
    for name, address in getaddresses([text]):
        address = address.strip()
        if not address and not name:
            continue
        if not EMAIL_RE.match(address):
            raise ToolError(
                f"{(address or name)!r} in {field} is not an email address.",
                'Give addresses like "ana@example.com, Bob <bob@example.com>".',
            )
        pairs.append((name.strip(), address))
    if not pairs and text.strip():
        raise ToolError(f"No email address found in {field}.", 'Give one like "ana@example.com".')
    return pairs
