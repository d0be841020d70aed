"""The weather adapter against a local Open-Meteo stand-in: real HTTP on 127.0.0.1, no network."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from botpsy_desktop.adapters.weather import OpenMeteo, units_for_locale, weather_tools
from botpsy_desktop.adapters.weather.codes import describe
from botpsy_desktop.cli import main
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tool, ToolArgumentsError
from tests.helpers.weather_server import TODAY, WeatherServer, weather_server


@pytest.fixture
def server() -> Iterator[WeatherServer]:
    with weather_server() as running:
        yield running


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(2.0), trust_env=False) as client:
        yield client


class FakeClock:
    """Monotonic seconds the test moves by hand (to expire the cache)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_tool(
    server: WeatherServer,
    http: httpx.Client,
    *,
    units: str = "metric",
    default_location: str | None = None,
    clock: FakeClock | None = None,
    geocoding_url: str | None = None,
    forecast_url: str | None = None,
) -> Tool:
    client = OpenMeteo(
        http,
        geocoding_url=geocoding_url or server.geocoding_url,
        forecast_url=forecast_url or server.forecast_url,
        clock=clock or FakeClock(),
    )
    (tool,) = weather_tools(client, units=units, default_location=default_location)
    return tool


def call(tool: Tool, **arguments: Any) -> Any:
    return tool.call(tool.validate(arguments))


def test_the_tool_is_read_only_and_its_schema_is_written_for_the_model(
    server: WeatherServer, http: httpx.Client
) -> None:
    tool = make_tool(server, http)
    assert tool.name == "get_weather" and tool.effects == frozenset({Effect.READ})
    props = tool.parameters_schema()["properties"]
    assert set(props) == {"place", "when"}
    assert "Paris, France" in props["place"]["description"]
    assert "tomorrow" in props["when"]["description"]
    assert tool.parameters_schema().get("required", []) == []


def test_current_conditions_for_a_place(server: WeatherServer, http: httpx.Client) -> None:
    result = call(make_tool(server, http), place="Paris")
    assert result["place"] == {
        "name": "Paris",
        "country": "France",
        "region": "Île-de-France",
        "latitude": 48.8534,
        "longitude": 2.3488,
    }
    assert result["when"] == "now"
    assert result["temperature"] == "11.4 °C"
    assert result["feels_like"] == "9.2 °C"
    assert result["humidity"] == "72%"
    assert result["wind"] == "14.8 km/h from SW"
    assert result["conditions"] == "overcast"
    assert result["today"] == {"high": "12 °C", "low": "4 °C"}
    assert result["summary"] == (
        "Paris, France now: overcast, 11.4 °C (feels like 9.2 °C), wind 14.8 km/h from SW."
    )
    # a second place of that name is mentioned so the model can ask
    assert "Texas, United States" in result["note"]
    # what was asked for: the configured endpoints, the documented variables
    (search_path, search), (forecast_path, forecast) = server.requests
    assert search_path == "/v1/search" and search["name"] == "Paris"
    assert forecast_path == "/v1/forecast"
    assert forecast["timezone"] == "auto"
    assert "weather_code" in forecast["current"].split(",")
    assert "temperature_2m_max" in forecast["daily"].split(",")
    assert forecast["latitude"] == "48.8534"
    assert "temperature_unit" not in forecast


def test_tomorrow_a_weekday_and_a_date_are_resolved_in_the_places_local_date(
    server: WeatherServer, http: httpx.Client
) -> None:
    tool = make_tool(server, http)
    tomorrow = call(tool, place="Paris, France", when="tomorrow")
    assert tomorrow["date"] == "2025-03-15" and tomorrow["weekday"] == "Saturday"
    assert tomorrow["conditions"] == "light rain"
    assert tomorrow["high"] == "13 °C" and tomorrow["low"] == "4.5 °C"
    assert tomorrow["precipitation_chance"] == "85%"
    assert tomorrow["precipitation"] == "6.3 mm"
    assert tomorrow["sunrise"] == "07:02" and tomorrow["sunset"] == "18:51"
    assert tomorrow["summary"] == (
        "Paris, France tomorrow (Saturday 2025-03-15): light rain, low 4.5 °C, high 13 °C, "
        "85% chance of precipitation (6.3 mm)."
    )
    assert "note" not in tomorrow  # the country picked one Paris
    monday = call(tool, place="Paris, France", when="Monday")
    assert monday["date"] == "2025-03-17" and monday["conditions"] == "thunderstorm"
    friday = call(tool, place="Paris, France", when="friday")  # today is a Friday
    assert friday["date"] == TODAY.isoformat()
    assert call(tool, place="Paris, France", when="next tue")["date"] == "2025-03-18"
    assert call(tool, place="Paris, France", when="2025-03-16T09:00")["weekday"] == "Sunday"
    dated = call(tool, place="Paris, France", when="2025-03-20")
    assert dated["weekday"] == "Thursday" and dated["conditions"] == "fog"
    today = call(tool, place="Paris, France", when="Today")
    assert today["date"] == TODAY.isoformat()
    assert today["now"] == {
        "conditions": "overcast",
        "temperature": "11.4 °C",
        "feels_like": "9.2 °C",
    }


