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


ASKS = {
    "read": "never (it only reads)",
    "reversible": "only when the request holds untrusted content (a web page, an email, a "
    "file, a tool server's output); otherwise it runs at once and can be undone",
    "ask": "always",
}


def cmd_tools(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from botpsy_desktop.agent.gate import Decision

    items = []
    for tool in app.registry:
        tier = tool.tier_for({}).value
        # the gate's own decision for a request the person typed (a clean context), so that
        # this list says what happens, with every setting (agent.ask_before_every_change)
        decision = app.gate.check(tool, {}).decision
        items.append(
            {
                **tool.schema()["function"],
                "effects": sorted(e.value for e in tool.effects),
                "tier": tier,
                "needs_approval": decision is Decision.ASK,
                "asks": "always" if decision is Decision.ASK else ASKS.get(tier, "always"),
            }
        )
    if args.json:
        json.dump(items, out, ensure_ascii=False, indent=2)
        out.write("\n")
        return EXIT_OK
    for item in items:
        params = ", ".join(item["parameters"]["properties"])
        flag = ""
        if item["needs_approval"]:
            flag = " (always asks)"
        elif item["tier"] == "reversible":
            flag = " (runs at once when you ask; Undo)"
        print(f"{item['name']}({params}) [{', '.join(item['effects'])}]{flag}", file=out)
        print(f"    {item['description'].splitlines()[0]}", file=out)
    return EXIT_OK
