"""Time bounds: a stuck tool or server ends within its timeout (+1 s), Stop ends it at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel, Field

from botpsy_desktop.adapters.email import email_tools, mail_service
from botpsy_desktop.agent.events import Answer, ApprovalNeeded, Error, Event, ToolResult
from botpsy_desktop.agent.loop import AgentSession, LoopSettings
from botpsy_desktop.agent.steps.carry_out import tool_family
from botpsy_desktop.agent.store import ConversationStore
from botpsy_desktop.app import App, build_app
from botpsy_desktop.core.accounts import MailAccount
from botpsy_desktop.core.config import AgentSettings, EmailSettings
from botpsy_desktop.core.secrets import SecretStore
from botpsy_desktop.core.tools import Effect, ToolRegistry, make_tool
from botpsy_desktop.llm.engines.replay import ReplayBackend
from tests.agent.gate_tools import shipped_gate
from tests.helpers.hanging_servers import HangingServer, hanging_server
from tests.helpers.replay import xml_call
from tests.helpers.weather_server import weather_server

SLACK_S = 1.0  # what the issue allows beyond the timeout


def timed_run(session: AgentSession, text: str, **kw: Any) -> tuple[list[Event], float]:
    t0 = time.monotonic()
    events = []
    for event in session.run(text, **kw):
        if isinstance(event, ApprovalNeeded):
            event.request.approve()
        events.append(event)
    return events, time.monotonic() - t0


def result_of(events: list[Event]) -> ToolResult:
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    return result


def answer_of(events: list[Event]) -> str | None:
    return next((e.text for e in events if isinstance(e, Answer)), None)


class HangArgs(BaseModel):
    """Ask a service that never answers."""

    what: str = Field("x", description="Anything")


class Hanging:
    """A tool whose handler blocks until released, counting its calls and late returns."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.returned = 0

    def hang(self, args: HangArgs) -> str:
        self.calls += 1
        self.release.wait()
        self.returned += 1
        return "LATE RESULT"


@pytest.fixture
def hanging() -> Iterator[Hanging]:
    h = Hanging()
    yield h
    h.release.set()


def hang_session(
    tmp_path: Path, hanging: Hanging, turns: list[str], **settings: Any
) -> AgentSession:
    registry = ToolRegistry([make_tool(hanging.hang, effects=[Effect.READ], name="hang")])
    opts: dict[str, Any] = {"system_prompt": "You are a test.", "max_steps": 3}
    opts.update(settings)
    store = ConversationStore(tmp_path / "db.sqlite3")
    return AgentSession(ReplayBackend(turns), registry, shipped_gate(), store, LoopSettings(**opts))


def test_a_hanging_tool_ends_within_its_timeout_and_the_next_request_works(
    tmp_path: Path, hanging: Hanging
) -> None:
    session = hang_session(
        tmp_path,
        hanging,
        [xml_call("hang"), "It did not answer.", "Fine now."],
        tool_timeout_s=30.0,
        tool_timeouts={"hang": 1.0},
    )
    events, elapsed = timed_run(session, "ask the slow service")
    result = result_of(events)
    assert not result.ok
    assert result.output.startswith(
        "hang did not finish within 1 s (agent.tool_timeouts.hang) and was abandoned"
    )
    assert "check before trying it again" in result.output
    assert answer_of(events) == "It did not answer."
    assert 1.0 <= elapsed < 1.0 + SLACK_S, elapsed

    events2, elapsed2 = timed_run(session, "and now?")
    assert answer_of(events2) == "Fine now." and elapsed2 < SLACK_S  # not behind the abandoned call
    # the abandoned call returns later: its result is dropped, never reported or stored
    hanging.release.set()
    deadline = time.monotonic() + 2
    while hanging.returned == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert hanging.calls == 1 and hanging.returned == 1
    stored = json.dumps(session.store.messages(session.conversation_id))
    assert "LATE RESULT" not in stored
    print(f"\nhanging tool, timeout 1 s: request ended after {elapsed:.2f} s")


