"""`botpsy tools`: the tools the assistant can use, their effects and who approves them."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_OK


def add_command(sub: Any) -> None:
    """The `tools` subcommand and its options."""
    tools = sub.add_parser("tools", help="list the tools the assistant can use")
    tools.add_argument("--json", action="store_true", help="schemas and effects as JSON")


def cmd_tools(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    items = [
        {
            **tool.schema()["function"],
            "effects": sorted(e.value for e in tool.effects),
            "needs_approval": not tool.read_only,
        }
        for tool in app.registry
    ]
    if args.json:
        json.dump(items, out, ensure_ascii=False, indent=2)
        out.write("\n")
        return EXIT_OK
    for item in items:
        params = ", ".join(item["parameters"]["properties"])
        flag = " (asks first)" if item["needs_approval"] else ""
        print(f"{item['name']}({params}) [{', '.join(item['effects'])}]{flag}", file=out)
        print(f"    {item['description'].splitlines()[0]}", file=out)
    return EXIT_OK
