"""The select-tools step (agent/steps/tools_offered.py): the tools a request is offered, the
set its conversation keeps, and whether the prompt lists every tool of the app's own."""

from __future__ import annotations

from pathlib import Path

from botpsy_desktop.agent.selection import ToolSelector
from botpsy_desktop.agent.steps.settings import LoopSettings
from botpsy_desktop.agent.steps.tools_offered import (
    TOOL_SET_KEY,
    keep_tool_set,
    offer_tools,
    stable_prompt,
)
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.eval.sandbox import sandbox_tools
from botpsy_desktop.llm.engines.replay import ReplayBackend


def test_a_conversation_keeps_its_tool_set_and_a_request_grows_it(tmp_path: Path) -> None:
    registry = sandbox_tools()
    selector = ToolSelector(registry)
    store = ConversationStore(tmp_path / "db.sqlite3")
    conversation = store.create()
    settings = LoopSettings(system_prompt="You help.", conversation_tools=60)
    backend = ReplayBackend([])

    def offer(text: str | None) -> list[str]:
        tools = offer_tools(store, conversation, registry, selector, backend, settings, text, [])
        keep_tool_set(store, conversation, tools, settings, selecting=True)
        return tools.order

    weather = offer("weather in Paris tomorrow?")
    assert "weather" in weather and store.setting(conversation, TOOL_SET_KEY) == weather
    grown = offer("set an alarm for 7")
    assert grown[: len(weather)] == weather and "alarms" in grown
    assert offer(None) == grown  # what the app warms: the set as it stands

    alone = store.create()
    own = LoopSettings(system_prompt="You help.", conversation_tools=0)
    tools = offer_tools(store, alone, registry, selector, backend, own, "weather in Paris?", [])
    keep_tool_set(store, alone, tools, own, selecting=True)
    assert store.setting(alone, TOOL_SET_KEY) is None  # each request its own set


def test_the_prompt_lists_every_tool_when_they_take_little_of_the_context() -> None:
    registry = sandbox_tools()
    base = {"system_prompt": "You help."}
    big, small, unknown = (
        ReplayBackend([], n_ctx=65536),
        ReplayBackend([], n_ctx=2048),
        ReplayBackend([]),
    )
    assert stable_prompt(big, registry, LoopSettings(**base))  # "auto"
    assert not stable_prompt(small, registry, LoopSettings(**base))
    assert not stable_prompt(unknown, registry, LoopSettings(**base))
    assert stable_prompt(small, registry, LoopSettings(**base, prompt_tools="all"))
    assert not stable_prompt(big, registry, LoopSettings(**base, prompt_tools="selected"))
    assert not stable_prompt(big, registry, LoopSettings(**base, select_tools=False))
