"""Print the README's table of what runs, what asks and what never runs without you.

    python tools/gate_table.py

Builds the shipped app (``build_app``) on a throw-away profile with a mail and a calendar
account and an address-book folder (nothing is contacted) and reads each tool's declaration
from the registry: its tier (a rule is probed with "all" in each target field), the fields
whose text a read sends to a service, and whether it declares an inverse (Undo).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop.agent.gate import MAX_CHANGES_AT_ONCE  # noqa: E402
from botpsy_desktop.app import build_app  # noqa: E402
from botpsy_desktop.core.accounts import AccountBook, CalDAVAccount, MailAccount  # noqa: E402
from botpsy_desktop.core.paths import Paths  # noqa: E402
from botpsy_desktop.core.tools import Tier, Tool  # noqa: E402


def profile(work: Path) -> Path:
    home = work / "profile"
    (home / "config").mkdir(parents=True)
    (work / "files").mkdir()
    (work / "contacts").mkdir()
    config = {
        "files": {"roots": [str(work / "files")]},
        "music": {"folders": [], "player": "none"},
        "contacts": {"files": [str(work / "contacts")]},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    paths = Paths.resolve(home)
    paths.ensure()
    AccountBook.for_paths(paths).save(
        [
            MailAccount(
                name="mail",
                username="me@example.com",
                address="me@example.com",
                imap_host="imap.example.com",
                smtp_host="smtp.example.com",
            ),
            CalDAVAccount(name="calendar", username="me", url="https://dav.example.com/"),
        ]
    )
    return home


def rule_words(tool: Tool) -> str | None:
    """What decides the tier where it is a rule of what the call would do (its docstring)."""
    if isinstance(tool.tier, Tier) or tool.tier is None:
        return None
    doc = " ".join((tool.tier.__doc__ or "").split())
    return doc or None


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="botpsy-gate-table-"))
    app = build_app(profile(work))
    try:
        rows: dict[str, list[str]] = {"read": [], "sends": [], "reversible": [], "ask": []}
        notes: list[str] = []
        for name in app.registry.names():
            tool = app.registry.get(name)
            assert tool is not None
            assessment = app.gate.policy.assess(tool, {})
            tier = app.gate.tier(tool, {}, assessment)
            if tier is Tier.READ:
                if tool.sends:
                    sent = "every argument" if "*" in tool.sends else ", ".join(tool.sends)
                    rows["sends"].append(f"`{name}` ({sent})")
                else:
                    rows["read"].append(f"`{name}`")
            elif tier is Tier.REVERSIBLE:
                rows["reversible"].append(f"`{name}`")
                words = rule_words(tool)
                if words:
                    notes.append(f"`{name}` {words}")
            else:
                rows["ask"].append(f"`{name}`")
                words = rule_words(tool)
                if words:
                    notes.append(f"`{name}` {words}")
        print(
            "| | Tools (declared in their adapters) | In a request you typed | "
            "Once the request has read content you did not type |"
        )
        print("|---|---|---|---|")
        print(f"| **Runs** (looks, changes nothing) | {', '.join(rows['read'])} | runs | runs |")
        print(
            "| **Runs, unless untrusted text would leave** (a look-up that sends a field to an "
            f"online service) | {', '.join(rows['sends'])} | runs | asks |"
        )
        print(
            "| **Runs at once, with Undo** (a small local change with a declared inverse) | "
            f"{', '.join(rows['reversible'])} | runs, up to {MAX_CHANGES_AT_ONCE} changes per "
            "request (more ask); its card offers Undo (asks with “Ask before every change”) | "
            "asks |"
        )
        print(
            "| **Never runs without you** (sends, money, personal data, deletes, cancels, bulk, "
            f"no way back, routines) | {', '.join(rows['ask'])} | asks | asks |"
        )
        if notes:
            print()
            print("Where what the call would really do decides: " + "; ".join(notes) + ".")
    finally:
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
