"""The action log: every file change the assistant made, one JSON line each, with its inverse."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import current_call_context

UNDO_TOOL = "undo_last_file_change"


class ActionLog:
    """An append-only JSON-lines file in the app's data folder.

    Each change is one line: ``id``, ``time``, ``tool``, ``arguments``, ``result`` and ``inverse``
    (what undoes it, or null with ``not_reversible`` saying why), and ``call``: the id of the
    tool call that made it (as its audit entry names it), when one runs. An undo is a line of
    its own naming the change it reversed in ``undoes``; nothing is ever rewritten.
    """

    def __init__(self, file: Path, clock: Callable[[], datetime]) -> None:
        self.file = file
        self._clock = clock
        self._lock = threading.Lock()

    def ready(self) -> None:
        """Make sure the log can be written before a change is made (else nothing is changed)."""
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(self.file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.close(fd)
        except OSError as exc:
            raise ToolError(
                f"The action log {self.file} cannot be written ({exc.strerror or exc}); "
                "nothing was changed, because a change that is not logged could not be undone.",
                "Ask the user to check the app's data folder.",
            ) from exc

    def record(
        self,
        tool: str,
        arguments: dict[str, Any],
        result: dict[str, Any],
        inverse: dict[str, Any] | None,
        *,
        not_reversible: str | None = None,
        undoes: str | None = None,
    ) -> dict[str, Any]:
        """Append one entry and return it (with its new ``id``)."""
        entry: dict[str, Any] = {
            "id": uuid.uuid4().hex[:16],
            "time": self._clock().astimezone().isoformat(timespec="seconds"),
            "tool": tool,
            "arguments": arguments,
            "result": result,
            "inverse": inverse,
        }
        if inverse is None and not_reversible:
            entry["not_reversible"] = not_reversible
        if undoes is not None:
            entry["undoes"] = undoes
        call = current_call_context().call_id
        if call:
            entry["call"] = call
        line = json.dumps(entry, ensure_ascii=False, sort_keys=True) + "\n"
        with self._lock:
            self._append(line.encode("utf-8", "backslashreplace"))
        return entry

    def _append(self, data: bytes) -> None:
        """Append one line whole or not at all: a write cut short (a full disk) is cut off
        again, and a line left torn by an older crash is ended first, so it can never swallow
        the entry written after it."""
        fd = os.open(self.file, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            if start > 0 and os.pread(fd, 1, start - 1) != b"\n":
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)

    def entries(self) -> list[dict[str, Any]]:
        """Every readable entry, oldest first (a damaged line is skipped, not fatal)."""
        try:
            text = self.file.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolError(f"The action log {self.file} cannot be read: {exc}.") from exc
        found: list[dict[str, Any]] = []
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                found.append(entry)
        return found

    def of_call(self, call_id: str, tool: str) -> dict[str, Any] | None:
        """The change tool call ``call_id`` of ``tool`` made (None: none is logged)."""
        found: dict[str, Any] | None = next(
            (
                e
                for e in reversed(self.entries())
                if call_id and e.get("call") == call_id and e.get("tool") == tool
            ),
            None,
        )
        return found

    def not_undone(self) -> list[dict[str, Any]]:
        """Changes that no undo has reversed yet, newest first."""
        entries = self.entries()
        undone = {e["undoes"] for e in entries if isinstance(e.get("undoes"), str)}
        return [
            e for e in reversed(entries) if e.get("tool") != UNDO_TOOL and e["id"] not in undone
        ]
