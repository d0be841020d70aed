"""search_documents: the best passages of the user's documents for some words, and their source."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.documents.index import DocumentIndex, parse_query, snippet
from botpsy_desktop.adapters.files.jail import FolderJail
from botpsy_desktop.adapters.untrusted import neutralize
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.outside import outside
from botpsy_desktop.core.tools import Effect, Tier, Tool, make_tool

SNIPPET_CHARS = 240
"""Characters of each passage shown around the words found."""

RESULT_CHARS = 2_400
"""The most snippet text one result carries (the prompt's budget for it)."""


class SearchDocumentsArgs(BaseModel):
    """Search the text inside the user's documents: PDFs, Word, Excel, PowerPoint and
    OpenDocument files, web pages, saved e-mails (.eml), text and Markdown notes. Returns the
    best passages, each with its file and page or section.

    Use it for facts in the user's own papers: when a lease ends, an invoice, what an insurer
    wrote, a tax number. Name the file the answer comes from.
    """

    query: str = Field(
        min_length=1,
        description='A few words the passage would contain, e.g. "lease end date" or "plumber '
        'invoice". An exact phrase in double quotes; a word ending in * matches any ending.',
    )
    folder: str | None = Field(
        None, description='Only documents under this folder, e.g. "~/Documents".'
    )
    limit: int = Field(5, ge=1, le=10, description="Most passages to return.")


class ReadDocumentArgs(BaseModel):
    """Read a page, sheet, slide or section of a document (PDF, Word, Excel, PowerPoint,
    OpenDocument, web page, saved e-mail, text), e.g. to quote what search_documents found."""

    path: str = Field(description='The file, e.g. "~/Documents/lease.pdf".')
    where: str | None = Field(
        None,
        description='Which part, as search_documents named it, e.g. "page 2" or "slide 3"; '
        "none: from the start.",
    )
    max_chars: int = Field(4_000, ge=200, le=20_000, description="Most characters to return.")


def documents_tools(
    index: DocumentIndex, *, rescan_s: float = 60.0, wait_s: float = 10.0
) -> list[Tool]:
    """The documents tools over ``index``: search_documents and read_document (read). Before
    a search the index catches up with the folders when it was last checked over ``rescan_s``
    seconds ago, waiting at most ``wait_s`` seconds (the rest is searched later)."""

    def search_documents(args: SearchDocumentsArgs) -> dict[str, Any]:
        return _search(index, args, rescan_s, wait_s)

    def read_document(args: ReadDocumentArgs) -> dict[str, Any]:
        return _read(index, args)

    # document text is someone else's words (a letter, a web page, a mail): outside content
    return [
        make_tool(
            search_documents,
            effects={Effect.READ},
            tier=Tier.READ,
            domain="files",  # asked for as files are ("find the invoice", "my lease"): one set
            untrusted_output=True,
        ),
        make_tool(read_document, effects={Effect.READ}, tier=Tier.READ, domain="files"),
    ]


def _search(
    index: DocumentIndex, args: SearchDocumentsArgs, rescan_s: float, wait_s: float
) -> dict[str, Any]:
    if index.jail is None:
        raise ToolError(
            "No folders are set up for the assistant to read.",
            "Ask the user to add one in Settings.",
        )
    query = parse_query(args.query)
    if query is None:
        raise ToolError(
            f"The query {args.query!r} has no words to look for.",
            'Give a few words the document would contain, e.g. "lease end date".',
        )
    under = index.jail.resolve(args.folder) if args.folder else None
    note = index.refresh(rescan_s, wait_s)
    hits = index.search(args.query, args.limit, under)
    results: list[dict[str, Any]] = []
    used = 0
    for hit in hits:
        shown = outside(neutralize(snippet(hit.text, query.marks, SNIPPET_CHARS)))
        if results and used + len(shown) > RESULT_CHARS:
            break
        used += len(shown)
        results.append(
            {
                "file": outside(index.jail.display(Path(hit.path))),
                "where": outside(neutralize(hit.place)),
                "snippet": shown,
                "modified": datetime.fromtimestamp(hit.mtime_ns / 1e9)
                .astimezone()
                .isoformat(timespec="minutes"),
            }
        )
    out: dict[str, Any] = {"query": args.query, "results": results, "count": len(results)}
    if args.folder:
        out["folder"] = index.jail.display(under) if under is not None else args.folder
    if not results:
        out["note"] = (
            "No document contains these words. Try other words (a synonym, a name, a number), "
            "or find_files to look for a file by its name."
        )
    if note:
        out["index_note"] = note
    return out


def _read(index: DocumentIndex, args: ReadDocumentArgs) -> dict[str, Any]:
    if index.jail is None:
        raise ToolError(
            "No folders are set up for the assistant to read.",
            "Ask the user to add one in Settings.",
        )
    path = index.jail.resolve(args.path)
    shown = index.jail.display(path)
    if path.is_dir():
        raise ToolError(f"{shown} is a folder.", "Give a document inside it.")
    passages, why = index.passages_of(str(path))
    if not passages:
        raise ToolError(f"{shown} cannot be read as a document: {why}.")
    places = list(dict.fromkeys(p for p, _ in passages))
    wanted = " ".join((args.where or "").split()).casefold()
    if wanted:
        chosen = [t for p, t in passages if p.casefold() == wanted]
        chosen = chosen or [t for p, t in passages if p.casefold().startswith(wanted)]
        if not chosen:
            raise ToolError(
                f"{shown} has no part {args.where!r}.",
                f"Its parts: {', '.join(places[:30])}{' …' if len(places) > 30 else ''}.",
            )
    else:
        chosen = [t for _, t in passages]
    text = "\n".join(chosen)
    out: dict[str, Any] = {
        "path": outside(shown),
        "where": outside(neutralize(args.where or places[0])),
        "text": outside(neutralize(text[: args.max_chars])),
    }
    if len(text) > args.max_chars:
        out["truncated"] = True
        out["note"] = f"Only the first {args.max_chars:,} of {len(text):,} characters are shown."
    if not wanted and len(places) > 1:
        out["parts"] = [outside(neutralize(p)) for p in places[:30]]
    return out


SOURCE_TOOLS = frozenset({"search_documents", "read_document"})
"""The tools whose results name documents the window offers to open."""


def named_documents(name: str, output: str, limit: int = 5) -> list[str]:
    """The files a search_documents or read_document result names, as it shows them
    (``~/Documents/lease.pdf``), each once, best first, at most ``limit``; none for another
    tool or a result that is not the tool's JSON (an error, a clipped one)."""
    if name not in SOURCE_TOOLS:
        return []
    try:
        result = json.loads(output)
    except (ValueError, TypeError):
        return []
    if not isinstance(result, dict):
        return []
    found = [result.get("path")] + [
        r.get("file") for r in result.get("results") or [] if isinstance(r, dict)
    ]
    return list(dict.fromkeys(f for f in found if isinstance(f, str) and f))[:limit]


def openable(shown: str, roots: Sequence[Path]) -> Path | None:
    """The real path of the document ``shown`` names (``~`` expanded, links resolved) when it
    is a file inside the allowed folders ``roots``, else None: a result is outside content,
    and only the person's own documents are ever opened from it."""
    if not roots or not shown:
        return None
    jail = FolderJail(roots)
    real = Path(os.path.realpath(os.path.expanduser(shown)))
    return real if jail.contains(real) and real.is_file() else None
