"""Rotating log files with secrets and message bodies removed by a filter on the handler."""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botpsy_desktop.agent.events import (
    Answer,
    ApprovalNeeded,
    ContextTrimmed,
    Error,
    Event,
    ToolResult,
    ToolStarted,
    TurnFinished,
)
from botpsy_desktop.agent.hardening import REDACTED, known_secrets, redact
from botpsy_desktop.core.config import LogSettings
from botpsy_desktop.core.paths import Paths

LOG_NAME = "botpsy.log"
FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"
QUIET_LOGGERS = ("httpx", "httpcore", "urllib3", "caldav", "keyring", "apscheduler")
"""Libraries that log whole URLs or protocol traffic at INFO/DEBUG, or a line at each run of a
periodic job (APScheduler: the alarm poller every few seconds): only their warnings."""

log = logging.getLogger("botpsy_desktop")

# Credentials in HTTP traffic and URLs, whatever logs them (a library, an exception text).
_HEADER_RE = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|cookie|set-cookie)(['\"]?\s*[:=]\s*['\"]?)"
    r"([^\r\n'\"]+)"
)
_BEARER_RE = re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}")
_URL_CREDENTIALS_RE = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@")
_QUERY_SECRET_RE = re.compile(
    r"(?i)([?&](?:access_token|token|key|api_key|apikey|password|secret|sig)=)[^&\s]+"
)


def log_folder(paths: Paths) -> Path:
    """Where the log files are: ``logs`` in the app's data folder."""
    return paths.data_dir / "logs"


class Body:
    """Marks a log argument as message text (a request, a reply, tool output, a mail body).

    ``log.info("answer: %s", Body(text))`` writes the text only when ``logs.include_bodies`` is
    on; otherwise only its length. Secrets are removed either way.
    """

    __slots__ = ("text",)

    def __init__(self, text: object) -> None:
        self.text = text if isinstance(text, str) else json.dumps(text, default=str)

    def __str__(self) -> str:  # what a handler without the filter would write: nothing
        return f"[{len(self.text)} characters not logged]"


