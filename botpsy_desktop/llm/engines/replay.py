"""A backend that replays recorded raw model completions: deterministic runs with no model."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from botpsy_desktop.core.errors import ModelError
from botpsy_desktop.llm.backend import Message
from botpsy_desktop.llm.language.prompt import PromptRenderer
from botpsy_desktop.llm.types import Completion, GenerationStats, PromptProgress, TextPiece

_PIECE = re.compile(r"<[^<>\s]{1,40}>|\s*\S+|\s+")
BYTES_PER_TOKEN = 3.0
"""A replay has no tokenizer: its prompt size is estimated as UTF-8 bytes / 3 of the ChatML
rendering, a little above what Qwen's tokenizer counts for English prose and JSON schemas."""


class ReplayBackend:
    """Replays a JSON list of raw completions, one per model turn, through the real pipeline.

    Each entry is the text the model would have generated (thinking, prose, tool calls in its own
    format), or an object ``{"text": ..., "thinking_open": bool}`` where ``thinking_open`` says the
    prompt ended inside an open ``<think>`` block, and ``prompt_progress`` lists recorded
    prompt evaluation progress, ``[done, total, elapsed_s]`` each: replayed before the text, each
    at its recorded time (a Stop meanwhile cancels the turn, as it stops a real evaluation).
    Text is streamed in word-sized pieces so the streaming path is exercised too.

    ``n_ctx`` is the context window the agent loop budgets prompts against (None: no limit);
    ``count_tokens`` then estimates a prompt's size (see ``BYTES_PER_TOKEN``), or counts it
    exactly when ``count_text`` (a tokenizer's counting function) is given.
    """

    def __init__(
        self,
        turns: Sequence[str | Mapping[str, Any]],
        *,
        source: str = "replay",
        n_ctx: int | None = None,
        count_text: Callable[[str], int] | None = None,
    ) -> None:
        self._turns: list[tuple[str, bool]] = []
        self._progress: dict[int, list[PromptProgress]] = {}
        for i, turn in enumerate(turns):
            if isinstance(turn, str):
                self._turns.append((turn, False))
            elif isinstance(turn, Mapping) and isinstance(turn.get("text"), str):
                self._turns.append((turn["text"], bool(turn.get("thinking_open", False))))
                try:
                    self._progress[i] = [
                        PromptProgress(int(d), int(t), float(e))
                        for d, t, e in turn.get("prompt_progress") or []
                    ]
                except (TypeError, ValueError) as exc:
                    raise ModelError(
                        f"Replay entry {i + 1} in {source} has a malformed prompt_progress.",
                        "Write it as a list of [done, total, elapsed_s] triples.",
                    ) from exc
            else:
                raise ModelError(
                    f"Replay entry {i + 1} in {source} is neither a string nor an object "
                    'with a "text" string.',
                    "Write the replay file as a JSON list of completion strings.",
                )
        self._source = source
        self._next = 0
        self._n_ctx = n_ctx
        self._count_text = count_text
        self._renderer: PromptRenderer | None = None
        self.prompts: list[list[dict[str, Any]]] = []

    @classmethod
    def from_file(cls, path: str | Path, *, n_ctx: int | None = None) -> ReplayBackend:
        file = Path(path)
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ModelError(
                f"Replay file {file} does not exist.", "Check the path given to --replay."
            ) from exc
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelError(
                f"Replay file {file} is not valid JSON ({exc}).",
                "It must be a JSON list of raw model completions, one per model turn.",
            ) from exc
        if not isinstance(data, list):
            raise ModelError(
                f"Replay file {file} holds a JSON {type(data).__name__}, not a list.",
                "It must be a JSON list of raw model completions, one per model turn.",
            )
        return cls(data, source=str(file), n_ctx=n_ctx)

    @property
    def name(self) -> str:
        return f"replay:{self._source}"

    @property
    def n_ctx(self) -> int | None:
        return self._n_ctx

    def count_tokens(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
    ) -> int:
        """The prompt's size: the ChatML tool prompt, estimated or counted with ``count_text``."""
        if self._renderer is None:
            self._renderer = PromptRenderer(None)
        text = self._renderer.render(messages, tools, enable_thinking=enable_thinking).text
        if self._count_text is not None:
            return self._count_text(text)
        return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)

    @property
    def remaining(self) -> int:
        return len(self._turns) - self._next

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        may_call: Collection[str] | None = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        self.prompts.append([dict(m) for m in messages])
        if self._next >= len(self._turns):
            raise ModelError(
                f"The replay {self._source} has no completion for model turn {self._next + 1} "
                f"(it holds {len(self._turns)}).",
                "Add the missing completion to the replay file.",
            )
        text, thinking_open = self._turns[self._next]
        progress = self._progress.get(self._next, [])
        self._next += 1
        stats = GenerationStats()  # a replay has no tokenizer: token counts stay 0
        started = time.monotonic()
        for item in progress:
            while time.monotonic() - started < item.elapsed_s:
                if cancel is not None and cancel.wait(0.01):
                    break
                if cancel is None:
                    time.sleep(0.01)
            if cancel is not None and cancel.is_set():
                yield Completion("", "cancelled", stats, thinking_open)
                return
            yield item
        emitted: list[str] = []
        for piece in _PIECE.findall(text):
            if cancel is not None and cancel.is_set():
                return_text = "".join(emitted)
                yield Completion(return_text, "cancelled", stats, thinking_open)
                return
            emitted.append(piece)
            yield TextPiece(piece, thinking_open)
        yield Completion(text, "stop", stats, thinking_open)

    def close(self) -> None:
        """Nothing to release."""
