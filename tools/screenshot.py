"""Render the real window, the approval dialog and the quick-command box to PNG files.

    xvfb-run -a -s "-screen 0 1280x900x24" python tools/screenshot.py --out assets/screenshots

Runs on a throw-away profile with a few demo files and replayed model output (no model needed),
drives the window like a user (type, send, wait), and saves what it shows.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from PySide6.QtWidgets import QApplication  # noqa: E402

from botpsy_desktop.app import build_app  # noqa: E402
from botpsy_desktop.ui.style import STYLE  # noqa: E402


def call(function: str, **params: object) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={function}>\n{body}</function>\n</tool_call>"


def wait(qt: QApplication, condition: object, timeout_s: float = 20.0) -> None:
    import time

    end = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < end:  # type: ignore[operator]
        qt.processEvents()
        time.sleep(0.01)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=ROOT / "assets" / "screenshots")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    work = Path(tempfile.mkdtemp(prefix="botpsy-shot-"))
    files = work / "home"
    (files / "Documents").mkdir(parents=True)
    for name, size in (
        ("taxes-2025.pdf", 182_331),
        ("lease.pdf", 96_204),
        ("notes.md", 1_204),
        ("holiday-plan.txt", 3_870),
    ):
        (files / "Documents" / name).write_bytes(b"x" * size)
    profile = work / "profile"
    (profile / "config").mkdir(parents=True)
    (profile / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}}), encoding="utf-8"
    )
    # two published tool servers (pip: mcp-server-time, mcp-server-git) for Settings > Tool servers
    servers = {
        "time": {
            "command": "mcp-server-time",
            "tools": {"get_current_time": {"effects": ["read"]}},
        },
        "git": {
            "command": "mcp-server-git",
            "tools": {"git_status": {"effects": ["read"]}, "git_reset": {"enabled": False}},
        },
    }
    (profile / "config" / "mcp.json").write_text(
        json.dumps({"mcpServers": servers}), encoding="utf-8"
    )
    thought = "The user wants the PDFs in Documents. I'll search that folder.\n</think>\n\n"
    replay = work / "replay.json"
    replay.write_text(
        json.dumps(
            [
                # the first request of a model: the tool prefix is evaluated (recorded progress
                # of a 2-core machine, replayed at its pace; stopped after the screenshot)
                {
                    "text": "Hello! How can I help?",
                    "prompt_progress": [[0, 5598, 0.0], [1920, 5598, 20.0], [5598, 5598, 60.0]],
                },
                {
                    "text": thought + call("find_files", pattern="*.pdf", folder="Documents"),
                    "thinking_open": True,
                },
                "You have **2 PDFs** in Documents:\n\n- `taxes-2025.pdf` (178 KB)\n"
                "- `lease.pdf` (94 KB)\n\nWant me to move them into a *PDFs* folder?",
                call(
                    "write_text_note",
                    path="Documents/todo.md",
                    text="- file the 2025 taxes\n- renew the lease",
                ),
                "All right, I did not write the note.",
                call("list_folder", path="Documents"),
                "Documents has 4 files: two PDFs, notes.md and holiday-plan.txt.",
                call("set_timer", duration="10 minutes", label="Tea"),
                "Your tea timer is set: it rings in 10 minutes.",
                # a small model claims what it did not do: no tool ran
                "Done! Your alarm is set for 7:00 tomorrow morning.",
            ]
        ),
        encoding="utf-8",
    )

    qt = QApplication(sys.argv[:1])
    qt.setStyleSheet(STYLE)
    app = build_app(profile)
    from botpsy_desktop.ui.main_window import MainWindow
    from botpsy_desktop.ui.quick import QuickCommandBox

    window = MainWindow(app, replay=str(replay))
    window.resize(1100, 720)
    window.show()
    wait(qt, lambda: window.model_label.text() != "Loading model…")
    # the first request's progress, where the reply will appear (then stopped and forgotten)
    window.input.setPlainText("Hello")
    window.send()
    wait(
        qt,
        lambda: window.chat.progress is not None and "1,920" in window.chat.progress.text.text(),
        40,
    )
    wait(qt, lambda: False, 0.3)
    saved = [args.out / "first-request-progress.png"]
    window.grab().save(str(saved[-1]))
    window.stop()
    wait(qt, lambda: not window.busy)
    app.store.delete(window.conversation_id)
    window.new_conversation()
    window.refresh_conversations()
    window.think.setChecked(True)
    window.input.setPlainText("Which PDFs do I have in Documents?")
    window.send()
    wait(qt, lambda: not window.busy)
    for card in window.chat.cards.values():
        card.toggle.setChecked(True)
    wait(qt, lambda: False, 0.5)
    saved.append(args.out / "main-window.png")
    window.grab().save(str(saved[-1]))
    first_conversation = window.conversation_id

    window.think.setChecked(False)
    window.input.setPlainText("Write a to-do note: file the taxes, renew the lease.")
    window.send()
    # the conversation has read what find_files returned: the note asks, naming that source
    wait(qt, lambda: bool(window.open_dialogs))
    dialog = window.open_dialogs[0]
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "approval-dialog.png")
    dialog.grab().save(str(saved[-1]))
    dialog.details_toggle.setChecked(True)  # the tool and its JSON, for those who look
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "approval-dialog-details.png")
    dialog.grab().save(str(saved[-1]))
    dialog.deny_button.click()
    wait(qt, lambda: not window.busy)

    quick = QuickCommandBox(window.engine)
    quick.popup()
    quick.line.setText("what's in my Documents?")
    quick.run()
    wait(qt, lambda: not quick.request_id)
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "quick-command.png")
    quick.grab().save(str(saved[-1]))
    quick.hide()

    # a small change asked for in a clean conversation runs at once; its card offers Undo
    window.new_conversation()
    window.input.setPlainText("Set a tea timer for 10 minutes")
    window.send()
    wait(qt, lambda: not window.busy)
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "undo-card.png")
    window.grab().save(str(saved[-1]))

    # an answer that claims an action no tool carried out says so plainly
    window.new_conversation()
    window.input.setPlainText("Wake me at 7 tomorrow")
    window.send()
    wait(qt, lambda: not window.busy)
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "claimed-action.png")
    window.grab().save(str(saved[-1]))

    # the first conversation reopened: the note it was refused stays "not approved"
    window.open_conversation(first_conversation)
    for card in window.chat.cards.values():
        card.toggle.setChecked(card.status == "denied")
    wait(qt, lambda: False, 0.5)
    window.chat.verticalScrollBar().setValue(window.chat.verticalScrollBar().maximum())
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "reloaded-refused.png")
    window.grab().save(str(saved[-1]))

    # a scheduled (background) run asks for approval: it waits in the queue, the status bar
    # counts it, and the pending-approvals panel shows it
    import threading

    from botpsy_desktop.llm.engines.replay import ReplayBackend
    from botpsy_desktop.ui.style import DARK

    note = call(
        "write_text_note",
        path="Documents/morning-summary.md",
        text="- 3 new mails (1 from the landlord)\n- lease renewal due Friday",
    )
    read = call("read_text_file", path="Documents/notes.md")  # then the note asks
    background = app.session(ReplayBackend([read, note, "Saved the summary."]), background=True)
    run = threading.Thread(
        target=lambda: list(background.run("Every morning at 8: summarise my new mail")),
        daemon=True,
    )
    run.start()
    wait(qt, lambda: window.pending.count() == 1)
    wait(qt, lambda: False, 1.2)  # so the panel says how long it has waited
    panel = window.show_approvals()
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "approvals-queue.png")
    panel.grab().save(str(saved[-1]))
    qt.setStyleSheet(STYLE + DARK)  # the same window in the dark theme, badge included
    panel.hide()
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "main-window-dark.png")
    window.grab().save(str(saved[-1]))
    qt.setStyleSheet(STYLE)
    panel.deny()
    run.join(10)

    from botpsy_desktop.ui.firstrun import FirstRunWizard
    from botpsy_desktop.ui.settings import SettingsDialog

    settings = SettingsDialog(app, window)
    settings.tabs.setCurrentWidget(settings.accounts)
    settings.show()
    wait(qt, lambda: bool(settings.accounts.rows))
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "settings-accounts.png")
    settings.grab().save(str(saved[-1]))
    settings.tabs.setCurrentIndex(
        next(i for i in range(settings.tabs.count()) if settings.tabs.tabText(i) == "Approvals")
    )
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "settings-approvals.png")
    settings.grab().save(str(saved[-1]))
    if settings.tool_servers is not None:
        servers_tab = settings.tool_servers
        settings.tabs.setCurrentWidget(servers_tab)
        wait(qt, lambda: servers_tab.list.count() == 2)
        servers_tab.list.setCurrentRow(1)
        wait(qt, lambda: servers_tab.tools.rowCount() > 0)
        wait(qt, lambda: False, 0.3)
        saved.append(args.out / "settings-tool-servers.png")
        settings.grab().save(str(saved[-1]))
    settings.reject()
    guide = FirstRunWizard(app, window)
    guide.show()
    wait(qt, lambda: False, 0.3)
    saved.append(args.out / "first-run.png")
    guide.grab().save(str(saved[-1]))
    guide.model_dialog.shutdown()
    guide.hide()
    for path in saved:
        print(path)
    quick.close()
    window.quitting = True
    window.close()
    app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
