"""The system prompt, tools and request the prefix-state tests share with their child process."""

from __future__ import annotations

from typing import Any

SYSTEM: dict[str, Any] = {"role": "system", "content": "You are a test assistant. Answer briefly."}
USER = "What is the weather in Paris?"


def tool(name: str, description: str, **props: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string", "description": v} for k, v in props.items()},
                "required": list(props),
            },
        },
    }


TOOLS = [
    tool("get_weather", "Weather for a place.", place="A city, e.g. Paris."),
    tool("list_folder", "List a folder.", path="A folder, e.g. ~/Documents."),
    tool("set_timer", "Start a timer.", duration="How long, e.g. 10 minutes."),
]
