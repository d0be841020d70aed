"""Log files and `botpsy doctor --bundle`: no password and no message text ever reach them."""

from __future__ import annotations

import base64
import json
import logging
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from botpsy_desktop.agent.logs import Body, log_files, log_folder, setup_logging
from botpsy_desktop.app import build_app
from botpsy_desktop.bundle import write_bundle
from botpsy_desktop.cli import main
from botpsy_desktop.core.config import LogSettings
from botpsy_desktop.core.paths import Paths

PASSWORD = "Canary-Pa55word-7f3e"
TOKEN = "hf_" + "Q" * 34
BODY = "BODYCANARY my secret plan for the party"
FILE_TEXT = "FILECANARY grandma's recipe"
REPLY = "REPLYCANARY the recipe needs flour."
READ_NOTES = (
    "<tool_call>\n<function=read_text_file>\n<parameter=path>\nnotes.txt\n</parameter>\n"
    "</function>\n</tool_call>"
)
CANARIES = (PASSWORD, TOKEN, "BODYCANARY", "FILECANARY", "REPLYCANARY")


@pytest.fixture
def profile(tmp_path: Path) -> Path:
    home = tmp_path / "profile"
    files = tmp_path / "files"
    files.mkdir()
    (files / "notes.txt").write_text(FILE_TEXT, encoding="utf-8")
    (home / "config").mkdir(parents=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"files": {"roots": [str(files)]}, "logs": {"max_bytes": 20000}}),
        encoding="utf-8",
    )
    return home


@pytest.fixture(autouse=True)
def _no_handler_left() -> Iterator[None]:
    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for handler in root.handlers:
        if handler not in before:
            root.removeHandler(handler)
            handler.close()


def ask(profile: Path, tmp_path: Path, text: str) -> dict[str, object]:
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps([READ_NOTES, REPLY]), encoding="utf-8")
    return {"code": main(["--home", str(profile), "ask", "--replay", str(replay), "--json", text])}


def everything_in(bundle: Path) -> dict[str, str]:
    with zipfile.ZipFile(bundle) as z:
        return {name: z.read(name).decode("utf-8") for name in z.namelist()}


def test_cli_logs_and_bundle_hold_no_message_text(
    profile: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert ask(profile, tmp_path, f"{BODY}; and read notes.txt, token {TOKEN}")["code"] == 0
    out = capsys.readouterr().out
    assert REPLY in out and "FILECANARY" in out  # the transcript itself has them, of course

    target = tmp_path / "bug" / "diag.zip"
    code = main(["--home", str(profile), "doctor", "--bundle", str(target)])
    err = capsys.readouterr().err
    assert code in (0, 1) and f"Diagnostics written to {target}" in err

    paths = Paths.resolve(profile)
    (log,) = log_files(paths)
    logged = log.read_text(encoding="utf-8")
    # what ran is logged...
    assert "request in " in logged and "characters not logged" in logged
    assert "tool read_text_file called" in logged and "tool read_text_file ok (allowed)" in logged
    assert "model turn 2: stop" in logged and "answer after 2 turns" in logged
    assert "botpsy-desktop" in logged and "(cli, pid" in logged
    # ...but no text of the conversation, and no token
    for canary in CANARIES:
        assert canary not in logged, canary

    files = everything_in(target)
    assert {"doctor.json", "config.json", "versions.json", "databases.json", "README.txt"} <= set(
        files
    )
    assert "logs/botpsy.log" in files and "request in" in files["logs/botpsy.log"]
    for name, text in files.items():
        for canary in CANARIES:
            assert canary not in text, (name, canary)
    databases = json.loads(files["databases.json"])
    conversations = databases["conversations.sqlite3"]
    assert conversations["integrity_check"] == ["ok"]
    assert sum(conversations["rows"].values()) > 0
    checks = json.loads(files["doctor.json"])
    assert any(c["name"] == "botpsy-desktop" for c in checks)
    assert any(c["name"] == "logs" and str(paths.data_dir) in c["detail"] for c in checks)
    assert json.loads(files["versions.json"])["python"]

    # the default place: the data folder, printed
    assert main(["--home", str(profile), "doctor", "--bundle"]) in (0, 1)
    printed = capsys.readouterr().err.split("Diagnostics written to ")[1].strip()
    assert Path(printed).is_file() and Path(printed).parent == paths.data_dir / "diagnostics"


def test_bodies_only_when_switched_on(profile: Path, tmp_path: Path) -> None:
    config = profile / "config" / "config.json"
    data = json.loads(config.read_text(encoding="utf-8"))
    data["logs"]["include_bodies"] = True
    config.write_text(json.dumps(data), encoding="utf-8")
    assert ask(profile, tmp_path, f"{BODY} with {TOKEN}")["code"] == 0
    (log,) = log_files(Paths.resolve(profile))
    logged = log.read_text(encoding="utf-8")
    assert BODY in logged and "FILECANARY" in logged and "REPLYCANARY" in logged
    assert TOKEN not in logged  # secrets go even then


def test_passwords_and_credentials_never_reach_the_log_or_the_bundle(tmp_path: Path) -> None:
    app = build_app(tmp_path / "home")
    try:
        app.secrets.set("work", PASSWORD, session_only=True)  # as `account add --session-only`
        handle = setup_logging(app.paths, app.config.logs, app.secrets.known_values)
        log = logging.getLogger("botpsy_desktop.adapters.email")
        basic = base64.b64encode(f"me@example.org:{PASSWORD}".encode()).decode()
        log.warning("login refused for me@example.org with %s", PASSWORD)
        log.info("sent headers {'Authorization': 'Basic %s'}", basic)
        logging.getLogger("httpx").warning("GET https://me:%s@cal.example.org/dav", PASSWORD)
        log.info("config password=%s, Authorization: Bearer %s", PASSWORD, TOKEN)
        log.info("the mail said %s", Body(BODY))
        try:
            raise RuntimeError(f"IMAP said: bad password {PASSWORD}")
        except RuntimeError:
            log.exception("mail check failed")
        handle.close()
        logged = handle.file.read_text(encoding="utf-8")
        assert "login refused" in logged and "Traceback" in logged and "mail check failed" in logged
        for canary in (PASSWORD, basic, TOKEN, "BODYCANARY"):
            assert canary not in logged, canary
        assert logged.count("[secret removed]") >= 5
        files = everything_in(write_bundle(app, tmp_path / "b.zip"))
        for name, text in files.items():
            for canary in (PASSWORD, basic, TOKEN, "BODYCANARY"):
                assert canary not in text, (name, canary)
    finally:
        app.close()


def test_logs_rotate_at_the_configured_size(tmp_path: Path) -> None:
    paths = Paths.resolve(tmp_path / "home")
    handle = setup_logging(paths, LogSettings(max_bytes=10_000, backups=2))
    log = logging.getLogger("botpsy_desktop.test")
    for i in range(400):
        log.info("line %d %s", i, "x" * 80)
    handle.close()
    files = log_files(paths)
    assert [f.name for f in files] == ["botpsy.log", "botpsy.log.1", "botpsy.log.2"]
    assert all(f.stat().st_size <= 10_000 for f in files)
    assert "line 399" in files[0].read_text(encoding="utf-8")
    assert log_folder(paths).stat().st_mode & 0o077 == 0