def test_stop_during_a_hanging_tool_returns_at_once(tmp_path: Path, hanging: Hanging) -> None:
    session = hang_session(tmp_path, hanging, [xml_call("hang"), "never"], tool_timeout_s=30.0)
    cancel = threading.Event()
    events: list[Event] = []
    stopped_at: list[float] = []

    def stop_soon() -> None:
        while hanging.calls == 0:
            time.sleep(0.005)
        time.sleep(0.3)
        stopped_at.append(time.monotonic())
        cancel.set()

    threading.Thread(target=stop_soon, daemon=True).start()
    for event in session.run("ask", cancel=cancel):
        events.append(event)
    latency = time.monotonic() - stopped_at[0]
    result = result_of(events)
    assert not result.ok and result.output.startswith(
        "The user stopped the request while hang was running"
    )
    assert isinstance(events[-1], Error) and events[-1].kind == "cancelled"
    assert latency < 0.5, latency  # at once: the wait polls every 20 ms
    print(f"\nStop during a hanging tool: the run ended {latency * 1000:.0f} ms after Stop")


def test_the_timeout_is_looked_up_by_tool_then_adapter_then_default(tmp_path: Path) -> None:
    app = build_app(tmp_path / "p")
    try:
        weather = app.registry.get("get_weather")
        listing = app.registry.get("list_folder")
        assert weather is not None and listing is not None
        assert tool_family(weather) == "weather" and tool_family(listing) == "files"
        assert AgentSettings().tool_timeouts == {"email": 60.0, "calendar": 60.0}
        app.config.agent.tool_timeouts = {"weather": 4.0, "get_weather": 2.5, "email": 60.0}
        session = app.session(ReplayBackend([]))
        assert session._timeout(weather) == (2.5, "agent.tool_timeouts.get_weather")
        app.config.agent.tool_timeouts = {"weather": 4.0}
        session = app.session(ReplayBackend([]))
        assert session._timeout(weather) == (4.0, "agent.tool_timeouts.weather")
        assert session._timeout(listing) == (30.0, "agent.tool_timeout_s")
    finally:
        app.close()
    with pytest.raises(ValueError, match="must be more than 0"):
        AgentSettings(tool_timeouts={"weather": 0})
    with pytest.raises(ValueError, match="not an adapter or tool name"):
        AgentSettings(tool_timeouts={"the weather": 5})


# --- the weather tool against a server that hangs -------------------------------------------