def test_the_country_chooses_between_places_of_the_same_name(
    server: WeatherServer, http: httpx.Client
) -> None:
    tool = make_tool(server, http)
    assert call(tool, place="Paris, Texas")["place"]["country"] == "United States"
    assert call(tool, place="Paris, USA")["place"]["region"] == "Texas"
    assert call(tool, place="paris fr")["place"]["country"] == "France"
    with pytest.raises(ToolError, match="I could not find a place called 'Paris, Japan'"):
        call(tool, place="Paris, Japan")


def test_imperial_units_are_asked_for_and_labelled(
    server: WeatherServer, http: httpx.Client
) -> None:
    result = call(make_tool(server, http, units="imperial"), place="Lyon")
    forecast = server.requests[-1][1]
    assert forecast["temperature_unit"] == "fahrenheit"
    assert forecast["wind_speed_unit"] == "mph"
    assert forecast["precipitation_unit"] == "inch"
    assert result["temperature"] == "52.5 °F"
    assert result["wind"].endswith("mp/h from SW")


def test_units_follow_the_locale() -> None:
    assert units_for_locale({"LANG": "en_US.UTF-8"}) == "imperial"
    assert units_for_locale({"LANG": "en_GB.UTF-8"}) == "metric"
    assert units_for_locale({"LANG": "en_US.UTF-8", "LC_MEASUREMENT": "de_DE.UTF-8"}) == "metric"
    assert units_for_locale({"LC_ALL": "en_US", "LANG": "fr_FR"}) == "imperial"
    assert units_for_locale({"LANG": "C.UTF-8"}) == "metric"
    assert units_for_locale({}) == "metric"


def test_answers_are_cached_for_a_while(server: WeatherServer, http: httpx.Client) -> None:
    clock = FakeClock()
    tool = make_tool(server, http, clock=clock)
    call(tool, place="Paris")
    call(tool, place="Paris", when="tomorrow")
    call(tool, place="paris")  # another spelling is another search, the forecast is reused
    assert server.count("/v1/forecast") == 1
    searches = server.count("/v1/search")
    clock.now += 599
    call(tool, place="Paris")
    assert server.count("/v1/forecast") == 1 and server.count("/v1/search") == searches
    clock.now += 2  # past the ten minutes
    call(tool, place="Paris")
    assert server.count("/v1/forecast") == 2


def test_the_default_location_is_used_when_no_place_is_given(
    server: WeatherServer, http: httpx.Client
) -> None:
    assert call(make_tool(server, http, default_location="Lyon"))["place"]["name"] == "Lyon"
    with pytest.raises(ToolError, match="No place was given") as err:
        call(make_tool(server, http), when="tomorrow")
    assert "which city" in str(err.value)
    assert server.count("/v1/search") == 1  # nothing was sent for the refused call


def test_unknown_places_and_days_get_clear_answers(
    server: WeatherServer, http: httpx.Client
) -> None:
    tool = make_tool(server, http)
    with pytest.raises(ToolError) as err:
        call(tool, place="Atlantis")
    assert str(err.value) == (
        "I could not find a place called 'Atlantis'. Try adding the country, e.g. "
        '"Paris, France", or check the spelling.'
    )
    with pytest.raises(ToolError, match="do not understand when='next year'"):
        call(tool, place="Paris", when="next year")
    with pytest.raises(ToolError, match="only reaches 7 days ahead"):
        call(tool, place="Paris", when="2025-04-30")
    with pytest.raises(ToolError, match="in the past"):
        call(tool, place="Paris", when="2025-03-01")
    with pytest.raises(ToolError, match="too short"):
        call(tool, place=" x ")
    with pytest.raises(ToolArgumentsError, match="has no parameter"):
        tool.validate({"city": "Paris"})


def test_a_place_name_can_never_choose_the_host(server: WeatherServer, http: httpx.Client) -> None:
    tool = make_tool(server, http)
    for name in ("http://evil.example/x", "//evil.example/x?y=1#z", "Paris&latitude=1"):
        with pytest.raises(ToolError, match="could not find a place"):
            call(tool, place=name)
    paths = {p for p, _ in server.requests}
    assert paths == {"/v1/search"}  # every request went to the configured host and path
    names = [q["name"] for _, q in server.requests]
    assert "http://evil.example/x" in names
    assert "Paris&latitude=1" in names  # sent as one value, not a second parameter
    assert all(set(q) == {"name", "count", "language", "format"} for _, q in server.requests)


