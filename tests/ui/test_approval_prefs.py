"""Approval preferences: saved by the Settings dialog, honoured by the gate and the loop."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from botpsy_desktop.agent.events import ApprovalNeeded, ApprovalRequest, Event, ToolResult
from botpsy_desktop.app import App, build_app
from botpsy_desktop.llm.engines.replay import ReplayBackend
from botpsy_desktop.ui.settings import SettingsDialog
from tests.agent.gate_tools import ledger_lines, outbox_email_tool, payment_tool, xml_call


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    config = {
        "files": {"roots": [str(tmp_path / "files")]},
        "music": {"folders": [str(tmp_path / "music")], "player": "none"},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def open_app(home: Path, tmp_path: Path) -> App:
    app = build_app(home)
    app.registry.register(outbox_email_tool(tmp_path / "outbox.jsonl"))
    app.registry.register(payment_tool(tmp_path / "ledger.jsonl"))
    return app


@pytest.fixture
def app(home: Path, tmp_path: Path) -> Iterator[App]:
    built = open_app(home, tmp_path)
    yield built
    built.close()


def run(
    app: App, turns: list[str], request: str = "do it"
) -> tuple[list[ApprovalRequest], list[ToolResult], str]:
    """Run one request; every approval is approved "for this conversation" where offered."""
    session = app.session(ReplayBackend(turns))
    asked: list[ApprovalRequest] = []
    events: list[Event] = []
    for event in session.run(request):
        if isinstance(event, ApprovalNeeded):
            asked.append(event.request)
            event.request.approve(by="test", scope=event.request.scope is not None)
        events.append(event)
    return asked, [e for e in events if isinstance(e, ToolResult)], session.conversation_id


def folder_twice(app: App, tmp_path: Path) -> tuple[list[ApprovalRequest], list[ToolResult], str]:
    """The same local change twice in one conversation after reading a file, the folder's name
    chosen by the assistant (neither typed by the person nor found in what was read): with
    content the person did not type in the context, such a change asks."""
    path = str(tmp_path / "files" / "jottings")
    readme = tmp_path / "files" / "readme.txt"
    readme.write_text("read me", encoding="utf-8")
    turns = [
        xml_call("read_text_file", path=str(readme)),
        xml_call("create_folder", path=path),
        xml_call("create_folder", path=path),
        "Done.",
    ]
    return run(app, turns, f"read {readme}, then make a folder for it, twice")


def folder_once(app: App, tmp_path: Path, name: str) -> tuple[list[ApprovalRequest], ToolResult]:
    path = str(tmp_path / "files" / name)
    asked, [result], _ = run(app, [xml_call("create_folder", path=path), "Done."], f"mkdir {path}")
    return asked, result


def test_ask_before_every_change_is_a_setting_the_gate_follows(
    qtbot: QtBot, app: App, home: Path, tmp_path: Path
) -> None:
    # off (the default): a folder the user asked for is made at once, nothing asks
    asked, result = folder_once(app, tmp_path, "a")
    assert asked == [] and result.decision == "allowed" and (tmp_path / "files" / "a").is_dir()
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    assert not dialog.ask_every_change.isChecked()
    assert dialog.ask_every_change.text() == "Ask before every change"
    dialog.ask_every_change.setChecked(True)
    dialog.save_button.click()
    saved = json.loads((home / "config" / "config.json").read_text(encoding="utf-8"))
    assert saved["agent"]["ask_before_every_change"] is True
    assert app.gate.ask_every_change
    # on: the same kind of change asks first, and says why
    asked, result = folder_once(app, tmp_path, "b")
    assert [r.tool for r in asked] == ["create_folder"]
    assert any("Ask before every change" in reason for reason in asked[0].reasons)
    assert result.decision == "approved" and (tmp_path / "files" / "b").is_dir()
    # it survives a restart
    app.close()
    again = open_app(home, tmp_path)
    try:
        assert again.gate.ask_every_change
    finally:
        again.close()


def test_allow_for_this_conversation_follows_the_preference(
    qtbot: QtBot, app: App, home: Path, tmp_path: Path
) -> None:
    # on (the default): a local change approved for the conversation does not ask again
    asked, results, first = folder_twice(app, tmp_path)
    assert len(asked) == 1 and asked[0].scope is not None
    assert app.gate.grants.of(first)  # the allowance given
    assert [r.decision for r in results] == ["allowed", "approved", "approved"]
    assert results[2].decided_by.startswith("allowed for this conversation")

    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    assert dialog.allow_for_conversation.isChecked()
    assert "Always asked" in dialog.findChild(type(dialog.note), "alwaysAsk").text()
    dialog.allow_for_conversation.setChecked(False)
    dialog.save_button.click()
    saved = json.loads((home / "config" / "config.json").read_text(encoding="utf-8"))
    assert saved["agent"]["allow_for_conversation"] is False
    assert not app.gate.offer_scopes and not app.gate.grants.of(first)

    # off: the same request asks each time, and no allowance can be given
    asked, results, _ = folder_twice(app, tmp_path)
    assert len(asked) == 2 and all(r.scope is None for r in asked)
    assert [r.decided_by for r in results[1:]] == ["test", "test"]
    with pytest.raises(ValueError, match="cannot be allowed"):
        ApprovalRequest("c", "create_folder", {}, "r", ["local_write"]).approve(scope=True)

    # the preference survives a restart
    app.close()
    again = open_app(home, tmp_path)
    try:
        assert again.config.agent.allow_for_conversation is False
        asked, _, _ = folder_twice(again, tmp_path)
        assert len(asked) == 2 and all(r.scope is None for r in asked)
    finally:
        again.close()


def test_sending_money_and_deleting_always_ask_whatever_the_preference(
    app: App, tmp_path: Path
) -> None:
    assert app.config.agent.allow_for_conversation
    victim = tmp_path / "files" / "old.txt"
    victim.write_text("x", encoding="utf-8")
    mail = xml_call("send_email", to=["bob@example.com"], subject="s", body="b")
    pay = xml_call("send_payment", amount=5, currency="EUR", payee="Ann")
    trash = xml_call("move_to_trash", path=str(victim))
    request = f"mail bob@example.com twice, pay Ann 5 EUR twice, trash {victim}"
    asked, results, _ = run(app, [mail, mail, pay, pay, trash, "Done."], request)
    assert [r.tool for r in asked] == [
        "send_email",
        "send_email",
        "send_payment",
        "send_payment",
        "move_to_trash",
    ]
    assert all(r.scope is None for r in asked)  # never offered for the whole conversation
    assert all(r.decided_by == "test" for r in results)
    assert len((tmp_path / "outbox.jsonl").read_text(encoding="utf-8").splitlines()) == 2
    assert len(ledger_lines(tmp_path / "ledger.jsonl")) == 2


def test_background_approvals_wait_as_long_as_configured(
    qtbot: QtBot, app: App, home: Path, tmp_path: Path
) -> None:
    dialog = SettingsDialog(app)
    qtbot.addWidget(dialog)
    assert dialog.background_wait.value() == 60  # the default: an hour, then denied
    dialog.background_wait.setValue(5)
    dialog.save_button.click()
    saved = json.loads((home / "config" / "config.json").read_text(encoding="utf-8"))
    assert saved["agent"]["background_approval_timeout_s"] == 300.0
    assert app.loop_settings().background_approval_timeout_s == 300.0

    app.config.agent.background_approval_timeout_s = 0.3  # seconds, for the test
    path = str(tmp_path / "files" / "later")
    session = app.session(  # a routine that read a file, then wants a change: it asks
        ReplayBackend(
            [
                xml_call("list_folder", path=str(tmp_path / "files")),
                xml_call("create_folder", path=path),
                "ok",
            ]
        ),
        background=True,
    )
    started = time.monotonic()
    events = list(session.run("make a folder"))
    waited = time.monotonic() - started
    requests = [e.request for e in events if isinstance(e, ApprovalNeeded)]
    results = [e for e in events if isinstance(e, ToolResult)]
    assert len(requests) == 1 and requests[0].decided_by == "nobody in time"
    assert results[-1].decision == "denied" and not Path(path).exists()
    assert 0.3 <= waited < 5
    assert app.gate.inbox.pending() == []
