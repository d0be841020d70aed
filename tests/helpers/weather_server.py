"""A local Open-Meteo stand-in on 127.0.0.1: real HTTP, the real answers' shape, made-up numbers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from botpsy_desktop.eval.weather import JsonHandler

TODAY = date(2025, 3, 14)  # a Friday; the forecast's "today" comes from current.time, not the clock
"""The local date at every place this server knows."""

PLACES: dict[str, list[dict[str, Any]]] = {
    "paris": [
        {
            "id": 2988507,
            "name": "Paris",
            "latitude": 48.85341,
            "longitude": 2.3488,
            "elevation": 42.0,
            "feature_code": "PPLC",
            "country_code": "FR",
            "admin1_id": 3012874,
            "timezone": "Europe/Paris",
            "population": 2138551,
            "country_id": 3017382,
            "country": "France",
            "admin1": "Île-de-France",
        },
        {
            "id": 4717560,
            "name": "Paris",
            "latitude": 33.66094,
            "longitude": -95.55551,
            "elevation": 183.0,
            "feature_code": "PPLA2",
            "country_code": "US",
            "admin1_id": 4736286,
            "timezone": "America/Chicago",
            "population": 24782,
            "country_id": 6252001,
            "country": "United States",
            "admin1": "Texas",
        },
    ],
    "lyon": [
        {
            "id": 2996944,
            "name": "Lyon",
            "latitude": 45.74846,
            "longitude": 4.84671,
            "elevation": 173.0,
            "feature_code": "PPLA",
            "country_code": "FR",
            "timezone": "Europe/Paris",
            "country": "France",
            "admin1": "Auvergne-Rhône-Alpes",
        }
    ],
}


def forecast_json(params: dict[str, str]) -> dict[str, Any]:
    """An answer shaped like api.open-meteo.com/v1/forecast for the requested variables."""
    imperial = params.get("temperature_unit") == "fahrenheit"
    days = int(params.get("forecast_days", "7"))

    def temp(celsius: float) -> float:
        return round(celsius * 9 / 5 + 32, 1) if imperial else celsius

    t_unit = "°F" if imperial else "°C"
    w_unit = "mp/h" if imperial else "km/h"
    p_unit = "inch" if imperial else "mm"
    current_vars = params["current"].split(",")
    daily_vars = params["daily"].split(",")
    current_values: dict[str, Any] = {
        "temperature_2m": temp(11.4),
        "apparent_temperature": temp(9.2),
        "relative_humidity_2m": 72,
        "precipitation": 0.0,
        "weather_code": 3,
        "cloud_cover": 100,
        "wind_speed_10m": 14.8 if not imperial else 9.2,
        "wind_direction_10m": 225,
        "is_day": 1,
    }
    current_units = {
        "temperature_2m": t_unit,
        "apparent_temperature": t_unit,
        "relative_humidity_2m": "%",
        "precipitation": p_unit,
        "weather_code": "wmo code",
        "cloud_cover": "%",
        "wind_speed_10m": w_unit,
        "wind_direction_10m": "°",
        "is_day": "",
    }
    dates = [(TODAY + timedelta(days=i)).isoformat() for i in range(days)]
    codes = [3, 61, 0, 95, 71, 2, 45, 1, 80, 3, 0, 0, 1, 2, 3, 61][:days]
    daily_values: dict[str, list[Any]] = {
        "weather_code": codes,
        "temperature_2m_max": [temp(12.0 + i) for i in range(days)],
        "temperature_2m_min": [temp(4.0 + i / 2) for i in range(days)],
        "precipitation_sum": [0.0, 6.3, 0.0, 12.1, 2.0, 0.0, 0.1][:days] + [0.0] * max(0, days - 7),
        "precipitation_probability_max": [10, 85, 0, 90, 60, 5, 20][:days] + [0] * max(0, days - 7),
        "wind_speed_10m_max": [20.5 + i for i in range(days)],
        "sunrise": [f"{d}T07:02" for d in dates],
        "sunset": [f"{d}T18:51" for d in dates],
    }
    daily_units = {
        "weather_code": "wmo code",
        "temperature_2m_max": t_unit,
        "temperature_2m_min": t_unit,
        "precipitation_sum": p_unit,
        "precipitation_probability_max": "%",
        "wind_speed_10m_max": w_unit,
        "sunrise": "iso8601",
        "sunset": "iso8601",
    }
    return {
        "latitude": round(float(params["latitude"]), 2),
        "longitude": round(float(params["longitude"]), 2),
        "generationtime_ms": 0.08,
        "utc_offset_seconds": 3600,
        "timezone": "Europe/Paris",
        "timezone_abbreviation": "GMT+1",
        "elevation": 42.0,
        "current_units": {
            "time": "iso8601",
            "interval": "seconds",
            **{v: current_units[v] for v in current_vars},
        },
        "current": {
            "time": f"{TODAY.isoformat()}T14:45",
            "interval": 900,
            **{v: current_values[v] for v in current_vars},
        },
        "daily_units": {"time": "iso8601", **{v: daily_units[v] for v in daily_vars}},
        "daily": {"time": dates, **{v: daily_values[v] for v in daily_vars}},
    }


@dataclass
class WeatherServer:
    """The running server: its base URL and every request it received (path, query)."""

    base: str
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def geocoding_url(self) -> str:
        return f"{self.base}/v1/search"

    @property
    def forecast_url(self) -> str:
        return f"{self.base}/v1/forecast"

    def count(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p == path)


def _handler(server: WeatherServer) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            server.requests.append((parts.path, query))
            path = parts.path
            if path.startswith("/stall/"):
                server.release.wait(10)  # longer than any client timeout in the tests
                path = path[len("/stall") :]
            if path.startswith("/broken/"):
                self.send_json(500, {"error": True, "reason": "Internal error"})
            elif path.endswith("/v1/search"):
                found = PLACES.get(query.get("name", "").casefold())
                self.send_json(
                    200,
                    {"results": found, "generationtime_ms": 0.4}
                    if found
                    else {"generationtime_ms": 0.2},
                )
            elif path.endswith("/v1/forecast"):
                try:
                    lat = float(query["latitude"])
                    if not -90 <= lat <= 90:
                        raise ValueError
                    body = forecast_json(query)
                except (KeyError, ValueError):
                    self.send_json(
                        400, {"error": True, "reason": "Latitude must be in range of -90 to 90°."}
                    )
                    return
                self.send_json(200, body)
            else:
                self.send_json(404, {"error": True, "reason": "Not Found"})

    return Handler


@contextmanager
def weather_server() -> Iterator[WeatherServer]:
    """Serve on a free port of 127.0.0.1 for the duration of the ``with`` block."""
    state = WeatherServer(base="")
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(
        target=httpd.serve_forever, args=(0.05,), name="weather-server", daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
