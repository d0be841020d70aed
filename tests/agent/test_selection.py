"""Tool selection: the domains a request means in many languages, chit-chat offered no domain,
the conversation's domains kept (its calls and its text), a set that grows when the model needs
more (a tool outside it, or an unknown name that points to a domain), canonical order, a damaged
model file detected."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from botpsy_desktop.agent.events import Answer, Token, ToolResult
from botpsy_desktop.agent.selection import RequestTools, ToolSelector, fold
from botpsy_desktop.agent.selection_model import (
    BUCKETS,
    ModelError,
    SelectionModel,
    features,
    model_path,
    shipped_model,
)
from botpsy_desktop.agent.tools import Effect, Tool, ToolRegistry, make_tool
from botpsy_desktop.app import build_app
from botpsy_desktop.eval.sandbox import sandbox_tools
from botpsy_desktop.llm.engines.replay import ReplayBackend
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


# The computer itself (written for this test, not the training phrases): its sound, do not
# disturb, appearance, brightness, battery and state, opening files, pages and apps, locking.
DEVICE = [
    ("en", "turn the laptop's sound down a notch", "set_volume"),
    ("en", "how much battery is left on this thing?", "battery_status"),
    ("en", "lock my screen", "lock_screen"),
    ("fr", "active le mode ne pas déranger jusqu'à midi", "set_do_not_disturb"),
    ("fr", "mets l'ordinateur en thème sombre", "set_appearance"),
    ("de", "ist auf der Festplatte noch genug Platz?", "system_status"),
    ("de", "starte den Taschenrechner", "start_app"),
    ("es", "baja el brillo de la pantalla", "set_brightness"),
    ("it", "togli l'audio al computer", "mute_sound"),
    ("pt", "abre o site da prefeitura no navegador", "open_web_address"),
    ("ja", "画面を暗くして", "set_brightness"),
    ("zh", "电脑还剩多少电量？", "battery_status"),  # noqa: RUF001
    ("ko", "소리를 헤드폰으로 돌려줘", "choose_sound_output"),
    ("ru", "включи тёмную тему", "set_appearance"),
    ("hi", "बैटरी कितनी बची है?", "battery_status"),
]


@pytest.mark.parametrize(("language", "text", "tool"), DEVICE)
def test_a_request_about_the_computer_is_offered_the_device_tools(
    language: str, text: str, tool: str
) -> None:
    selector = ToolSelector(app_tools())
    # the model knows the domain and names it: not offered only as a tool server's unknown
    # domain when the request is unsure, nor found by its tools' names
    assert "device" in selector.modelled and "device" not in selector.server_words
    assert selector.scores(text)["device"] >= selector.offer_at, (language, text)
    choice = selector.choose(text)
    assert not choice.everything and "device" in choice.domains, (language, text, choice.reason)
    assert tool in choice.names


def test_music_stays_music_beside_the_device_domain() -> None:
    # the music domain keeps its requests: playing, and the player's own volume
    for text in ("Play something by Nina Simone", "mets l'album de Daft Punk", "nächstes Lied"):
        found = domains(text)
        assert found != "everything" and "music" in found, (text, found)
        assert "device" not in found, (text, found)
    # the computer's sound is the device's; a bare "quieter" may mean either, so both are fine
    assert {"device"} <= set(domains("set the computer's volume to 20 percent"))
    found = domains("pause the song and mute the computer")
    assert found != "everything" and {"music", "device"} <= found


# Questions about what the person's own papers say (issue 38): search_documents is a files
# tool, so each must be offered the files domain (written for this test, in several languages).
DOCUMENTS = [
    ("en", "find the invoice from the plumber"),
    ("en", "when does my lease end?"),
    pytest.param(
        "en",
        "what did the insurer say about the windscreen?",
        marks=pytest.mark.xfail(
            reason="read as a mail (email 0.18, files 0.03) by the model with the device domain; "
            "in a request, a call of search_documents or an answer that says it cannot search "
            "the files brings the files domain (agent/selection.py)",
            strict=True,
        ),
    ),
    ("en", "what does my contract say about the notice period?"),
    ("de", "wann endet mein Mietvertrag?"),
    ("fr", "trouve la facture du plombier"),
    ("es", "busca la factura del fontanero"),
    ("it", "quando scade il mio contratto d'affitto?"),
    ("pt", "cadê a nota fiscal do encanador?"),
    ("ja", "配管工の請求書を探して"),
    ("zh", "我的租约什么时候到期？"),  # noqa: RUF001
    ("ru", "найди счёт от сантехника"),
]


@pytest.mark.parametrize(("language", "text"), DOCUMENTS)
def test_a_question_about_ones_documents_is_offered_search_documents(
    language: str, text: str
) -> None:
    choice = ToolSelector(app_tools()).choose(text)
    assert "search_documents" in choice.names, (language, text, choice.reason)


def test_several_domains_are_all_offered() -> None:
    found = domains("Check the weather in Lyon and email it to tom@example.com")
    assert found != "everything" and {"weather", "email"} <= found
    assert domains("Lis Documents/plan.txt et mets-le dans mon calendrier") >= {"files", "calendar"}
    # a meeting with an address is still a meeting (the address alone does not decide)
    meeting = domains("set up a meeting with dana@example.com on Tuesday at 3")
    assert meeting != "everything" and "calendar" in meeting


@pytest.mark.parametrize(
    "text",
    ["Say hello in one short sentence.", "What's 12 times 9?", "Tell me a joke.", "thanks!"],
)
def test_chit_chat_is_never_offered_every_tool(text: str) -> None:
    # about a third of chit-chat reads as needing no tool (docs/EVALUATION.md 2.4); the rest
    # gets some domains' tools, never all of them
    choice = ToolSelector(app_tools()).choose(text)
    assert not choice.everything and len(choice.domains) < 6, choice.reason


@pytest.mark.parametrize(
    "text", ["how are you?", "hi", "good morning", "Bonjour !", "Erzähl mir einen Witz"]
)
def test_chit_chat_that_reads_as_such_is_offered_no_domains_tools(text: str) -> None:
    choice = ToolSelector(app_tools()).choose(text)
    assert not choice.everything and choice.domains == (), choice.reason
    assert choice.names == tuple(t.name for t in app_tools() if not t.domain)


def test_a_request_the_old_word_lists_missed_gets_its_domain() -> None:
    # days and times named no domain for the word lists: everything was offered
    choice = ToolSelector(app_tools()).choose("cancel yoga on thursday")
    assert not choice.everything and "calendar" in choice.domains, choice.reason


def test_the_conversations_domains_stay_offered() -> None:
    # a follow-up that names nothing keeps the domain of what the conversation used
    assert "alarms" in domains("actually cancel it", ["set_alarm"])
    # and one that names another domain gets both
    assert domains("and email that to ana@example.org", ["get_weather"]) >= {"weather", "email"}


def test_a_follow_up_keeps_the_domain_of_what_was_said_without_a_call() -> None:
    selector = ToolSelector(app_tools())
    history = [
        {"role": "user", "content": "did Sarah reply about the venue?"},
        {"role": "assistant", "content": "Yes, Sarah wrote this morning: is Tuesday fine?"},
    ]
    assert "email" in selector.choose("answer her that Tuesday works", history).domains
    history = [
        {"role": "user", "content": "what's on Friday?"},
        {"role": "assistant", "content": "A dentist appointment at 10:00 and lunch at 12:30."},
    ]
    assert "calendar" in selector.choose("move it to 11", history).domains
    # only the last exchange counts: an old topic does not stay forever
    older = [
        {"role": "user", "content": "play some jazz"},
        {"role": "assistant", "content": "Playing jazz.", "tool_calls": [_call("play_music")]},
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "You're welcome!"},
        {"role": "user", "content": "what's 2 and 2"},
        {"role": "assistant", "content": "4."},
    ]
    without_jazz = older[2:]
    assert selector.choose("and 3 and 3?", older) == selector.choose("and 3 and 3?", without_jazz)


def _call(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": {}}}


def test_words_match_whole_words_or_stems_not_inside_words() -> None:
    assert fold("Réveille-MOI à 7h") == "reveille-moi a 7h"
    assert "calendar" in domains("Bin ich morgen frei?")  # German "Bin" is no file bin
    assert "music" in domains("play everything by them")


def test_typos_and_scripts_without_spaces_share_features() -> None:
    # a typo changes a few character n-grams, not the whole word
    right, typo = set(features("remind me tomorrow")), set(features("remnid me tomorow"))
    assert len(right & typo) >= len(right) // 3
    # Chinese and Japanese need no word splitting: n-grams of the characters
    assert {"c天气", "c天"} <= set(features("明天天气怎么样"))
    # Devanagari vowel signs stay in the word
    assert "wमौसम" in features("मौसम कैसा है")


def test_a_damaged_model_file_is_detected_and_every_tool_offered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = model_path().read_bytes()
    broken = data[:100] + bytes([data[100] ^ 0xFF]) + data[101:]
    with pytest.raises(ModelError):
        SelectionModel.from_bytes(broken)
    with pytest.raises(ModelError):
        SelectionModel.from_bytes(data[: len(data) // 2])
    assert SelectionModel.from_bytes(data) == shipped_model()

    # the app offers every tool rather than guess without the model
    def damaged() -> SelectionModel:
        return SelectionModel.from_bytes(broken)

    monkeypatch.setattr("botpsy_desktop.agent.selection.shipped_model", damaged)
    choice = ToolSelector(app_tools()).choose("weather in Paris?")
    assert choice.everything and "damaged" in choice.reason


def test_the_order_is_canonical_and_identical_sets_give_identical_schemas() -> None:
    selector = ToolSelector(app_tools())
    a = selector.choose("email the weather forecast to ana@example.org")
    b = selector.offer({"weather", "email"})
    assert set(a.domains) == {"weather", "email"}
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
    weather = selector.choose("Will it rain in Oslo tomorrow?")
    assert "define_word" in weather.names and "create_issue" not in weather.names
    assert "github" in selector.choose("open an issue about the crash").domains
    assert "github" in selector.choose("anything new on GitHub?").domains


def unsure_model(chat: float, wide: float | None = None) -> SelectionModel:
    """A model that scores every text alike: each domain below the offer threshold (weather,
    music and calendar a little likelier), "none" at ``chat``; ``wide``: its threshold for the
    domains also offered when unsure (none: a model file without one)."""
    classes = ("alarms", "calendar", "device", "email", "files", "music", "weather", "none")
    p = {"calendar": 0.03, "music": 0.06, "weather": 0.08, "none": chat}
    bias = tuple(math.log(q / (1 - q)) for q in (p.get(c, 0.01) for c in classes))
    table = bytes(BUCKETS * len(classes))
    thresholds = {"offer": 0.1, "chat": 0.6} | ({"wide": wide} if wide is not None else {})
    return SelectionModel(classes, bias, (1.0,) * len(classes), table, thresholds)


def test_an_unsure_request_gets_every_tool_and_chit_chat_none() -> None:
    def create_issue(args: Args) -> str:
        return "opened"

    registry = ToolRegistry(list(app_tools()))
    registry.register(make_tool(create_issue, effects={Effect.READ}, domain="github"))
    unsure = ToolSelector(registry, model=unsure_model(0.3)).choose("hmm, that one")
    assert unsure.everything and "create_issue" in unsure.names and "unsure" in unsure.reason
    chat = ToolSelector(registry, model=unsure_model(0.9)).choose("hmm, that one")
    assert chat.domains == () and not chat.everything


def test_an_unsure_request_gets_the_domains_with_a_fair_chance() -> None:
    # the model's own "wide" threshold: the domains scoring it or more, not every tool
    registry = app_tools()
    wide = ToolSelector(registry, model=unsure_model(0.3, wide=0.05)).choose("hmm, that one")
    assert wide.domains == ("music", "weather") and not wide.everything
    assert "get_weather" in wide.names and "play_music" in wide.names
    assert "set_alarm" not in wide.names and "unsure" in wide.reason
    # no domain with a fair chance: every tool, as before
    none = ToolSelector(registry, model=unsure_model(0.3, wide=0.5)).choose("hmm, that one")
    assert none.everything

    # a tool server's domain is unknown to the model, so an unsure request gets it too
    def create_issue(args: Args) -> str:
        return "opened"

    with_server = ToolRegistry(list(app_tools()))
    with_server.register(make_tool(create_issue, effects={Effect.READ}, domain="github"))
    unsure = ToolSelector(with_server, model=unsure_model(0.3, wide=0.05)).choose("hmm")
    assert unsure.domains == ("github", "music", "weather"), unsure
    # a conversation to go by decides instead
    kept = ToolSelector(registry, model=unsure_model(0.3, wide=0.05)).choose(
        "hmm, that one", ["set_alarm"]
    )
    assert kept.domains == ("alarms",), kept


def test_the_set_grows_when_the_model_calls_a_tool_outside_it() -> None:
    registry = app_tools()
    offer = RequestTools(registry, ToolSelector(registry), "weather in Paris?")
    first = [s["function"]["name"] for s in offer.schemas()]
    assert first == ["get_weather"]
    assert offer.called(["get_weather", "no_such_tool"]) == []
    assert offer.schemas() is offer.schemas()  # unchanged: the same list every step
    assert offer.called(["list_alarms"]) == ["alarms"]
    grown = [s["function"]["name"] for s in offer.schemas()]
    assert "list_alarms" in grown and "set_alarm" in grown and "get_weather" in grown
    # a name that is no tool but points to a domain brings that domain (a second chance)
    assert offer.called(["send_mail"]) == ["email"]
    assert "send_email" in [s["function"]["name"] for s in offer.schemas()]
    everything = RequestTools(registry, None, "weather in Paris?")
    assert len(everything.schemas()) == len(registry)


class ToolsSeen(ReplayBackend):
    """A replay that notes the tool names each model turn was offered."""

    def __init__(
        self, turns: Sequence[str], wanted: Mapping[int, tuple[str, ...]] | None = None
    ) -> None:
        super().__init__(turns)
        self.offered: list[list[str]] = []
        self.may_call: list[frozenset[str] | None] = []
        self.wanted = dict(wanted or {})  # per model turn: the engine's stats.wanted_tools

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]],
        *,
        enable_thinking: bool,
        cancel: Any = None,
        may_call: Any = None,
    ) -> Iterator[TextPiece | PromptProgress | Completion]:
        turn = len(self.offered)
        self.offered.append([t["function"]["name"] for t in tools])
        self.may_call.append(None if may_call is None else frozenset(may_call))
        for item in super().complete(
            messages, tools, enable_thinking=enable_thinking, cancel=cancel
        ):
            if isinstance(item, Completion) and turn in self.wanted:
                item.stats.wanted_tools = self.wanted[turn]
            yield item


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
        # the domain the model reached for comes at the end of the list, so the prompt's
        # start (and the model's saved state of it) stays the same (llm/engines/engine.py TOOLS)
        assert backend.offered[2] == alarms + files

        app.config.agent.tool_selection = False
        backend = ToolsSeen(["Hello."])
        list(app.session(backend).run("What alarms are set?"))
        assert backend.offered == [names]
    finally:
        app.close()


def test_with_every_tool_listed_the_requests_choice_is_what_the_model_may_call(
    tmp_path: Path,
) -> None:
    """agent.prompt_tools all: every request's prompt lists the same tools (the app's own, in
    the registry's order); the request's choice is passed as what the model may call. When the
    engine says the grammar made the model write another name than the one it began (a tool
    outside the choice), that call is not carried out: its domain is offered and the step asked
    again, on the same prompt."""
    app = build_app(tmp_path)
    try:
        app.config.agent.prompt_tools = "all"
        everything = [s["function"]["name"] for s in app.registry.schemas()]
        # the engine's report, as llm/engines/engine.py makes it: the model began "now_pl...",
        # the grammar (weather's tools only) made it write get_weather
        backend = ToolsSeen(
            [call("get_weather"), call("now_playing"), "Nothing is playing.", "Done."],
            wanted={0: ("now_playing",)},
        )
        session = app.session(backend)
        events = list(session.run("What's the weather in Paris?"))
        assert isinstance(events[-1], Answer)
        results = [e for e in events if isinstance(e, ToolResult)]
        assert [r.name for r in results] == ["now_playing"]  # the forced call did not run
        assert backend.offered[0] == backend.offered[1] == backend.offered[2] == everything
        first, second = backend.may_call[0], backend.may_call[1]
        assert first is not None and second is not None
        assert "get_weather" in first and "now_playing" not in first
        assert "now_playing" in second and first < second
        # a request about another domain: the same prompt, its own choice to call
        list(session.run("Set a timer for 10 minutes"))
        assert backend.offered[3] == everything
        timer = backend.may_call[3]
        assert timer is not None and "set_alarm" in timer and timer < set(everything)
        # per-request lists (a small context, or the setting): the choice is the prompt
        app.config.agent.prompt_tools = "selected"
        backend = ToolsSeen(["Mild."])
        list(app.session(backend).run("What's the weather in Paris?"))
        assert backend.may_call == [None] and "get_weather" in backend.offered[0]
        assert len(backend.offered[0]) < len(everything)
    finally:
        app.close()


def test_no_domain_tool_unlike_a_declared_one() -> None:
    tool = Tool("thing", "Do a thing.", Args, lambda a: None, frozenset({Effect.READ}))
    assert tool.domain == ""
    assert next(t for t in app_tools() if t.name == "get_weather").domain == "weather"


def test_an_unknown_tool_name_gets_its_domain_offered_and_the_model_tries_again(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path)
    try:
        backend = ToolsSeen([call("play_song"), call("now_playing"), "Nothing is playing."])
        events = list(app.session(backend).run("What's the weather in Paris?"))
        assert isinstance(events[-1], Answer)
        results = [e for e in events if isinstance(e, ToolResult)]
        assert [r.name for r in results] == ["play_song", "now_playing"]
        assert not results[0].ok and results[1].ok
        assert "now_playing" not in backend.offered[0]
        assert "now_playing" in backend.offered[1] and "get_weather" in backend.offered[1]
    finally:
        app.close()


def test_an_answer_that_says_a_tool_is_missing_is_asked_again_with_its_domain(
    tmp_path: Path,
) -> None:
    app = build_app(tmp_path)
    try:
        backend = ToolsSeen(
            [
                "Sorry, I can't play music or songs here. I only have the weather tool.",
                call("now_playing"),
                "Nothing is playing.",
            ]
        )
        session = app.session(backend)
        events = list(session.run("What's the weather in Paris?"))
        assert isinstance(events[-1], Answer) and events[-1].text == "Nothing is playing."
        shown = "".join(e.text for e in events if isinstance(e, Token))
        assert "can't" not in shown  # the first try was never shown
        assert "now_playing" not in backend.offered[0] and "now_playing" in backend.offered[1]
        stored = [m for m in app.store.messages(session.conversation_id) if m["role"] != "tool"]
        assert "can't" not in json.dumps(stored)  # nor stored
        # an ordinary answer is shown in full, and asked once only
        backend = ToolsSeen(["It is sunny. 21 degrees, light wind."])
        events = list(app.session(backend).run("What's the weather in Paris?"))
        assert "".join(e.text for e in events if isinstance(e, Token)).startswith("It is sunny.")
        assert len(backend.offered) == 1
    finally:
        app.close()


def test_a_short_server_name_names_its_domain() -> None:
    # "git" (three letters) is the server's name: a request that says it gets the server's tools
    def git_status(args: Args) -> str:
        return "clean"

    registry = ToolRegistry(list(app_tools()))
    registry.register(make_tool(git_status, effects={Effect.READ}, domain="git"))
    choice = ToolSelector(registry).choose("what changed in my git repository since yesterday?")
    assert "git" in choice.domains and "git_status" in choice.names, choice


def test_a_conversation_keeps_its_set_and_grows_it_in_the_canonical_order() -> None:
    """The conversation's set (agent.conversation_tools): a request gets it, grown by its own
    domains in the canonical order, chit-chat and a request within it get it unchanged, and
    past the cap a request gets a fresh set of its own."""
    registry = app_tools()
    selector = ToolSelector(registry)
    first = selector.choose("What's the weather in Paris?")
    kept = selector.prompt_order(first)
    assert kept == ["weather"]
    timer = selector.for_conversation(selector.choose("Set a timer for 10 minutes"), kept, 40)
    order = selector.prompt_order(timer)
    assert order[0] == "weather" and "alarms" in order[1:], timer
    before = selector.schemas(selector.kept(kept))
    after = selector.schemas(timer)
    assert after[: len(before)] == before  # the old list is the new one's start
    # nothing new: the same set, the same list (so the prompt's start stays cached)
    again = selector.for_conversation(selector.choose("Weather in Lyon tomorrow?"), order, 40)
    assert selector.schemas(again) == after
    hello = selector.for_conversation(selector.choose("good morning!"), order, 40)
    assert selector.schemas(hello) == after
    # in the canonical order: a domain that sorts before the kept ones goes before them
    files = selector.for_conversation(selector.choose("List my Documents folder"), kept, 40)
    assert selector.prompt_order(files)[0] == "files" and "weather" in files.domains
    # past the cap: the request's own set, a fresh one
    mail = selector.choose("Any new mail from Marco?")  # email alone (calendar 0.08 < 0.1)
    assert selector.prompt_order(mail) == ["email"]
    fresh = selector.for_conversation(mail, order, selector.size(order))
    assert fresh.names == mail.names and "fresh set" in fresh.reason
    # cap 0: no conversation set at all
    assert selector.for_conversation(mail, order, 0) == mail
    # the loop's request tools do the same, and a warm-up (no text) gets the kept set as it is
    offer = RequestTools(registry, selector, "Set a timer for 10 minutes", kept=kept, cap=40)
    assert offer.order == order
    assert RequestTools(registry, selector, None, kept=order, cap=40).schemas() == after


def test_the_loop_keeps_the_conversations_set_for_its_next_request(tmp_path: Path) -> None:
    app = build_app(tmp_path)
    try:
        app.config.agent.conversation_tools = 40
        backend = ToolsSeen(["Mild.", "Done.", "Sunny."])
        session = app.session(backend)
        for text in (
            "Weather in Paris?",
            "Set a timer for 10 minutes",
            "Weather in Lyon tomorrow?",
        ):
            list(session.run(text))
        first, second, third = backend.offered
        assert second[: len(first)] == first and len(second) > len(first)
        assert third == second  # the set kept, the prompt's start unchanged
        assert session.warm_tools() == [
            s for n in third for s in app.registry.schemas() if s["function"]["name"] == n
        ]
        stored = app.store.setting(session.conversation_id, "tool_domains")
        assert stored[0] == "weather" and "alarms" in stored
        app.config.agent.conversation_tools = 0  # each request its own set, as before
        backend = ToolsSeen(["Mild.", "Done."])
        session = app.session(backend)
        for text in ("What's the weather in Paris?", "Set a timer for 10 minutes"):
            list(session.run(text))
        assert app.store.setting(session.conversation_id, "tool_domains") is None
        assert backend.offered[1] == list(
            ToolSelector(app.registry).choose("Set a timer for 10 minutes", ["get_weather"]).names
        )
    finally:
        app.close()


# --- the people domain (address books) ----------------------------------------------------
# Held out: written after the people words (agent/selection.py LEXICONS) and not used to
# change them; one request per kind in each language of the selection set.
PEOPLE = [
    # (language, request, the domains it must be offered)
    ("en", "email Ana that I'm running late", {"email", "people"}),
    ("en", "invite Marco to the budget review on Friday", {"calendar", "people"}),
    ("en", "when is Mum's birthday?", {"people"}),
    ("en", "what's Tom's phone number?", {"people"}),
    ("fr", "envoie un mail à Ana pour dire que je suis en retard", {"email", "people"}),
    ("fr", "quand est l'anniversaire de maman ?", {"people"}),
    ("fr", "donne-moi le numéro de téléphone de Léa", {"people"}),
    ("de", "schreib Ana eine E-Mail, dass ich später komme", {"email", "people"}),
    ("de", "wann hat Mama Geburtstag?", {"people"}),
    ("de", "such Jonas in meinen Kontakten", {"people"}),
    ("es", "manda un correo a Ana diciendo que llego tarde", {"email", "people"}),
    ("es", "¿cuándo es el cumpleaños de mamá?", {"people"}),
    ("es", "busca el teléfono de Marco", {"people"}),
    ("it", "manda una email ad Ana che sono in ritardo", {"email", "people"}),
    ("it", "quando è il compleanno della mamma?", {"people"}),
    ("it", "cerca Marco nella rubrica", {"people"}),
    ("pt", "manda um email para a Ana a dizer que estou atrasado", {"email", "people"}),
    ("pt", "quando é o aniversário da mãe?", {"people"}),
    ("pt", "qual é o telefone do Marco nos contatos?", {"people"}),
    ("ru", "напиши Ане письмо, что я опаздываю", {"email", "people"}),
    ("ru", "когда у мамы день рождения?", {"people"}),  # noqa: RUF001
    ("ru", "найди телефон Марко", {"people"}),
    ("hi", "अना को ईमेल भेजो कि मुझे देर हो रही है", {"email", "people"}),
    ("hi", "माँ का जन्मदिन कब है?", {"people"}),
    ("hi", "मेरे संपर्क में मार्को को ढूंढो", {"people"}),
    ("ko", "아나에게 늦는다고 이메일 보내줘", {"email", "people"}),
    ("ko", "엄마 생일이 언제야?", {"people"}),
    ("ko", "마르코 전화번호 알려줘", {"people"}),
    ("ja", "アナに遅れるとメールして", {"email", "people"}),
    ("ja", "母の誕生日はいつ？", {"people"}),  # noqa: RUF001
    ("ja", "マルコの電話番号を教えて", {"people"}),
    ("zh", "给安娜发邮件说我要迟到了", {"email", "people"}),
    ("zh", "妈妈的生日是哪天？", {"people"}),  # noqa: RUF001
    ("zh", "帮我在联系人里找马可", {"people"}),
]


@cache
def people_tools() -> ToolRegistry:
    """The app's tools for a profile with a mail account and an address book (build_app)."""
    import tempfile

    from botpsy_desktop.core.accounts import AccountBook, MailAccount

    home = Path(tempfile.mkdtemp(prefix="botpsy-people-"))
    (home / "config").mkdir()
    book = home / "contacts.vcf"
    book.write_text("BEGIN:VCARD\r\nVERSION:3.0\r\nFN:Ana\r\nEND:VCARD\r\n", encoding="utf-8")
    config = {"music": {"folders": [], "player": "none"}, "contacts": {"files": [str(book)]}}
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    AccountBook(home / "config" / "accounts.json").add(
        MailAccount(
            name="box", address="me@example.org", username="me", imap_host="127.0.0.1",
            smtp_host="127.0.0.1",
        )
    )  # fmt: skip
    app = build_app(home)
    try:
        return app.registry
    finally:
        app.close()


@pytest.mark.parametrize(("language", "text", "wanted"), PEOPLE)
def test_a_request_about_a_person_is_offered_the_address_book(
    language: str, text: str, wanted: set[str]
) -> None:
    choice = ToolSelector(people_tools()).choose(text)
    found = set(people_tools().names()) if choice.everything else set(choice.domains)
    got = {t.domain for t in people_tools() if t.name in choice.names} | found
    assert wanted <= got, (language, text, choice.reason)
    assert "find_contact" in choice.names and "contact_details" in choice.names


def test_the_address_book_comes_with_mail_and_calendar_only() -> None:
    selector = ToolSelector(people_tools())
    assert "people" not in selector.modelled and "people" in selector.lexicons
    for _, text, _ in SINGLE:
        choice = selector.choose(text)
        if choice.everything:
            continue
        served = bool({"email", "calendar"} & set(choice.domains))
        assert ("people" in choice.domains) == served, (text, choice.domains)
    assert "find_contact" not in selector.choose("Set a timer for the oven").names
