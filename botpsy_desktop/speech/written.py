"""Spoken forms that a request needs written: email addresses, paths and file names said aloud.

A speech recogniser writes what it hears, and a mail address said aloud comes out as words:
"ana at example dot org", "john dot smith at mail dot example dot com", or half written, "ana at
example.org". The tools need the written form (ana@example.org), and the person sees it in the
box before it is sent. Only a run of words that ends in a known top-level domain is joined, so
that "meet Ana at home" or "at five" stay as they were, and only in a request about mail or
contacts (a word such as "email", "send", "write", "contact", "address"), so that "look at
example dot com" stays a web address. The words for "at" and "dot" of the languages the
recogniser is used in are known (English, French, Spanish, German, Italian).

Paths and file names the same way, in a request about files or folders: "documents slash taxes"
-> "documents/taxes", "tilde slash music" (or "till the slash", as Whisper hears it) -> "~/music",
"budget underscore 2025" -> "budget_2025". A file name is written in any request, the known
extension being the guard: "report dot pdf" -> "report.pdf", spelled or not ("notes dot t x t",
"notes dot text"), "draft dash two dot docx" -> "draft-two.docx". The case of a name is left as
heard: the file tools take a name that differs only in case from the one on disk as that one.

Hand-written: no maintained library turns spoken addresses into written ones (inverse text
normalisation libraries such as NeMo's need a large model and runtime for this one rule).
"""

from __future__ import annotations

import re

_AT = r"(?:at|@|arobase|arroba|chiocciola|ät|et commercial)"
_DOT_WORD = r"(?:dot|point|punto|punkt)"
_DOT = rf"(?:{_DOT_WORD}|\.)"
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
_DOT_SPLIT = re.compile(rf"\s*\b{_DOT_WORD}\b\s*|\s*\.\s*", re.IGNORECASE)


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


_ABOUT_FILES = re.compile(
    r"\b(?:files?|folders?|director(?:y|ies)|documents?|downloads?|desktop|open|move|copy|"
    r"rename|delete|trash|find|list|save|notes?|paths?|attach\w*|"
    r"fichiers?|dossiers?|ouvre|déplace|renomme|archivos?|carpetas?|abre|mueve|renombra|"
    r"dateien?|ordner|öffne|verschieb\w*|umbenenn\w*|cartell[ae]|apri|sposta|rinomina)\b",
    re.IGNORECASE,
)
_EXTENSIONS = (
    "txt|md|pdf|doc|docx|odt|rtf|xls|xlsx|ods|csv|ppt|pptx|odp|json|xml|html|py|sh|log|"
    "jpg|jpeg|png|gif|svg|webp|heic|mp3|flac|ogg|wav|m4a|mp4|mkv|mov|avi|zip|tar|gz|7z|ics|vcf|epub"
)
_EXTENSION = re.compile(rf"(?:{_EXTENSIONS})", re.IGNORECASE)
_SPELLED = r"[a-z0-9](?:\s+[a-z0-9]){1,3}"
"""An extension spelled out letter by letter ("p d f", "t x t", "m p 3")."""
_SLASH = r"(?:slash|schrägstrich|barra|barre oblique)"
_HOME_SLASH = re.compile(
    rf"\b(?:tilde|tilda|till the|(?:my\s+)?home(?:\s+(?:folder|directory))?)\s+{_SLASH}\s+",
    re.IGNORECASE,
)
_WORD_SLASH = re.compile(rf"(?<=[\w.~]),?\s+{_SLASH},?\s+(?=[\w.])", re.IGNORECASE)
"""A slash said between two names, with the commas a recogniser puts around it ("Document, slash
Party.txt")."""
_FILE_DOT = re.compile(
    rf"\b(?P<stem>[\w-]+)(?:\s*\b{_DOT_WORD}\b\s*|\.)(?P<ext>{_SPELLED}|[a-z0-9]+)\b",
    re.IGNORECASE,
)
_SAID_EXTENSIONS = {"text": "txt"}
"""Extensions said as a word rather than spelled ("notes dot text")."""
_JOINERS = {"underscore": "_", "dash": "-", "hyphen": "-"}
_JOINER = re.compile(r"\s+(underscore|dash|hyphen)\s+", re.IGNORECASE)
_JOINED_NAME = re.compile(
    rf"\b\w+(?:{_JOINER.pattern}\w+)+(?=\.(?:{_EXTENSIONS})\b)", re.IGNORECASE
)


def written_paths(text: str) -> str:
    """``text`` with file names said aloud written as such ("report dot pdf" -> "report.pdf",
    wherever they are: the known extension is the guard), and paths too ("documents slash
    taxes" -> "documents/taxes") when it is about files or folders; everything else as it was."""

    def file_name(m: re.Match[str]) -> str:
        ext = re.sub(r"\s+", "", m.group("ext"))
        ext = _SAID_EXTENSIONS.get(ext.lower(), ext)
        if not _EXTENSION.fullmatch(ext):
            return m.group(0)
        return f"{m.group('stem')}.{ext}"

    text = _FILE_DOT.sub(file_name, text)

    def joined(m: re.Match[str]) -> str:
        return _JOINERS[m.group(1).lower()]

    text = _JOINED_NAME.sub(lambda m: _JOINER.sub(joined, m.group(0)), text)
    if not _ABOUT_FILES.search(text):
        return text
    text = re.sub(r"\s+underscore\s+", "_", text, flags=re.IGNORECASE)
    text = _HOME_SLASH.sub("~/", text)
    return _WORD_SLASH.sub("/", text)


def written_forms(text: str) -> str:
    """``text`` as the tools need it: addresses, then paths and file names said aloud, written."""
    return written_paths(written_addresses(text))
