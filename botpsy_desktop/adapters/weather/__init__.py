"""Weather from Open-Meteo (no API key): place search, current conditions and daily forecast."""

from botpsy_desktop.adapters.weather.client import OpenMeteo, Place
from botpsy_desktop.adapters.weather.tools import units_for_locale, weather_tools

__all__ = ["OpenMeteo", "Place", "units_for_locale", "weather_tools"]
