"""Tool servers (MCP): configuration, connections and their tools, behind our gate."""

from botpsy_desktop.adapters.mcp.client import RemoteTool, ServerConnection, ServerError
from botpsy_desktop.adapters.mcp.config import (
    ServeConfig,
    ServerBook,
    ServerConfig,
    ToolSwitch,
    default_import_sources,
    server_from_json,
)
from botpsy_desktop.adapters.mcp.tools import ServerHub, hint_words, make_server_tool, namespaced

__all__ = [
    "RemoteTool",
    "ServeConfig",
    "ServerBook",
    "ServerConfig",
    "ServerConnection",
    "ServerError",
    "ServerHub",
    "ToolSwitch",
    "default_import_sources",
    "hint_words",
    "make_server_tool",
    "namespaced",
    "server_from_json",
]
