"""Print the README's table of what runs, what asks and what never runs without you.

    python tools/gate_table.py

Builds the shipped app (``build_app``) on a throw-away profile with a mail and a calendar
account (nothing is contacted) and reads each tool's declaration from the registry: its tier
(a rule is probed with "all" in each target field), the fields whose text a read sends to a
service, and whether it declares an inverse (Undo).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from botpsy_desktop.app import build_app  # noqa: E402
from botpsy_desktop.core.accounts import AccountBook, CalDAVAccount, MailAccount  # noqa: E402
from botpsy_desktop.core.paths import Paths  # noqa: E402
from botpsy_desktop.core.tools import Tier, Tool  # noqa: E402


def profile(work: Path) -> Path:
    home = work / "profile"
    (home / "config").mkdir(parents=True)
    (work / "files").mkdir()
    config = {
        "files": {"roots": [str(work / "files")]},
        "music": {"folders": [], "player": "none"},
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


def all_probe(tool: Tool) -> Tier | None:
    """The tier of the call with "all" in every target field, where a rule makes it differ."""
    if isinstance(tool.tier, Tier) or tool.tier is None or not tool.targets:
        return None
    probed = tool.tier_for({k: "all" for k in tool.targets})
    return probed if probed is not tool.tier_for({}) else None


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
                    rows["sends"].append(f"`{name}` ({', '.join(tool.sends)})")
                else:
                    rows["read"].append(f"`{name}`")
            elif tier is Tier.REVERSIBLE:
                rows["reversible"].append(f"`{name}`")
                probed = all_probe(tool)
                if probed is Tier.ASK:
                    notes.append(f"`{name}` with “all” always asks")
            else:
                rows["ask"].append(f"`{name}`")
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
            f"{', '.join(rows['reversible'])} | runs; its card offers Undo (asks with "
            "“Ask before every change”) | asks |"
        )
        print(
            "| **Never runs without you** (sends, money, personal data, deletes, cancels, bulk, "
            f"no way back, routines) | {', '.join(rows['ask'])} | asks | asks |"
        )
        if notes:
            print()
            print("Where the arguments decide: " + "; ".join(notes) + ".")
    finally:
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
