"""Email addresses said aloud are written as the tools need them, and nothing else is touched."""

from __future__ import annotations

import pytest

from botpsy_desktop.speech.written import written_addresses


@pytest.mark.parametrize(
    ("heard", "written"),
    [
        ("email ana at example dot org what I have on friday",
         "email ana@example.org what I have on friday"),
        ("Email Ana at example.org, what I have on Friday.",
         "Email ana@example.org, what I have on Friday."),
        ("write to john dot smith at mail dot example dot com please",
         "write to john.smith@mail.example.com please"),
        ("send it to bob at example dot co dot uk", "send it to bob@example.co.uk"),
        ("add ana at example dot org to my contacts", "add ana@example.org to my contacts"),
        ("écris à marie arobase exemple point fr", "écris à marie@exemple.fr"),
        ("escribe a juan arroba correo punto es", "escribe a juan@correo.es"),
        ("send it to ana@example.org", "send it to ana@example.org"),
        # not an address: no known domain at the end, or not about mail
        ("meet ana at home at five", "meet ana at home at five"),
        ("mail bob at work", "mail bob at work"),
        ("email ana at example dot orgasm", "email ana at example dot orgasm"),
        ("look at example dot com", "look at example dot com"),
        ("set an alarm at seven dot thirty", "set an alarm at seven dot thirty"),
    ],
)  # fmt: skip
def test_an_address_said_aloud_is_written(heard: str, written: str) -> None:
    assert written_addresses(heard) == written
