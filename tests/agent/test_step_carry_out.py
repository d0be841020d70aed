"""The carry-out step (agent/steps/carry_out.py): a tool call on its own thread, within its time."""

from __future__ import annotations

import threading
from pathlib import Path

from botpsy_desktop.adapters.files import files_tools
from botpsy_desktop.agent.steps.carry_out import render, run_with_timeout, tool_timeout
from botpsy_desktop.core.errors import ToolError


def test_a_value_comes_back_as_the_text_the_model_reads() -> None:
    outcome = run_with_timeout(lambda: {"temp": 21, "city": "Zürich"}, 5, "s", "weather", "allowed")
    assert outcome.ok and outcome.ran
    assert outcome.output == '{"temp":21,"city":"Zürich"}' and outcome.value["temp"] == 21
    assert render("plain") == "plain"


def test_an_error_is_the_tools_message_and_a_bug_names_the_tool() -> None:
    def fails() -> None:
        raise ToolError("The disk is on fire.")

    def bug() -> None:
        raise ValueError("bad index")

    failed = run_with_timeout(fails, 5, "s", "boom", "allowed")
    assert not failed.ok and failed.ran and "The disk is on fire." in failed.output
    buggy = run_with_timeout(bug, 5, "s", "boom", "approved")
    assert buggy.output == "boom failed: ValueError: bad index" and buggy.decision == "approved"


def test_a_call_past_its_time_is_given_up_and_told_to_stop() -> None:
    release, stop = threading.Event(), threading.Event()
    outcome = run_with_timeout(
        lambda: release.wait(5), 0.01, "agent.tool_timeouts.slow", "slow", "allowed", stop=stop
    )
    release.set()
    assert not outcome.ok and outcome.ran and stop.is_set()
    assert "did not finish within 0.01 s (agent.tool_timeouts.slow)" in outcome.output


def test_a_stop_gives_up_at_once() -> None:
    release, cancel = threading.Event(), threading.Event()
    cancel.set()
    outcome = run_with_timeout(lambda: release.wait(5), 30, "s", "slow", "allowed", cancel)
    release.set()
    assert (
        not outcome.ok and "The user stopped the request while slow was running" in outcome.output
    )


def test_the_tools_own_time_beats_its_adapters_which_beats_the_default(tmp_path: Path) -> None:
    tool = next(iter(files_tools([tmp_path])))
    assert tool_timeout(tool, 30, {}) == (30, "agent.tool_timeout_s")
    assert tool_timeout(tool, 30, {"files": 5}) == (5, "agent.tool_timeouts.files")
    assert tool_timeout(tool, 30, {"files": 5, tool.name: 2}) == (
        2,
        f"agent.tool_timeouts.{tool.name}",
    )