def weather_app(tmp_path: Path, server: HangingServer, *, tool_s: float, http_s: float) -> App:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {
        "weather": {
            "geocoding_url": f"{server.base}/v1/search",
            "forecast_url": f"{server.base}/v1/forecast",
            "timeout_s": http_s,
            "units": "metric",
        },
        "agent": {"tool_timeouts": {"weather": tool_s}},
        "files": {"roots": [str(tmp_path)]},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return build_app(home)


WEATHER_TURNS = [xml_call("get_weather", place="Paris"), "The weather service is stuck."]


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_a_hanging_weather_server_ends_within_the_tool_timeout(tmp_path: Path, mode: str) -> None:
    # the server accepts and stays silent, or trickles a byte every 0.2 s (no single read
    # ever times out): the tool's own timeout (agent.tool_timeouts.weather) ends the wait
    with weather_server() as real, hanging_server("silent") as server:
        server.mode = "trickle" if mode == "trickle" else "silent"
        app = weather_app(tmp_path, server, tool_s=1.0, http_s=30.0)
        try:
            turns = [*WEATHER_TURNS, xml_call("get_weather", place="Paris"), "Sunny in Paris."]
            session = app.session(ReplayBackend(turns))
            events, elapsed = timed_run(session, "weather in Paris?")
            result = result_of(events)
            assert result.output.startswith(
                "get_weather did not finish within 1 s (agent.tool_timeouts.weather)"
            )
            assert 1.0 <= elapsed < 1.0 + SLACK_S, elapsed
            assert server.connections == 1
            # the server answers again: the next request in the same session works
            server.upstream = ("127.0.0.1", int(real.base.rsplit(":", 1)[1]))
            server.mode = "forward"
            events2, elapsed2 = timed_run(session, "and now?")
            ok = result_of(events2)
            assert ok.ok and "Paris" in ok.output, ok.output
            assert answer_of(events2) == "Sunny in Paris."
        finally:
            app.close()
    print(f"\nweather server {mode}, tool timeout 1 s: {elapsed:.2f} s; next {elapsed2:.2f} s")


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_the_weather_clients_own_timeout_comes_from_the_config(
    tmp_path: Path, mode: Literal["silent", "trickle"]
) -> None:
    # weather.timeout_s bounds each read and, against a trickling server, the whole answer
    with hanging_server(mode) as server:
        app = weather_app(tmp_path, server, tool_s=10.0, http_s=1.0)
        try:
            session = app.session(ReplayBackend(WEATHER_TURNS))
            events, elapsed = timed_run(session, "weather in Paris?")
        finally:
            app.close()
    result = result_of(events)
    assert not result.ok
    assert "did not answer the place search within 1 s" in result.output, result.output
    assert 1.0 <= elapsed < 1.0 + SLACK_S, elapsed
    print(f"\nweather server {mode}, weather.timeout_s 1 s: ended after {elapsed:.2f} s")


# --- the mail tools against an IMAP/SMTP server that accepts and says nothing ----------------


def mail_session(
    tmp_path: Path, port: int, turns: list[str], *, mail_s: float, tool_s: float
) -> AgentSession:
    account = MailAccount.model_validate(
        {
            "name": "home",
            "address": "alice@example.org",
            "username": "alice",
            "imap_host": "127.0.0.1",
            "imap_port": port,
            "imap_security": "none",
            "smtp_host": "127.0.0.1",
            "smtp_port": port,
            "smtp_security": "none",
        }
    )
    secrets = SecretStore()
    secrets.set("home", "secret", session_only=True)
    service = mail_service(EmailSettings(timeout_s=mail_s), ZoneInfo("UTC"), [account], secrets)
    registry = ToolRegistry(email_tools(service))
    settings = LoopSettings(
        system_prompt="You are a test.", max_steps=3, tool_timeouts={"email": tool_s}
    )
    store = ConversationStore(tmp_path / "db.sqlite3")
    return AgentSession(ReplayBackend(turns), registry, shipped_gate(), store, settings)


@pytest.mark.parametrize(
    ("tool", "args", "mail_s", "tool_s", "expected"),
    [
        ("list_emails", {}, 1.0, 10.0, "did not answer within 1 s"),  # IMAP: no greeting
        ("list_emails", {}, 30.0, 1.0, "did not finish within 1 s (agent.tool_timeouts.email)"),
        (
            "send_email",
            {"to": "bob@example.org", "subject": "Hi", "body": "Hello."},
            1.0,
            10.0,
            "did not answer within 1 s",
        ),  # SMTP: no greeting
    ],
)
def test_a_silent_mail_server_ends_within_the_timeout(
    tmp_path: Path,
    tool: str,
    args: dict[str, str],
    mail_s: float,
    tool_s: float,
    expected: str,
) -> None:
    with hanging_server("silent") as server:
        session = mail_session(
            tmp_path,
            server.port,
            [xml_call(tool, **args), "The mail server is stuck."],
            mail_s=mail_s,
            tool_s=tool_s,
        )
        events, elapsed = timed_run(session, "check my mail")
        assert server.connections == 1
    result = result_of(events)
    assert not result.ok and expected in result.output, result.output
    assert answer_of(events) == "The mail server is stuck."
    limit = min(mail_s, tool_s)
    assert limit <= elapsed < limit + SLACK_S, elapsed
    print(f"\n{tool}, silent server, limit {limit:g} s: ended after {elapsed:.2f} s")
