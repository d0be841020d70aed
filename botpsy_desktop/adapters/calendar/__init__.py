"""Calendar and tasks: a local .ics calendar and CalDAV accounts, and the model's tools."""

from botpsy_desktop.adapters.calendar.service import (
    CalendarService,
    EventChanges,
    calendar_service,
)
from botpsy_desktop.adapters.calendar.sources import LOCAL, CalDAVSource, LocalSource, Source
from botpsy_desktop.adapters.calendar.tools import calendar_tools

__all__ = [
    "LOCAL",
    "CalDAVSource",
    "CalendarService",
    "EventChanges",
    "LocalSource",
    "Source",
    "calendar_service",
    "calendar_tools",
]
