"""Tool selection: the domains a request names in six languages, the fallback to every tool, the
conversation's domains kept, a set that grows when the model needs more, canonical order."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from botpsy_desktop.agent.events import Answer, ToolResult
from botpsy_desktop.agent.selection import RequestTools, ToolSelector, fold
from botpsy_desktop.agent.tools import Effect, Tool, ToolRegistry, make_tool
from botpsy_desktop.app import build_app
from botpsy_desktop.eval.sandbox import sandbox_tools
from botpsy_desktop.llm.replay import ReplayBackend
from botpsy_desktop.llm.types import Completion, PromptProgress, TextPiece


@cache
def app_tools() -> ToolRegistry:
    """Every tool the app has (the evaluation sandbox's profile has a mail account too)."""
    return sandbox_tools()


def domains(text: str, used: Sequence[str] = ()) -> set[str] | str:
    choice = ToolSelector(app_tools()).choose(text, used)
    return "everything" if choice.everything else set(choice.domains)


# Requests written for this test (not the evaluation cases), one domain each.
SINGLE = [
    # files
    ("en", "Show me the spreadsheets in my Documents folder", "files"),
    ("fr", "Supprime le fichier brouillon-v2.odt", "files"),
    ("de", "Welche Dateien liegen im Ordner Projekte?", "files"),
    ("es", "Busca el archivo del contrato", "files"),
    ("ja", "デスクトップのファイルを整理して", "files"),
    ("zh", "把这个文件夹里的照片列出来", "files"),
    # calendar and tasks
    ("en", "Schedule a meeting with the landlord next Tuesday", "calendar"),
    ("fr", "Ajoute un rendez-vous chez le médecin jeudi", "calendar"),
    ("de", "Trag einen Termin beim Friseur ein", "calendar"),
    ("es", "Añade una tarea: comprar pan", "calendar"),
    ("ja", "来週の予定を教えて", "calendar"),
    ("zh", "我下周有什么日程？", "calendar"),  # noqa: RUF001
    # alarms, timers, reminders, routines
    ("en", "Set a timer for the oven", "alarms"),
    ("fr", "Mets un réveil à 6h", "alarms"),
    ("de", "Erinnere mich an den Müll", "alarms"),
    ("es", "Ponme una alarma a las seis", "alarms"),
    ("ja", "タイマーを5分にセットして", "alarms"),
    ("zh", "明早七点叫醒我", "alarms"),
    # email
    ("en", "Any new mail from the school?", "email"),
    ("fr", "Lis mes derniers courriels", "email"),
    ("de", "Schreib eine E-Mail an Jonas", "email"),
    ("es", "¿Tengo correos nuevos?", "email"),
    ("ja", "新しいメールはある？", "email"),  # noqa: RUF001
    ("zh", "帮我查一下新邮件", "email"),
    # weather
    ("en", "Is it going to snow this weekend?", "weather"),
    ("fr", "Va-t-il pleuvoir à Nantes ?", "weather"),
    ("de", "Regnet es morgen in Hamburg?", "weather"),
    ("es", "¿Va a llover en Sevilla?", "weather"),
    ("ja", "大阪の天気は？", "weather"),  # noqa: RUF001
    ("zh", "上海今天下雨吗？", "weather"),  # noqa: RUF001
    # music
    ("en", "Play something by Nina Simone", "music"),
    ("fr", "Joue ma musique préférée", "music"),
    ("de", "Spiel etwas Musik von Bach", "music"),
    ("es", "Reproduce música tranquila", "music"),
    ("ja", "音楽をかけて", "music"),
    ("zh", "播放一首周杰伦的歌", "music"),
]


@pytest.mark.parametrize(("language", "text", "domain"), SINGLE)
def test_a_request_is_offered_its_domain(language: str, text: str, domain: str) -> None:
    found = domains(text)
    assert found != "everything" and domain in found, (language, text, found)


def test_several_domains_are_all_offered() -> None:
    found = domains("Check the weather in Lyon and email it to tom@example.com")
    assert found == {"weather", "email"}
    assert domains("Lis Documents/plan.txt et mets-le dans mon calendrier") >= {"files", "calendar"}


@pytest.mark.parametrize(
    "text", ["Say hello in one short sentence.", "What's 12 times 9?", "cancel yoga on thursday"]
)
def test_a_request_that_names_no_domain_gets_every_tool(text: str) -> None:
    choice = ToolSelector(app_tools()).choose(text)
    assert choice.everything and choice.names == tuple(app_tools().names())


def test_the_conversations_domains_stay_offered() -> None:
    # a follow-up that names nothing keeps the domain of what the conversation used
    assert domains("actually cancel it", ["set_alarm"]) == {"alarms"}
    # and one that names another domain gets both
    assert domains("and email that to ana@example.org", ["get_weather"]) == {"weather", "email"}


def test_words_match_whole_words_or_stems_not_inside_words() -> None:
    assert fold("Réveille-MOI à 7h") == "reveille-moi a 7h"
    assert domains("Bin ich morgen frei?") == {"calendar"}  # German "Bin" is no file bin
    assert domains("play everything by them") == {"music"}  # "every" only as a whole word


def test_the_order_is_canonical_and_identical_sets_give_identical_schemas() -> None:
    selector = ToolSelector(app_tools())
    a = selector.choose("email the weather forecast to ana@example.org")
    b = selector.choose("weather? then mail it")
    assert a.names == b.names
    order = app_tools().names()
    assert list(a.names) == [n for n in order if n in a.names]
    assert selector.schemas(a) == selector.schemas(b)


class Args(BaseModel):
    """Do a thing."""


def test_tools_without_a_domain_are_always_offered_and_servers_bring_their_words() -> None:
    def define_word(args: Args) -> str:
        return "a word"

    def create_issue(args: Args) -> str:
        return "opened"

    registry = ToolRegistry(list(app_tools()))
    registry.register(make_tool(define_word, effects={Effect.READ}))
    registry.register(make_tool(create_issue, effects={Effect.READ}, domain="github"))
    selector = ToolSelector(registry)
    weather = selector.choose("weather in Oslo?")
    assert "define_word" in weather.names and "create_issue" not in weather.names
    assert selector.choose("open an issue about the crash").domains == ("github",)
    assert selector.choose("anything new on GitHub?").domains == ("github",)


def test_the_set_grows_when_the_model_calls_a_tool_outside_it() -> None:
    registry = app_tools()
    offer = RequestTools(registry, ToolSelector(registry), "weather in Paris?")
    first = [s["function"]["name"] for s in offer.schemas()]
    assert first == ["get_weather"]
    offer.called(["get_weather", "no_such_tool"])
    assert offer.schemas() is offer.schemas()  # unchanged: the same list every step
    offer.called(["list_alarms"])
    grown = [s["function"]["name"] for s in offer.schemas()]
    assert "list_alarms" in grown and "set_alarm" in grown and "get_weather" in grown
    everything = RequestTools(registry, None, "weather in Paris?")
    assert len(everything.schemas()) == len(registry)


class ToolsSeen(ReplayBackend):
    """A replay that notes the tool names each model turn was offered."""

    def __init__(self, turns: Sequence[str]) -> None:
        super().__init__(turns)
        self.offered: list[list[str]] = []

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: Any = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        self.offered.append([t["function"]["name"] for t in tools])
        yield from super().complete(messages, tools, enable_thinking=enable_thinking, cancel=cancel)


def call(function: str) -> str:
    return f"<tool_call>\n<function={function}>\n</function>\n</tool_call>"


def test_the_loop_offers_the_requests_tools_every_step_and_grows_on_demand(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    try:
        names = app.registry.names()
        backend = ToolsSeen([call("list_alarms"), call("list_folder"), "Nothing is set."])
        events = list(app.session(backend).run("What alarms are set?"))
        assert isinstance(events[-1], Answer)
        results = [e for e in events if isinstance(e, ToolResult)]
        assert [r.ok for r in results] == [True, True]  # a registered tool outside the set runs
        alarms = [n for n in names if app.registry.get(n).domain == "alarms"]  # type: ignore[union-attr]
        files = [n for n in names if app.registry.get(n).domain == "files"]  # type: ignore[union-attr]
        assert backend.offered[0] == backend.offered[1] == alarms
        assert backend.offered[2] == [n for n in names if n in alarms + files]

        app.config.agent.tool_selection = False
        backend = ToolsSeen(["Hello."])
        list(app.session(backend).run("What alarms are set?"))
        assert backend.offered == [names]
    finally:
        app.close()


def test_no_domain_tool_unlike_a_declared_one() -> None:
    tool = Tool("thing", "Do a thing.", Args, lambda a: None, frozenset({Effect.READ}))
    assert tool.domain == ""
    assert next(t for t in app_tools() if t.name == "get_weather").domain == "weather"
