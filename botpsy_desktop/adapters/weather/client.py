"""Open-Meteo over an injected httpx client: place search, current conditions, daily forecast."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from botpsy_desktop.core.errors import ToolError

if TYPE_CHECKING:
    import httpx  # imported at the first request: ~10 MiB that a process without one skips

Units = Literal["metric", "imperial"]

CURRENT_VARIABLES = (
    "temperature_2m",
    "apparent_temperature",
    "relative_humidity_2m",
    "precipitation",
    "weather_code",
    "cloud_cover",
    "wind_speed_10m",
    "wind_direction_10m",
    "is_day",
)
DAILY_VARIABLES = (
    "weather_code",
    "temperature_2m_max",
    "temperature_2m_min",
    "precipitation_sum",
    "precipitation_probability_max",
    "wind_speed_10m_max",
    "sunrise",
    "sunset",
)
IMPERIAL_PARAMS = {
    "temperature_unit": "fahrenheit",
    "wind_speed_unit": "mph",
    "precipitation_unit": "inch",
}
MAX_CACHE_ENTRIES = 256

# Country names people add after a place that are not the country's own name in the results.
_COUNTRY_ALIASES = {
    "usa": "us",
    "u.s.": "us",
    "u.s.a.": "us",
    "america": "us",
    "uk": "gb",
    "u.k.": "gb",
    "britain": "gb",
    "great britain": "gb",
    "england": "gb",
    "scotland": "gb",
    "wales": "gb",
}


@dataclass(frozen=True)
class Place:
    """A place found by the geocoder."""

    name: str
    country: str
    country_code: str
    region: str
    latitude: float
    longitude: float
    timezone: str

    def label(self) -> str:
        """``Name, Country`` as people write it."""
        return ", ".join(p for p in (self.name, self.country) if p)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "country": self.country}
        if self.region and self.region != self.name:
            out["region"] = self.region
        out["latitude"] = round(self.latitude, 4)
        out["longitude"] = round(self.longitude, 4)
        return out


@dataclass(frozen=True)
class Geocoded:
    """The place chosen for a name, and other places with that name (for a note)."""

    place: Place
    others: tuple[Place, ...]


class OpenMeteo:
    """Talks to the two configured Open-Meteo endpoints and nothing else.

    Tool arguments only ever become query parameters: the URLs come from configuration. Answers
    are cached for ``cache_s`` seconds (per URL and parameters) so that a follow-up question
    does not cost another request. ``http`` is a client, or a function that makes one on the
    first request (that client is then this object's to close, with ``close()``).
    """

    def __init__(
        self,
        http: httpx.Client | Callable[[], httpx.Client],
        *,
        geocoding_url: str,
        forecast_url: str,
        forecast_days: int = 7,
        cache_s: float = 600.0,
        language: str = "en",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        for url in (geocoding_url, forecast_url):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{url!r} is not an http(s) URL with a host")
        if not 1 <= forecast_days <= 16:
            raise ValueError("forecast_days must be between 1 and 16")
        self._http_source = http
        self._http: httpx.Client | None = None
        self._closed = False
        self.geocoding_url = geocoding_url
        self.forecast_url = forecast_url
        self.forecast_days = forecast_days
        self._cache_s = cache_s
        self._language = language
        self._clock = clock
        self._cache: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, Any]] = {}
        self._lock = threading.Lock()

    # --- geocoding ---------------------------------------------------------------------------

    def geocode(self, text: str) -> Geocoded:
        """Find a place by name; ``"Paris, France"`` narrows the search to that country/region."""
        query = " ".join(text.split())
        if len(query) < 2:
            raise ToolError(
                f"{text!r} is too short to be a place name.",
                'Give a city or town, e.g. "Paris" or "Paris, France".',
            )
        name, _, rest = query.partition(",")
        qualifiers = [q.strip() for q in rest.split(",") if q.strip()]
        name = name.strip()
        found = self._search(name, qualifiers)
        if not found and not qualifiers and " " in name:
            # "Springfield Illinois": try the last word as a country or region.
            head, _, tail = name.rpartition(" ")
            found = self._search(head, [tail])
        if not found:
            raise ToolError(
                f"I could not find a place called {query!r}.",
                'Try adding the country, e.g. "Paris, France", or check the spelling.',
            )
        return Geocoded(found[0], tuple(found[1:4]))

    def _search(self, name: str, qualifiers: list[str]) -> list[Place]:
        if len(name) < 2:
            return []
        data = self._get_json(
            self.geocoding_url,
            {"name": name, "count": "10", "language": self._language, "format": "json"},
            what="place search",
        )
        results = data.get("results") if isinstance(data, dict) else None
        if results is None:
            return []  # Open-Meteo leaves "results" out when nothing matched
        if not isinstance(results, list):
            raise _unexpected(self.geocoding_url, "'results' is not a list")
        places = [p for p in (_place(r) for r in results) if p is not None]
        if results and not places:
            raise _unexpected(self.geocoding_url, "no result has a name and coordinates")
        return [p for p in places if all(_qualifies(p, q) for q in qualifiers)]

    # --- forecast ----------------------------------------------------------------------------

    def forecast(self, place: Place, units: Units) -> dict[str, Any]:
        """Current conditions and the daily forecast at ``place``, in its local time zone."""
        params = {
            "latitude": f"{place.latitude:.4f}",
            "longitude": f"{place.longitude:.4f}",
            "current": ",".join(CURRENT_VARIABLES),
            "daily": ",".join(DAILY_VARIABLES),
            "timezone": "auto",
            "forecast_days": str(self.forecast_days),
        }
        if units == "imperial":
            params.update(IMPERIAL_PARAMS)
        data = self._get_json(self.forecast_url, params, what="forecast")
        if not isinstance(data, dict):
            raise _unexpected(self.forecast_url, "the answer is not a JSON object")
        for key in ("current", "current_units", "daily", "daily_units"):
            if not isinstance(data.get(key), dict):
                raise _unexpected(self.forecast_url, f"{key!r} is missing")
        times = data["daily"].get("time")
        if not isinstance(times, list) or not times:
            raise _unexpected(self.forecast_url, "the daily forecast has no days")
        if not isinstance(data["current"].get("time"), str):
            raise _unexpected(self.forecast_url, "the current conditions have no time")
        return data

    # --- HTTP --------------------------------------------------------------------------------

    def _get_json(self, url: str, params: Mapping[str, str], *, what: str) -> Any:
        key = (url, tuple(sorted(params.items())))
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        data = self._fetch(url, params, what)
        with self._lock:
            if self._cache_s > 0:
                if len(self._cache) >= MAX_CACHE_ENTRIES:
                    self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                    while len(self._cache) >= MAX_CACHE_ENTRIES:
                        del self._cache[next(iter(self._cache))]
                self._cache[key] = (now + self._cache_s, data)
        return data

    def _client(self) -> httpx.Client:
        with self._lock:
            if self._http is None:
                source = self._http_source
                if self._closed:
                    raise RuntimeError("the weather client is closed")
                self._http = source if not callable(source) else source()
            return self._http

    def close(self) -> None:
        """Close the HTTP client if this object made it (a given client is its owner's)."""
        with self._lock:
            self._closed = True
            made = self._http
        if made is not None and made is not self._http_source:
            made.close()

    def _get(self, url: str, params: Mapping[str, str]) -> httpx.Response:
        """GET with the read timeout also bounding the whole answer: a server that trickles a
        byte at a time (never idle long enough for a read timeout) cannot hold the call."""
        import httpx

        http = self._client()
        limit = http.timeout.read
        deadline = None if limit is None else time.monotonic() + limit
        with http.stream("GET", url, params=dict(params), follow_redirects=False) as got:
            raw = bytearray()
            for chunk in got.iter_raw():
                raw += chunk
                if deadline is not None and time.monotonic() > deadline:
                    raise httpx.ReadTimeout("the answer came too slowly", request=got.request)
            return httpx.Response(
                got.status_code, headers=got.headers, content=bytes(raw), request=got.request
            )

    def _fetch(self, url: str, params: Mapping[str, str], what: str) -> Any:
        import httpx

        host = urlsplit(url).netloc
        try:
            response = self._get(url, params)
        except httpx.TimeoutException as exc:
            timeout = self._client().timeout
            limit = timeout.read or timeout.connect
            within = f" within {limit:g} s" if limit else ""
            raise ToolError(
                f"The weather service ({host}) did not answer the {what}{within}.",
                "It may be busy or the connection slow; try again in a minute.",
            ) from exc
        except httpx.ConnectError as exc:
            raise ToolError(
                f"Cannot reach the weather service ({host}): {exc}.",
                "The computer may be offline; check the internet connection and try again.",
            ) from exc
        except httpx.HTTPError as exc:
            raise ToolError(
                f"The {what} request to the weather service ({host}) failed: {exc}.",
                "Try again in a minute.",
            ) from exc
        status = response.status_code
        if status >= 500:
            raise ToolError(
                f"The weather service ({host}) has a problem right now (HTTP {status}).",
                "Try again in a few minutes.",
            )
        if status == 404:
            raise ToolError(
                f"The weather service address {url} does not exist (HTTP 404).",
                "Ask the user to check weather.geocoding_url and weather.forecast_url "
                "in the settings.",
            )
        if status >= 400:
            raise ToolError(
                f"The weather service refused the {what} (HTTP {status}: {_reason(response)}).",
                "Check the place and the day asked for, then try again.",
            )
        if status != 200:
            raise _unexpected(url, f"HTTP {status}")
        try:
            return response.json()
        except ValueError as exc:
            raise _unexpected(url, "the answer is not JSON") from exc


def _place(item: Any) -> Place | None:
    if not isinstance(item, dict):
        return None
    name, lat, lon = item.get("name"), item.get("latitude"), item.get("longitude")
    if not isinstance(name, str) or not name.strip():
        return None
    if not isinstance(lat, int | float) or not isinstance(lon, int | float):
        return None
    if isinstance(lat, bool) or isinstance(lon, bool):
        return None
    return Place(
        name=name,
        country=_text(item.get("country")),
        country_code=_text(item.get("country_code")).upper(),
        region=_text(item.get("admin1")),
        latitude=float(lat),
        longitude=float(lon),
        timezone=_text(item.get("timezone")),
    )


def _qualifies(place: Place, qualifier: str) -> bool:
    """Whether "France", "FR", "Texas" or "UK" describes where ``place`` lies."""
    q = qualifier.casefold().strip()
    code = _COUNTRY_ALIASES.get(q, q)
    if place.country_code and code == place.country_code.casefold():
        return True
    return any(
        field and (field.casefold() == q or field.casefold().startswith(q + " "))
        for field in (place.country, place.region)
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _reason(response: httpx.Response) -> str:
    """Open-Meteo's error answers are ``{"error": true, "reason": "..."}``."""
    try:
        data = response.json()
    except ValueError:
        return response.reason_phrase or "no reason given"
    if isinstance(data, dict) and isinstance(data.get("reason"), str):
        return str(data["reason"])[:200]
    return response.reason_phrase or "no reason given"


def _unexpected(url: str, detail: str) -> ToolError:
    return ToolError(
        f"The weather service ({urlsplit(url).netloc}) gave an answer I cannot read ({detail}).",
        "Try again later; if it keeps happening, check the weather URLs in the settings.",
    )