class RedactionFilter(logging.Filter):
    """Rewrites every record before it is written: bodies hidden, secrets removed.

    It sits on the handler, so whatever logs (our code, a library, an exception traceback) goes
    through it. ``secrets`` gives the secret values known at the time (passwords the keyring
    session handled, tokens from the environment); patterns catch private keys, access tokens,
    ``password=...``, Authorization headers and credentials in URLs.
    """

    def __init__(
        self, secrets: Callable[[], Iterable[str]] = tuple, *, include_bodies: bool = False
    ) -> None:
        super().__init__()
        self.secrets = secrets
        self.include_bodies = include_bodies

    def clean(self, text: str) -> str:
        values = known_secrets(self.secrets())
        text = redact(text, values)
        text = _HEADER_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
        text = _BEARER_RE.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
        text = _URL_CREDENTIALS_RE.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
        return _QUERY_SECRET_RE.sub(lambda m: f"{m.group(1)}{REDACTED}", text)

    def _arg(self, value: Any) -> Any:
        if isinstance(value, Body):
            return value.text if self.include_bodies else str(value)
        return value

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, dict):
            record.args = {k: self._arg(v) for k, v in args.items()}
        elif isinstance(args, tuple):
            record.args = tuple(self._arg(a) for a in args)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a bad format string: keep what can be kept
            message = f"{record.msg} {record.args}"
        record.msg, record.args = self.clean(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        record.exc_info = None
        if record.exc_text:
            record.exc_text = self.clean(record.exc_text)
        if record.stack_info:
            record.stack_info = self.clean(record.stack_info)
        return True


@dataclass
class LogHandle:
    """The installed log file handler; ``close`` removes it from the root logger."""

    handler: logging.handlers.RotatingFileHandler
    file: Path
    root_level: int = logging.WARNING

    def close(self) -> None:
        """Stop logging to the file (the process goes on; its root level is as before)."""
        _remove(self.handler)
        with _lock:
            if not _installed:
                logging.getLogger().setLevel(self.root_level)


_lock = threading.Lock()
_installed: list[logging.Handler] = []


def _remove(handler: logging.Handler) -> None:
    with _lock:
        if handler in _installed:
            _installed.remove(handler)
        logging.getLogger().removeHandler(handler)
        handler.close()


def setup_logging(
    paths: Paths,
    settings: LogSettings,
    secrets: Callable[[], Iterable[str]] = tuple,
    *,
    face: str = "cli",
) -> LogHandle:
    """Log to ``logs/botpsy.log`` in the data folder, rotating at ``settings.max_bytes``.

    Called once by each entry point (the CLI, the window); a second call replaces the first
    handler (another profile in the same process). Files are readable only by the user.
    """
    folder = log_folder(paths)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    file = folder / LOG_NAME
    handler = logging.handlers.RotatingFileHandler(
        file, maxBytes=settings.max_bytes, backupCount=settings.backups, encoding="utf-8"
    )
    if os.name == "posix":
        os.chmod(file, 0o600)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RedactionFilter(secrets, include_bodies=settings.include_bodies))
    handler.setLevel(settings.level)
    root = logging.getLogger()
    root_level = root.level
    with _lock:
        for old in list(_installed):
            root.removeHandler(old)
            old.close()
        _installed[:] = [handler]
        root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > handler.level:
        root.setLevel(handler.level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    from botpsy_desktop import __version__

    log.info("botpsy-desktop %s started (%s, pid %d)", __version__, face, os.getpid())
    return LogHandle(handler, file, root_level)


def log_files(paths: Paths) -> list[Path]:
    """The log file and its rotated copies, newest first."""
    folder = log_folder(paths)
    files = [folder / LOG_NAME, *sorted(folder.glob(f"{LOG_NAME}.*"), key=_rotation)]
    return [f for f in files if f.is_file()]


def _rotation(path: Path) -> int:
    suffix = path.name.rsplit(".", 1)[-1]
    return int(suffix) if suffix.isdigit() else 0


def logged_events(events: Iterator[Event], conversation_id: str, text: str) -> Iterator[Event]:
    """Pass a request's events through, logging each: what ran and how, bodies as ``Body``."""
    log.info("request in %s: %s", conversation_id, Body(text))
    for event in events:
        if isinstance(event, ToolStarted):
            log.info("tool %s called: %s", event.name, Body(event.arguments))
        elif isinstance(event, ApprovalNeeded):
            log.info("approval asked for %s", event.request.tool)
        elif isinstance(event, ToolResult):
            log.info(
                "tool %s %s (%s%s) in %.2f s: %s",
                event.name,
                "ok" if event.ok else "failed",
                event.decision,
                f", by {event.decided_by}" if event.decided_by else "",
                event.duration_s,
                Body(event.output),
            )
        elif isinstance(event, TurnFinished):
            s = event.stats
            log.info(
                "model turn %d: %s, prompt %d tokens (%d evaluated), %d generated, %.2f s",
                event.step,
                event.finish_reason,
                s.prompt_tokens,
                s.evaluated_tokens,
                s.completion_tokens,
                s.prefill_s + s.decode_s,
            )
        elif isinstance(event, ContextTrimmed):
            log.info(
                "context: %d turns (%d messages) left out, %d results clipped, prompt %d of %d",
                event.dropped_turns,
                event.dropped_messages,
                len(event.clipped),
                event.prompt_tokens,
                event.n_ctx,
            )
        elif isinstance(event, Answer):
            log.info("answer after %d turns: %s", event.steps, Body(event.text))
            if event.note:
                log.info("the answer describes an action no tool carried out")
        elif isinstance(event, Error):
            level = logging.INFO if event.kind == "cancelled" else logging.WARNING
            log.log(level, "request ended (%s): %s", event.kind, event.message)
        yield event
