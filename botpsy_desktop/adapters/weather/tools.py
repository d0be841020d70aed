"""The get_weather tool: a place and a day in, a compact report with units and a summary out."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any

from pydantic import BaseModel, Field

from botpsy_desktop.adapters.weather.client import OpenMeteo, Units
from botpsy_desktop.adapters.weather.codes import describe
from botpsy_desktop.core.errors import ToolError
from botpsy_desktop.core.tools import Effect, Tier, Tool, make_tool

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
IMPERIAL_TERRITORIES = frozenset({"US", "LR", "MM"})
"""Where people measure in °F, mph and inches (by the locale's territory)."""

_WHEN_HELP = (
    'Use "now", "today", "tomorrow", a weekday such as "friday", or a date such as 2025-06-01.'
)
_COMPASS = ("N", "NE", "E", "SE", "S", "SW", "W", "NW")


class GetWeatherArgs(BaseModel):
    """Get the weather now or the forecast for one day, for a place."""

    place: str | None = Field(
        None,
        description='e.g. "Paris, France"; leave out for the user\'s home.',
        max_length=200,
    )
    when: str = Field(
        "now",
        description='"now" (default), "today", "tomorrow", "friday", "2025-06-01".',
        max_length=40,
    )


def units_for_locale(environ: Mapping[str, str] | None = None) -> Units:
    """Imperial for locales whose territory uses it (en_US, ...), metric everywhere else."""
    env = os.environ if environ is None else environ
    for var in ("LC_ALL", "LC_MEASUREMENT", "LANG"):
        value = env.get(var, "")
        if value:
            match = re.match(r"^[A-Za-z]{2,3}_([A-Za-z]{2})\b", value)
            if match:
                return "imperial" if match.group(1).upper() in IMPERIAL_TERRITORIES else "metric"
            return "metric"
    return "metric"


def weather_tools(
    client: OpenMeteo,
    *,
    units: str = "auto",
    default_location: str | None = None,
) -> list[Tool]:
    """The weather tools over ``client``; ``units``: auto (from the locale), metric, imperial."""
    chosen: Units
    if units == "auto":
        chosen = units_for_locale()
    elif units in ("metric", "imperial"):
        chosen = "metric" if units == "metric" else "imperial"
    else:
        raise ValueError(f"units must be auto, metric or imperial, not {units!r}")

    def get_weather(args: GetWeatherArgs) -> dict[str, Any]:
        return _get_weather(client, args, chosen, default_location)

    # the place name is sent to the geocoding service: in an untrusted context it asks
    return [
        make_tool(
            get_weather,
            effects={Effect.READ},
            tier=Tier.READ,
            sends=("place",),
            summary=lambda a: (
                f"Look up the weather for “{a['place']}” with the online weather service"
                if a.get("place")
                else "Look up the weather for your home location"
            ),
        )
    ]


def _get_weather(
    client: OpenMeteo, args: GetWeatherArgs, units: Units, default_location: str | None
) -> dict[str, Any]:
    place_text = (args.place or "").strip() or (default_location or "").strip()
    if not place_text:
        raise ToolError(
            "No place was given and no home location is set.",
            "Ask the user which city they mean (or set weather.default_location in the settings).",
        )
    when = " ".join(args.when.casefold().split()) or "now"
    _check_when(when)
    found = client.geocode(place_text)
    place = found.place
    data = client.forecast(place, units)
    current, current_units = data["current"], data["current_units"]
    daily, daily_units = data["daily"], data["daily_units"]
    days = [str(t) for t in daily["time"]]
    today = _parse_date(str(current["time"])[:10]) or _parse_date(days[0])
    assert today is not None  # forecast() checked there are days
    day = _resolve_when(when, today, days, client.forecast_days)

    result: dict[str, Any] = {"place": place.as_dict(), "when": when}
    if day is None:  # now
        result["local_time"] = str(current["time"])
        now = _current(current, current_units)
        result.update(now)
        today_index = days.index(today.isoformat()) if today.isoformat() in days else 0
        today_report = _day(daily, daily_units, today_index)
        if today_report is not None:
            result["today"] = {k: today_report[k] for k in ("high", "low") if k in today_report}
        feels = f" (feels like {now['feels_like']})" if "feels_like" in now else ""
        wind = f", wind {now['wind']}" if "wind" in now else ""
        result["summary"] = (
            f"{place.label()} now: {now['conditions']}, {now.get('temperature', '?')}{feels}{wind}."
        )
    else:
        report = _day(daily, daily_units, days.index(day.isoformat()))
        if report is None:
            raise ToolError(
                f"The forecast has no values for {day.isoformat()}.", "Try another day."
            )
        result["date"] = day.isoformat()
        result["weekday"] = WEEKDAYS[day.weekday()].capitalize()
        result.update(report)
        if when == "today":
            now = _current(current, current_units)
            result["now"] = {
                k: now[k] for k in ("conditions", "temperature", "feels_like") if k in now
            }
        label = when if when in ("today", "tomorrow") else ""
        day_words = f"{label} ({result['weekday']} {day.isoformat()})".strip()
        rain = ""
        if "precipitation_chance" in report:
            rain = f", {report['precipitation_chance']} chance of precipitation"
            if "precipitation" in report:
                rain += f" ({report['precipitation']})"
        result["summary"] = (
            f"{place.label()} {day_words}: {report['conditions']}, "
            f"low {report.get('low', '?')}, high {report.get('high', '?')}{rain}."
        )
    if found.others:
        others = "; ".join(_place_words(p.name, p.region, p.country) for p in found.others)
        result["note"] = (
            f"Other places with that name: {others}. If the user meant another one, "
            "call again with the region or country added."
        )
    return result


# --- when ----------------------------------------------------------------------------------


def _check_when(when: str) -> None:
    """Refuse a ``when`` that can never be resolved before any request is made."""
    if when in ("now", "today", "tonight", "tomorrow", "day after tomorrow"):
        return
    if _weekday(when) is not None or _parse_date(when) is not None:
        return
    raise ToolError(f"I do not understand when={when!r}.", _WHEN_HELP)


def _resolve_when(when: str, today: date, days: list[str], forecast_days: int) -> date | None:
    """The local date asked for (None for "now"), checked against the forecast's range."""
    if when == "now":
        return None
    if when in ("today", "tonight"):
        day = today
    elif when == "tomorrow":
        day = today + timedelta(days=1)
    elif when == "day after tomorrow":
        day = today + timedelta(days=2)
    else:
        weekday = _weekday(when)
        if weekday is not None:
            day = today + timedelta(days=(weekday - today.weekday()) % 7)
        else:
            parsed = _parse_date(when)
            assert parsed is not None  # _check_when passed
            day = parsed
    if day.isoformat() not in days:
        first, last = days[0], days[-1]
        if day < today:
            raise ToolError(
                f"{day.isoformat()} is in the past; I only have forecasts from {first} to {last}.",
                _WHEN_HELP,
            )
        raise ToolError(
            f"The forecast only reaches {forecast_days} days ahead ({first} to {last}); "
            f"{day.isoformat()} is outside it.",
            "Tell the user it is too far ahead to forecast.",
        )
    return day


def _weekday(when: str) -> int | None:
    words = when.split()
    if len(words) == 2 and words[0] in ("next", "this", "on", "coming"):
        words = words[1:]
    if len(words) != 1:
        return None
    word = words[0]
    for index, name in enumerate(WEEKDAYS):
        if word == name or (len(word) >= 3 and name.startswith(word)):
            return index
    return None


def _parse_date(text: str) -> date | None:
    """``2025-06-01``; a time after it (``2025-06-01T09:00``) is allowed and ignored."""
    match = re.fullmatch(r"(\d{4}-\d{2}-\d{2})(?:[tT ]\d{1,2}:\d{2}(?::\d{2})?)?", text)
    if not match:
        return None
    try:
        return date.fromisoformat(match.group(1))
    except ValueError:
        return None


# --- values ---------------------------------------------------------------------------------


def _current(current: dict[str, Any], units: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"conditions": describe(current.get("weather_code"))}
    for key, name in (
        ("temperature_2m", "temperature"),
        ("apparent_temperature", "feels_like"),
        ("relative_humidity_2m", "humidity"),
        ("precipitation", "precipitation"),
        ("cloud_cover", "cloud_cover"),
    ):
        value = _with_unit(current.get(key), units.get(key))
        if value is not None:
            out[name] = value
    wind = _with_unit(current.get("wind_speed_10m"), units.get("wind_speed_10m"))
    if wind is not None:
        direction = _compass(current.get("wind_direction_10m"))
        out["wind"] = f"{wind} from {direction}" if direction else wind
    if current.get("is_day") in (0, 1):
        out["daylight"] = bool(current["is_day"])
    return out


def _day(daily: dict[str, Any], units: dict[str, Any], index: int) -> dict[str, Any] | None:
    def at(key: str) -> Any:
        values = daily.get(key)
        return values[index] if isinstance(values, list) and index < len(values) else None

    code = at("weather_code")
    if code is None and at("temperature_2m_max") is None:
        return None
    out: dict[str, Any] = {"conditions": describe(code)}
    for key, name in (
        ("temperature_2m_max", "high"),
        ("temperature_2m_min", "low"),
        ("precipitation_sum", "precipitation"),
        ("precipitation_probability_max", "precipitation_chance"),
        ("wind_speed_10m_max", "max_wind"),
    ):
        value = _with_unit(at(key), units.get(key))
        if value is not None:
            out[name] = value
    for key in ("sunrise", "sunset"):
        value = at(key)
        if isinstance(value, str) and "T" in value:
            out[key] = value.split("T", 1)[1][:5]
    return out


def _with_unit(value: Any, unit: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = f"{value:g}" if isinstance(value, int) else f"{round(float(value), 1):g}"
    unit_text = unit if isinstance(unit, str) else ""
    if not unit_text:
        return number
    return f"{number}{unit_text}" if unit_text == "%" else f"{number} {unit_text}"


def _compass(degrees: Any) -> str:
    if isinstance(degrees, bool) or not isinstance(degrees, int | float):
        return ""
    return _COMPASS[round(float(degrees) % 360 / 45) % 8]


def _place_words(*parts: str) -> str:
    seen: list[str] = []
    for part in parts:
        if part and part not in seen:
            seen.append(part)
    return ", ".join(seen)