def test_a_stalled_service_times_out_within_the_bound(server: WeatherServer) -> None:
    with httpx.Client(timeout=httpx.Timeout(0.5), trust_env=False) as http:
        tool = make_tool(
            server,
            http,
            geocoding_url=f"{server.base}/stall/v1/search",
        )
        started = time.monotonic()
        with pytest.raises(ToolError) as err:
            call(tool, place="Paris")
        elapsed = time.monotonic() - started
    assert elapsed < 2.0
    assert "did not answer the place search within 0.5 s" in str(err.value)
    assert "try again" in str(err.value)


def test_server_errors_and_a_wrong_address_are_explained(
    server: WeatherServer, http: httpx.Client
) -> None:
    broken = make_tool(server, http, forecast_url=f"{server.base}/broken/v1/forecast")
    with pytest.raises(ToolError, match=r"has a problem right now \(HTTP 500\)"):
        call(broken, place="Paris")
    missing = make_tool(server, http, geocoding_url=f"{server.base}/v2/nowhere")
    with pytest.raises(ToolError, match=r"does not exist \(HTTP 404\)") as err:
        call(missing, place="Paris")
    assert "weather.geocoding_url" in str(err.value)


def test_an_unreachable_service_says_the_computer_may_be_offline(http: httpx.Client) -> None:
    with weather_server() as gone:
        base = gone.base
    client = OpenMeteo(http, geocoding_url=f"{base}/v1/search", forecast_url=f"{base}/v1/forecast")
    (tool,) = weather_tools(client, units="metric")
    with pytest.raises(ToolError, match="Cannot reach the weather service") as err:
        call(tool, place="Paris")
    assert "offline" in str(err.value)


def test_wmo_codes_are_described() -> None:
    assert describe(0) == "clear sky"
    assert describe(95.0) == "thunderstorm"
    assert describe(42) == "unknown conditions (WMO code 42)"
    assert describe(None) == "unknown conditions"


# --- end to end: the `botpsy` command with the config pointing at the local server --------------


def test_ask_weather_in_paris_tomorrow_end_to_end(
    server: WeatherServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    config = {
        "files": {"roots": [str(tmp_path)]},
        "music": {"folders": [str(tmp_path / "Music")], "player": "none"},
        "weather": {
            "geocoding_url": server.geocoding_url,
            "forecast_url": server.forecast_url,
            "units": "metric",
            "timeout_s": 5,
        },
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    turns = [
        "<tool_call>\n<function=get_weather>\n<parameter=place>\nParis, France\n</parameter>\n"
        "<parameter=when>\ntomorrow\n</parameter>\n</function>\n</tool_call>",
        "Tomorrow in Paris: light rain, between 4.5 and 13 °C.",
    ]
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(turns), encoding="utf-8")
    code = main(
        ["--home", str(home), "ask", "--replay", str(replay), "--json", "weather in Paris tomorrow"]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0, data
    (tool_call,) = data["tool_calls"]
    assert tool_call["name"] == "get_weather" and tool_call["decision"] == "allowed"
    assert tool_call["ok"], tool_call
    result = json.loads(tool_call["result"])
    assert result["date"] == "2025-03-15" and result["conditions"] == "light rain"
    assert result["place"]["country"] == "France"
    assert data["answer"].startswith("Tomorrow in Paris")
    assert [p for p, _ in server.requests] == ["/v1/search", "/v1/forecast"]


def test_a_client_factory_runs_at_the_first_request_and_its_client_closes_with_the_service(
    server: WeatherServer, http: httpx.Client
) -> None:
    made: list[httpx.Client] = []

    def factory() -> httpx.Client:
        made.append(httpx.Client(timeout=httpx.Timeout(2.0), trust_env=False))
        return made[-1]

    client = OpenMeteo(
        factory, geocoding_url=server.geocoding_url, forecast_url=server.forecast_url
    )
    (tool,) = weather_tools(client, units="metric")
    assert made == []  # building the tools makes no HTTP client
    assert call(tool, place="Paris")["place"]["name"] == "Paris"
    assert call(tool, place="Paris, France", when="tomorrow")["date"] == "2025-03-15"
    assert len(made) == 1 and not made[0].is_closed
    client.close()
    assert made[0].is_closed
    with pytest.raises(RuntimeError, match="closed"):
        call(tool, place="Berlin")
    assert len(made) == 1
    given = OpenMeteo(http, geocoding_url=server.geocoding_url, forecast_url=server.forecast_url)
    assert call(weather_tools(given, units="metric")[0], place="Paris")["when"] == "now"
    given.close()
    assert not http.is_closed  # a given client is its owner's to close
