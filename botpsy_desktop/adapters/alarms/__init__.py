"""Alarms, timers and reminders: a scheduler-backed service and the model's tools over it."""

from botpsy_desktop.adapters.alarms.records import (
    Alarm,
    AlarmFired,
    AlarmKind,
    MissedAlarm,
    time_zone,
)
from botpsy_desktop.adapters.alarms.service import AlarmService
from botpsy_desktop.adapters.alarms.store import UnreadableRow
from botpsy_desktop.adapters.alarms.tools import alarms_tools

__all__ = [
    "Alarm",
    "AlarmFired",
    "AlarmKind",
    "AlarmService",
    "MissedAlarm",
    "UnreadableRow",
    "alarms_tools",
    "time_zone",
]
