"""The messages between the app and its engine worker (worker.py, engine_process.py).

The transport is ``multiprocessing.connection`` over a local socket (a Unix socket, a named pipe
on Windows), authenticated with a random key: each message is one pickled small dataclass. It was
chosen by measurement over hand-written framing: a streamed item costs a few tens of microseconds
there and back (docs/PERFORMANCE.md), against tens of milliseconds per token of decoding. Both ends
are this package, started from the same interpreter, so pickle is safe here; nothing else can
connect without the key.

The protocol is narrow: a ``Call`` names a method of the engine from a fixed list (``METHODS``),
with plain arguments; a streaming call answers with ``Item`` messages carrying whatever the
engine yields (TextPiece, Completion, progress reports, any later item type, unchanged) and ends
with ``Done``; ``Cancel`` stops the current call within a token. One call runs at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from botpsy_desktop.llm.types import TextPiece

CRASH_FILE_ENV = "BOTPSY_ENGINE_CRASH_FILE"
"""Test-only: when this environment variable names a file and the file exists while the worker
streams an answer, the worker deletes the file and crashes itself the way the file says:
``SIGSEGV`` (a real null-pointer read in native code), ``SIGKILL``, ``SIGABRT``, ``exit``
(status 3) or ``hang`` (it stops sending and never honours a cancel), optionally followed by
how many items to stream first (default 1; 0: crash before the first item reaches the app, as
a crash in the first decode does) and ``tokens`` (count only pieces of text, not the prompt's
progress). It lets tests crash the engine mid-answer with a real signal, once, in a
long-running process. The app never sets it."""

STREAMING = frozenset({"complete", "generate", "bench_stream", "bench_complete", "bench_own"})
"""Methods whose items are streamed (``Item`` messages, then ``Done``)."""

METHODS = frozenset(
    {
        *STREAMING,
        "count_tokens",
        "warm",
        "probe",
        "tokenize",
        "prompt_tokens",
        "conversation_head",
        "prefix_text",
        "reset",
        "flush_prefix_writes",
        "state",
        "bench",
    }
)
"""The engine methods a caller may ask the worker for (``state`` reads a few counters)."""


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker loads: sent first, right after the connection is made."""

    model_path: str
    settings: dict[str, Any]  # ModelSettings, as plain data
    model_sha256: str | None = None
    prefix_cache_dir: str | None = None
    prefix_cache_mb: int = 0
    layout: str | None = (
        None  # the weight layout (llm/models/cpu_layout.py); None: the engine's choice
    )
    device: str | None = None  # where it runs (llm/models/gpu_device.py); None: model.device


@dataclass(frozen=True)
class Ready:
    """The model is loaded: what the app may know about it without asking again."""

    pid: int
    name: str
    n_ctx: int
    info: Any  # GGUFInfo
    memory_estimate: dict[str, int]
    hybrid: bool
    template: str | None
    bos_token: str
    eos_token: str
    layout: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)  # gpu_device.Placement.describe()


@dataclass(frozen=True)
class Call:
    id: int
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Cancel:
    id: int


@dataclass(frozen=True)
class Item:
    """One item a streaming call yielded, passed on as it is."""

    id: int
    value: Any


PIECE = "p"
"""A streamed ``TextPiece`` travels as the plain tuple ``(PIECE, call id, text,
started_in_thinking)`` instead of an ``Item`` around a ``TextPiece``: one goes per token, and two
dataclasses cost several times a tuple's pickling and unpickling (docs/PERFORMANCE.md, "The app's
own work per token"). ``piece_message`` and ``item_of`` are the two ends."""


def piece_message(call_id: int, text: str, started_in_thinking: bool) -> tuple[str, int, str, bool]:
    """A streamed piece of text in its compact form (``PIECE``)."""
    return (PIECE, call_id, text, started_in_thinking)


def item_of(message: Any) -> Any:
    """The message as the protocol's dataclasses: a compact piece becomes its ``Item``."""
    if type(message) is tuple and message[:1] == (PIECE,):
        return Item(message[1], TextPiece(message[2], message[3]))
    return message


@dataclass(frozen=True)
class Done:
    """A call ended; ``value`` is what a non-streaming call returned."""

    id: int
    value: Any = None


@dataclass(frozen=True)
class Failed:
    """A call (or the load) raised: the error's class name, sentence and hint."""

    id: int
    kind: str
    message: str
    hint: str = ""


@dataclass(frozen=True)
class LogLine:
    """A log record of the worker, logged by the app as its own."""

    level: int
    logger: str
    message: str


@dataclass(frozen=True)
class Shutdown:
    """Finish pending disk writes and exit."""
