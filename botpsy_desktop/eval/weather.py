"""A local Open-Meteo stand-in on 127.0.0.1 serving each case's weather: real HTTP, real shape."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

from botpsy_desktop.eval.spec import PlaceSpec, WeatherSpec


def _place(
    name: str, country: str, code: str, admin1: str, lat: float, lon: float, tz: str, pop: int
) -> PlaceSpec:
    return PlaceSpec(
        name=name,
        country=country,
        country_code=code,
        admin1=admin1,
        latitude=lat,
        longitude=lon,
        timezone=tz,
        population=pop,
    )


BUILT_IN: tuple[PlaceSpec, ...] = (
    _place("Paris", "France", "FR", "Île-de-France", 48.85341, 2.3488, "Europe/Paris", 2138551),
    _place(
        "Lyon", "France", "FR", "Auvergne-Rhône-Alpes", 45.74846, 4.84671, "Europe/Paris", 522969
    ),
    _place(
        "London", "United Kingdom", "GB", "England", 51.50853, -0.12574, "Europe/London", 8961989
    ),
    _place("Berlin", "Germany", "DE", "Berlin", 52.52437, 13.41053, "Europe/Berlin", 3426354),
    _place(
        "New York",
        "United States",
        "US",
        "New York",
        40.71427,
        -74.00597,
        "America/New_York",
        8804190,
    ),
    _place("Tokyo", "Japan", "JP", "Tokyo", 35.6895, 139.69171, "Asia/Tokyo", 8336599),
    _place("Madrid", "Spain", "ES", "Madrid", 40.4165, -3.70256, "Europe/Madrid", 3255944),
)
"""Places every case's geocoder knows, besides the case's own."""

_CODES = (3, 61, 0, 95, 71, 2, 45, 1, 80, 3, 0, 0, 1, 2, 3, 61)


@dataclass
class WeatherStandIn:
    """The running server: its URLs, the weather it serves now, and the requests it received."""

    base: str = ""
    spec: WeatherSpec = field(default_factory=WeatherSpec)
    now: datetime = field(default_factory=lambda: datetime(2026, 1, 1, 12, 0, tzinfo=UTC))
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def geocoding_url(self) -> str:
        return f"{self.base}/v1/search"

    @property
    def forecast_url(self) -> str:
        return f"{self.base}/v1/forecast"

    def serve(self, spec: WeatherSpec, now: datetime) -> None:
        """Serve this case's weather from now on (``now``: the case's moment, aware)."""
        with self.lock:
            self.spec, self.now = spec, now
            self.requests.clear()

    def places(self, name: str) -> list[dict[str, Any]]:
        wanted = name.split(",")[0].strip().casefold()
        with self.lock:
            own = list(self.spec.places)
        found = [p for p in (*own, *BUILT_IN) if p.name.casefold() == wanted]
        return [
            {
                "id": 1000 + i,
                "name": p.name,
                "latitude": p.latitude,
                "longitude": p.longitude,
                "elevation": 50.0,
                "feature_code": "PPLA",
                "country_code": p.country_code,
                "timezone": p.timezone,
                "population": p.population,
                "country": p.country,
                "admin1": p.admin1,
            }
            for i, p in enumerate(found)
        ]

    def zone_at(self, params: dict[str, str]) -> str:
        """The time zone of the known place at the asked coordinates (else UTC)."""
        lat, lon = float(params["latitude"]), float(params["longitude"])
        for p in (*self.spec.places, *BUILT_IN):
            if abs(p.latitude - lat) < 0.01 and abs(p.longitude - lon) < 0.01:
                return p.timezone
        return "UTC"

    def forecast(self, params: dict[str, str]) -> dict[str, Any]:
        """An answer shaped like api.open-meteo.com/v1/forecast for the requested variables."""
        with self.lock:
            spec, now = self.spec, self.now
        imperial = params.get("temperature_unit") == "fahrenheit"
        days = int(params.get("forecast_days", "7"))
        zone = params.get("timezone", "auto")
        tz_name = zone if zone not in ("auto", "") else self.zone_at(params)
        now = now.astimezone(ZoneInfo(tz_name))

        def temp(celsius: float) -> float:
            return round(celsius * 9 / 5 + 32, 1) if imperial else celsius

        def speed(kmh: float) -> float:
            return round(kmh / 1.609, 1) if imperial else kmh

        c = spec.current
        current_values: dict[str, Any] = {
            "temperature_2m": temp(c.temperature if c.temperature is not None else 11.4),
            "apparent_temperature": temp(c.feels_like if c.feels_like is not None else 9.2),
            "relative_humidity_2m": c.humidity if c.humidity is not None else 72,
            "precipitation": c.precipitation if c.precipitation is not None else 0.0,
            "weather_code": c.code if c.code is not None else 3,
            "cloud_cover": 100,
            "wind_speed_10m": speed(c.wind if c.wind is not None else 14.8),
            "wind_direction_10m": 225,
            "is_day": 1 if 7 <= now.hour < 19 else 0,
        }
        t_unit, w_unit, p_unit = ("°F", "mp/h", "inch") if imperial else ("°C", "km/h", "mm")
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
        dates = [(now.date() + timedelta(days=i)).isoformat() for i in range(days)]
        given = list(spec.daily) + [None] * max(0, days - len(spec.daily))

        def day(i: int, name: str, default: Any) -> Any:
            d = given[i]
            value = getattr(d, name) if d is not None else None
            return default if value is None else value

        daily_values: dict[str, list[Any]] = {
            "weather_code": [day(i, "code", _CODES[i % len(_CODES)]) for i in range(days)],
            "temperature_2m_max": [temp(day(i, "max", 12.0 + i)) for i in range(days)],
            "temperature_2m_min": [temp(day(i, "min", 4.0 + i / 2)) for i in range(days)],
            "precipitation_sum": [day(i, "precipitation", 0.0) for i in range(days)],
            "precipitation_probability_max": [day(i, "rain_chance", 10) for i in range(days)],
            "wind_speed_10m_max": [speed(day(i, "wind", 20.5 + i)) for i in range(days)],
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
        offset = now.utcoffset() or timedelta(0)
        current_vars = [v for v in params.get("current", "").split(",") if v in current_values]
        daily_vars = [v for v in params.get("daily", "").split(",") if v in daily_values]
        return {
            "latitude": round(float(params["latitude"]), 2),
            "longitude": round(float(params["longitude"]), 2),
            "generationtime_ms": 0.08,
            "utc_offset_seconds": int(offset.total_seconds()),
            "timezone": tz_name,
            "timezone_abbreviation": "",
            "elevation": 50.0,
            "current_units": {
                "time": "iso8601",
                "interval": "seconds",
                **{v: current_units[v] for v in current_vars},
            },
            "current": {
                "time": now.strftime("%Y-%m-%dT%H:%M"),
                "interval": 900,
                **{v: current_values[v] for v in current_vars},
            },
            "daily_units": {"time": "iso8601", **{v: daily_units[v] for v in daily_vars}},
            "daily": {"time": dates, **{v: daily_values[v] for v in daily_vars}},
        }


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler that answers in JSON and logs nothing: the base of local stand-ins."""

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def send_json(self, status: int, body: Any) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def _handler(server: WeatherStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            with server.lock:
                server.requests.append((parts.path, query))
            if parts.path.endswith("/v1/search"):
                found = server.places(query.get("name", ""))
                self.send_json(200, {"results": found} if found else {"generationtime_ms": 0.2})
            elif parts.path.endswith("/v1/forecast"):
                try:
                    lat = float(query["latitude"])
                    if not -90 <= lat <= 90:
                        raise ValueError
                    body = server.forecast(query)
                except (KeyError, ValueError):
                    self.send_json(
                        400, {"error": True, "reason": "Latitude must be in -90 to 90°."}
                    )
                    return
                self.send_json(200, body)
            else:
                self.send_json(404, {"error": True, "reason": "Not Found"})

    return Handler


@contextmanager
def weather_stand_in() -> Iterator[WeatherStandIn]:
    """Serve on a free port of 127.0.0.1 for the duration of the ``with`` block."""
    state = WeatherStandIn()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    httpd.daemon_threads = True
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(
        target=httpd.serve_forever, args=(0.05,), name="eval-weather", daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
