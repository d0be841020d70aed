"""`botpsy history`: saved conversations, or one conversation's messages."""

from __future__ import annotations

import argparse
import json
from typing import Any, TextIO

from botpsy_desktop.app import App
from botpsy_desktop.cli.common import EXIT_ERROR, EXIT_OK
from botpsy_desktop.core.text import terminal_safe


def add_command(sub: Any) -> None:
    """The `history` subcommand and its options."""
    history = sub.add_parser("history", help="saved conversations, or one conversation's messages")
    history.add_argument("conversation", nargs="?", metavar="ID", help="show this conversation")
    history.add_argument("--json", action="store_true", help="print them as JSON")


OUTCOME = {"denied": "not approved, not carried out", "not-run": "not run"}


def format_history(
    messages: list[dict[str, Any]], calls: list[dict[str, Any]] | None = None
) -> list[str]:
    """A stored conversation as terminal lines; an interrupted reply or tool call says so, each
    tool result says how its call ended (from ``calls``, the store's record of them), and an
    answer that described an action no tool carried out keeps its note."""
    outcomes = {c.get("call_id"): c for c in calls or []}
    lines: list[str] = []
    for m in messages:
        role, text = m.get("role"), str(m.get("content") or "").strip()
        cut = " (interrupted)" if m.get("interrupted") else ""
        if role == "user":
            lines.append(f"you> {text}")
        elif role == "assistant":
            if m.get("pending"):
                lines.append(f"botpsy (still being written)> {text}")
            elif text or cut:
                lines.append(f"botpsy{cut}> {text or '(stopped before the reply started)'}")
            if m.get("note"):
                lines.append(f"[note] {m['note']}")
            for call in m.get("tool_calls") or []:
                fn = call.get("function", {})
                args = json.dumps(fn.get("arguments") or {}, ensure_ascii=False)
                lines.append(f"[tool] {fn.get('name', '?')} {args}")
        elif role == "tool":
            name = m.get("name", "")
            if cut:
                lines.append(f"[tool {name} interrupted: the app stopped while it ran]")
            else:
                outcome = outcomes.get(m.get("tool_call_id"))
                how = ""
                if outcome is not None:
                    ok, decision = bool(outcome.get("ok")), str(outcome.get("decision"))
                    how = ": done" if ok else f": {OUTCOME.get(decision, 'failed')}"
                lines.append(f"[tool {name}{how}] {text[:300]}")
    return lines


def cmd_history(app: App, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """List conversations, or print one; interrupted replies are shown as interrupted."""
    if args.conversation is None:
        infos = app.store.conversations()
        if args.json:
            json.dump([vars(i) for i in infos], out, ensure_ascii=False, indent=2)
            out.write("\n")
        for i in [] if args.json else infos:
            print(terminal_safe(f"{i.id}  {i.message_count:4d} messages  {i.title}"), file=out)
        return EXIT_OK
    if not app.store.exists(args.conversation):
        print(f"botpsy: there is no conversation {args.conversation}.", file=err)
        return EXIT_ERROR
    messages = app.store.messages(args.conversation, pending=True)
    if args.json:
        json.dump(messages, out, ensure_ascii=False, indent=2)
        out.write("\n")
    else:
        calls = app.store.tool_calls(args.conversation)
        print(terminal_safe("\n".join(format_history(messages, calls))), file=out)
    return EXIT_OK
