"""Spoken forms that a request needs written: email addresses said aloud.

A speech recogniser writes what it hears, and a mail address said aloud comes out as words:
"ana at example dot org", "john dot smith at mail dot example dot com", or half written, "ana at
example.org". The tools need the written form (ana@example.org), and the person sees it in the
box before it is sent. Only a run of words that ends in a known top-level domain is joined, so
that "meet Ana at home" or "at five" stay as they were, and only in a request about mail or
contacts (a word such as "email", "send", "write", "contact", "address"), so that "look at
example dot com" stays a web address. The words for "at" and "dot" of the languages the
recogniser is used in are known (English, French, Spanish, German, Italian).

Hand-written: no maintained library turns spoken addresses into written ones (inverse text
normalisation libraries such as NeMo's need a large model and runtime for this one rule).
"""

from __future__ import annotations

import re

_AT = r"(?:at|@|arobase|arroba|chiocciola|ät|et commercial)"
_DOT = r"(?:dot|\.|point|punto|punkt)"
_TLD = (
    r"(?:"
    r"com|org|net|edu|gov|mil|int|info|biz|io|co|ai|app|dev|me|eu|uk|us|ca|au|nz|ie|"
    r"fr|de|es|it|nl|be|ch|at|lu|pt|pl|se|no|dk|fi|cz|sk|hu|ro|gr|tr|ru|ua|jp|cn|kr|"
    r"in|br|mx|ar|cl|za"
    r")"
)
"""The top-level domains an address said aloud may end in."""
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_SPOKEN_ADDRESS = re.compile(
    rf"\b(?P<local>{_LABEL}(?:\s*{_DOT}\s*{_LABEL})*)"
    rf"\s*{_AT}\s*"
    rf"(?P<domain>{_LABEL}(?:\s*{_DOT}\s*{_LABEL})*\s*{_DOT}\s*{_TLD})\b",
    re.IGNORECASE,
)
_ABOUT_MAIL = re.compile(
    r"\b(?:e-?mails?|mails?|mailed|send|sent|write|wrote|forward|reply|replies|cc|bcc|"
    r"contacts?|address(?:es)?|inbox|message|courriel|mél|écris|envoie|correo|escribe|envía|"
    r"contacto|dirección|schreib\w*|schick\w*|kontakt\w*|adresse|scrivi|invia|indirizzo)\b",
    re.IGNORECASE,
)
_DOT_SPLIT = re.compile(rf"\s*\b{_DOT}\b\s*|\s*\.\s*", re.IGNORECASE)


def _join(part: str) -> str:
    return ".".join(p for p in _DOT_SPLIT.split(part.strip()) if p).lower()


def written_addresses(text: str) -> str:
    """``text`` with each email address said aloud written as one ("ana at example dot org"
    -> "ana@example.org") when it is about mail or contacts; everything else as it was."""

    if not _ABOUT_MAIL.search(text):
        return text

    def write(m: re.Match[str]) -> str:
        local, domain = _join(m.group("local")), _join(m.group("domain"))
        if not (re.search(r"[a-z]", local) and re.search(r"[a-z]", domain.split(".")[0])):
            return m.group(0)
        return f"{local}@{domain}"

    return _SPOKEN_ADDRESS.sub(write, text)
