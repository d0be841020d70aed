"""Carry out: run one allowed tool call on its own thread, within its time, as an Outcome."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from botpsy_desktop.agent.events import GateDecision
from botpsy_desktop.agent.tools import Tool
from botpsy_desktop.core.errors import BotpsyError
from botpsy_desktop.core.text import readable


class Outcome:
    """What one tool call produced: the observation text for the model and how it ended."""

    def __init__(self, ok: bool, output: str, decision: GateDecision, duration: float = 0.0):
        self.ok = ok
        self.output = output
        self.decision = decision
        self.duration = duration
        self.arguments: dict[str, Any] | None = None  # set when the user edited them
        self.value: Any = None  # what the tool returned, when it ran
        self.ran = False  # the tool was called (its output is untrusted data)
        self.decided_by = ""
        self.summary = ""  # a change that ran, in plain words
        self.action_id: int | None = None  # its audit entry
        self.undo = ""  # what undoing it would do
        self.untrusted = True  # its output may hold content from outside (Tool.untrusted_output)


def tool_family(tool: Tool) -> str:
    """The adapter a tool comes from (``botpsy_desktop.adapters.weather...`` -> ``weather``)."""
    parts = str(getattr(tool.handler, "__module__", "") or "").split(".")
    if len(parts) > 2 and parts[:2] == ["botpsy_desktop", "adapters"]:
        return parts[2]
    return ""


def tool_timeout(tool: Tool, default_s: float, overrides: Mapping[str, float]) -> tuple[float, str]:
    """Takes a tool, agent.tool_timeout_s and agent.tool_timeouts; gives the seconds it may
    run and the setting that says so: its own entry, else its adapter's, else the default."""
    for key in (tool.name, tool_family(tool)):
        if key and key in overrides:
            return overrides[key], f"agent.tool_timeouts.{key}"
    return default_s, "agent.tool_timeout_s"


def run_with_timeout(
    fn: Callable[[], Any],
    timeout: float,
    setting: str,
    name: str,
    verdict: GateDecision,
    cancel: threading.Event | None = None,
    stop: threading.Event | None = None,
) -> Outcome:
    """Run a tool on its own thread; give up after ``timeout`` s or as soon as ``cancel`` is set.

    Takes the call (``fn``), its time and the setting that gave it (named in the message), the
    tool's name and the gate's decision; gives an Outcome that has ``ran`` set: ``ok`` with the
    value and its text, or the error, or the words for a call given up on.

    Giving up sets ``stop`` (the call's CallContext.stop): a tool doing long work checks it and
    ends there. A thread cannot be killed, so one that does not check it finishes in the
    background; whatever it returns or raises then is dropped, never reported or applied a
    second time.
    """
    result: dict[str, Any] = {}
    lock = threading.Lock()
    done = threading.Event()
    abandoned = False

    def target() -> None:
        try:
            value: dict[str, Any] = {"value": fn()}
        except BotpsyError as exc:
            value = {"error": str(exc)}
        except Exception as exc:  # an adapter bug must not take the session down
            value = {"error": f"{name} failed: {type(exc).__name__}: {exc}"}
        with lock:
            if not abandoned:
                result.update(value)
            done.set()

    cancel = cancel or threading.Event()
    started = time.perf_counter()
    deadline = time.monotonic() + timeout
    worker = threading.Thread(target=target, name=f"tool-{name}", daemon=True)
    worker.start()
    while not done.is_set() and not cancel.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            break
        done.wait(min(left, 0.02))  # Stop is noticed within 20 ms
    with lock:
        finished = done.is_set()
        abandoned = not finished
    if abandoned and stop is not None:
        stop.set()
    duration = time.perf_counter() - started
    if abandoned:
        if cancel.is_set():
            message = (
                f"The user stopped the request while {name} was running ({duration:.1f} s); "
                "its result, if it still comes, is ignored. It may still complete in the "
                "background: check before trying it again."
            )
        else:
            message = (
                f"{name} did not finish within {timeout:g} s ({setting}) and was abandoned; "
                "its result, if it still comes, is ignored. It may still complete in the "
                "background: tell the user it did not answer in time, and check before "
                "trying it again."
            )
        outcome = Outcome(False, message, verdict, duration)
        outcome.ran = True
        return outcome
    # a file name that is not UTF-8 reaches the model, the store and the screen as "caf\xe9"
    if "error" in result:
        outcome = Outcome(False, readable(str(result["error"])), verdict, duration)
    else:
        outcome = Outcome(True, readable(render(result.get("value"))), verdict, duration)
        outcome.value = result.get("value")
    outcome.ran = True
    return outcome


def render(value: Any) -> str:
    """A tool's value as the text the model reads: a string as it is, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
