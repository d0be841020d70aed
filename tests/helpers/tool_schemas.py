"""Two small tool schemas (an alarm with every JSON type, the weather with an enum) that the
engine tests and the remote-engine tests constrain tool calls to."""

from __future__ import annotations

from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "set_alarm",
            "description": "Set an alarm.",
            "parameters": {
                "type": "object",
                "properties": {
                    "hour": {"type": "integer", "minimum": 0, "maximum": 23},
                    "minute": {"type": "integer"},
                    "repeat": {"type": "string", "enum": ["never", "daily", "weekdays"]},
                    "loud": {"type": "boolean"},
                },
                "required": ["hour", "minute", "repeat", "loud"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["unit"],
            },
        },
    },
]
