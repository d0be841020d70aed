"""What both sides of the bench share (the app's process and the engine worker's): the requests,
small result types, medians and ratios, and resident memory, without importing the engine's
process handling, the settings or pydantic, so the worker's memory stays the engine's own."""

from __future__ import annotations

import math
import os
import platform
import statistics
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MiB = 2**20

REQUESTS = (
    "What is on my calendar today?",
    "Find my tax PDFs from 2025.",
    "Set a timer for ten minutes.",
    "What is the weather in Lyon tomorrow?",
    "Play some jazz.",
    "List the files in my Documents folder.",
)


@dataclass(frozen=True)
class RawStep:
    """The raw context's decode step the worker took between two of the app's pieces, and the
    app's time for the piece before (NaN for the first), both measured in the worker."""

    seconds: float
    app_seconds: float = math.nan


@dataclass(frozen=True)
class OwnCpu:
    """The worker's CPU time over a generation outside llama.cpp's decode and sampling calls
    (from the first piece of text to the end) and the tokens decoded meanwhile (raw.py)."""

    seconds: float
    tokens: int
    wall_seconds: float = math.nan
    padded: int = 0  # one-token decodes made to last the pace asked (raw.py _NativeTime)


def _status_kib(field_name: str, pid: int | str = "self") -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def rss_bytes() -> int:
    """Resident memory now (Linux); elsewhere the peak, which is what the OS reports."""
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else peak_rss_bytes()


def peak_rss_bytes() -> int:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if platform.system() == "Darwin" else peak * 1024)


def median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def ratio(a: float, b: float) -> float:
    return a / b if b and math.isfinite(a) and math.isfinite(b) else math.nan


# -- pages two processes share -------------------------------------------------------------
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_PRESENT = 1 << 63
_FILE_OR_SHARED = 1 << 61


def _file_pages(pid: int | str) -> set[tuple[str, int]]:
    """The pages of mapped files resident in a process, as (file, page index in the file):
    the same file page resident in two processes is one page of memory (the page cache's).

    Read from /proc/PID/maps and /proc/PID/pagemap; the "present" and "file page" bits are
    readable without privileges (the physical frame numbers, which are not, are not needed).
    A private page of a file mapping that was written to is no longer the file's and is left
    out, as the anonymous memory it is."""
    pages: set[tuple[str, int]] = set()
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
        regions = [line.split(maxsplit=5) for line in maps]
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for fields in regions:
            if len(fields) < 6 or not fields[5].strip().startswith("/"):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            first = int(fields[2], 16) // _PAGE
            n = (end - start) // _PAGE
            pagemap.seek(start // _PAGE * 8)
            data = pagemap.read(n * 8)
            name = fields[5].strip()
            for i, (entry,) in enumerate(struct.iter_unpack("<Q", data)):
                if entry & _PRESENT and entry & _FILE_OR_SHARED:
                    pages.add((name, first + i))
    return pages


def shared_file_bytes(pids: Iterable[int | str]) -> int:
    """Bytes of file pages (shared libraries, mostly) resident in more than one of ``pids``
    at once: what adding their resident sizes counts twice. 0 where it cannot be read (no
    /proc, or no permission to read another process's page map)."""
    seen: set[tuple[str, int]] = set()
    twice: set[tuple[str, int]] = set()
    try:
        for pid in pids:
            pages = _file_pages(pid)
            twice |= seen & pages
            seen |= pages
    except OSError:
        return 0
    return len(twice) * _PAGE
