"""WMO weather interpretation codes, as Open-Meteo reports them, in plain words."""

from __future__ import annotations

WMO_CODES: dict[int, str] = {
    0: "clear sky",
    1: "mainly clear",
    2: "partly cloudy",
    3: "overcast",
    45: "fog",
    48: "freezing fog",
    51: "light drizzle",
    53: "drizzle",
    55: "heavy drizzle",
    56: "light freezing drizzle",
    57: "heavy freezing drizzle",
    61: "light rain",
    63: "rain",
    65: "heavy rain",
    66: "light freezing rain",
    67: "heavy freezing rain",
    71: "light snow",
    73: "snow",
    75: "heavy snow",
    77: "snow grains",
    80: "light rain showers",
    81: "rain showers",
    82: "violent rain showers",
    85: "light snow showers",
    86: "heavy snow showers",
    95: "thunderstorm",
    96: "thunderstorm with light hail",
    99: "thunderstorm with heavy hail",
}


def describe(code: object) -> str:
    """Words for a WMO code; an unknown or missing code says so instead of guessing."""
    if isinstance(code, bool) or not isinstance(code, int | float):
        return "unknown conditions"
    return WMO_CODES.get(int(code), f"unknown conditions (WMO code {int(code)})")
