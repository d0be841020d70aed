"""A fork server for the kill test: children stream replies through the real loop and store.

Run as ``python kill_child.py DB ROOT``. It imports the app once, then for each line
``fork CONVERSATION`` read from stdin forks a child (a few milliseconds instead of a fresh
interpreter per kill) and answers ``forked PID CONVERSATION``. Each child opens the store (which
recovers what dead children left pending), then sends requests in that conversation forever
through the real AgentSession: replayed model output, paced like a model streaming, with a real
read-only files tool call in every other request. It reports on stdout, one line per
``os.write`` (atomic on a pipe), what the parent checks after killing it:

* ``ack PID CONV TEXT``: the first event of a request arrived, so its user message is committed;
* ``seen PID CONV ROW N``: the visible reply of the current model turn (message row ROW) has N
  characters and the last piece ended a sentence (so that much must be on disk);
* ``answer PID CONV TEXT``: the request with user message TEXT was answered.

The children ignore nothing: the parent ends them with SIGKILL. ``quit`` ends the server.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.events import Answer, Token, TurnFinished
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import build_gate
from botpsy_desktop.core.config import Config
from botpsy_desktop.core.tools import ToolRegistry
from botpsy_desktop.llm.backend import BackendWrapper, Message
from botpsy_desktop.llm.engines.replay import ReplayBackend
from botpsy_desktop.llm.types import Completion, PromptProgress, TextPiece

PIECE_DELAY_S = 0.002
"""Pause per streamed word: a fast model (about 500 words/s), so many kills land mid-stream."""

TOOL_TURN = (
    "<tool_call>\n<function=list_folder>\n<parameter=path>\n.\n</parameter>\n</function>\n"
    "</tool_call>"
)
ANSWERS = (
    "The folder holds three files. The largest one is a report from March. "
    "Nothing in it looks out of place, and nothing was changed. Ask me to open any of them!",
    "<think>\nThe user wants a short summary. I should keep it brief.\n</think>\n"
    "Here is the summary you asked for. First, the meeting moved to Tuesday. "
    "Second, the budget was approved: every line of it. Third, nothing else is pending.",
)


def script(requests: int) -> list[str]:
    """Raw completions for ``requests`` requests: tool call + answer, then a plain answer."""
    turns: list[str] = []
    for i in range(requests):
        if i % 2 == 0:
            turns += [TOOL_TURN, ANSWERS[0]]
        else:
            turns.append(ANSWERS[1])
    return turns


class PacedReplay(BackendWrapper[ReplayBackend]):
    """The replay backend streaming at a model's pace (a pause per piece)."""

    def __init__(self, inner: ReplayBackend, delay_s: float) -> None:
        super().__init__(inner)
        self.delay_s = delay_s

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: threading.Event | None = None,
        may_call: Collection[str] | None = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        for item in self.inner.complete(
            messages, tools, enable_thinking=enable_thinking, cancel=cancel, may_call=may_call
        ):
            if isinstance(item, TextPiece):
                time.sleep(self.delay_s)
            yield item

    def close(self) -> None:
        self.inner.close()


def say(*parts: object) -> None:
    os.write(1, (" ".join(str(p) for p in parts) + "\n").encode())


def child(db: Path, root: Path, conversation: str) -> None:
    pid = os.getpid()
    store = ConversationStore(db)
    backend = PacedReplay(ReplayBackend(script(1000)), PIECE_DELAY_S)
    session = AgentSession(
        backend,  # type: ignore[arg-type]
        ToolRegistry(files_tools([root])),
        build_gate(Config()),
        store,
        LoopSettings(system_prompt="You are a test.", max_steps=4),
        conversation,
    )
    for i in range(1000):
        text = f"u {pid} {i}"
        acked = False
        seen = ""
        for event in session.run(text):
            if not acked:
                say("ack", pid, conversation, text)
                acked = True
            if isinstance(event, Token):
                seen += event.text
                if event.text.rstrip()[-1:] in (".", "!", "?", ":"):
                    say("seen", pid, conversation, session._reply.row, len(seen))
            elif isinstance(event, TurnFinished):
                seen = ""  # the next model turn streams into a new row
            elif isinstance(event, Answer):
                say("answer", pid, conversation, text)


def main() -> None:
    db, root = Path(sys.argv[1]), Path(sys.argv[2])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # killed children are reaped at once
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] == "quit":
            break
        if words[0] == "fork":
            pid = os.fork()
            if pid == 0:
                try:
                    child(db, root, words[1])
                finally:
                    os._exit(0)
            say("forked", pid, words[1])


if __name__ == "__main__":
    main()
