"""The engine setting: which addresses prompts may go to, and the `botpsy engine` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from keyring.backends import fail

from botpsy_desktop.core.config import (
    Config,
    EngineSettings,
    engine_origin,
    normalize_engine_url,
    plain_http_problem,
)
from botpsy_desktop.core.errors import ConfigError
from botpsy_desktop.core.paths import Paths
from botpsy_desktop.core.secrets import KeyringUnavailable, SecretStore, engine_entry
from tests.helpers.models import REPO_ROOT


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://gpu-box:8080", True),
        ("https://10.0.0.5", True),
        ("http://127.0.0.1:8080", True),
        ("http://localhost:8080", True),
        ("http://[::1]:8080", True),
        ("http://127.8.9.10:1", True),
        ("http://192.168.1.20:8080", False),
        ("http://gpu-box:8080", False),
        ("http://localhost.example.com:8080", False),
    ],
)
def test_prompts_go_unencrypted_only_to_this_computer(url: str, allowed: bool) -> None:
    problem = plain_http_problem(normalize_engine_url(url), allow_plain_http=False)
    assert (problem is None) is allowed
    if problem:
        assert "unencrypted" in problem and "mail, calendar and file contents" in problem
    assert plain_http_problem(normalize_engine_url(url), allow_plain_http=True) is None


@pytest.mark.parametrize(
    "bad",
    ["gpu-box:8080", "ftp://host", "http://", "https://user:pw@host", "https://host/?q=1"],
)
def test_an_address_that_is_no_server_address_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        normalize_engine_url(bad)


def test_the_setting_round_trips_and_an_invalid_file_is_reported(tmp_path: Path) -> None:
    paths = Paths(tmp_path / "c", tmp_path / "d", tmp_path / "k")
    config = Config()
    assert config.engine.url is None  # local by default
    config.engine = EngineSettings(url="https://gpu-box:8080/", allow_plain_http=False)
    config.save(paths)
    again = Config.load(paths)
    assert again.engine.url == "https://gpu-box:8080"
    saved = json.loads(paths.config_file.read_text())["engine"]  # no place for a key in it
    assert set(saved) == {
        "url",
        "allow_plain_http",
        "connect_timeout_s",
        "read_timeout_s",
        "request_timeout_s",
        "answer_timeout_s",
    }
    paths.config_file.write_text(json.dumps({"engine": {"url": "gpu-box"}}))
    with pytest.raises(ConfigError, match=r"engine\.url"):
        Config.load(paths)


def test_an_api_key_belongs_to_one_server_origin() -> None:
    assert engine_origin("https://gpu-box:8080/base") == "https://gpu-box:8080"
    assert engine_origin("https://gpu-box") == "https://gpu-box:443"
    assert engine_origin("http://[::1]:9") == "http://[::1]:9"
    assert engine_entry(engine_origin("https://a:1")) != engine_entry(engine_origin("https://b:1"))
    # an engine key is not an account's password, even for an account named like it
    store = SecretStore(fail.Keyring())
    store.set("engine", "account-pw", session_only=True)
    with pytest.raises(KeyringUnavailable):
        store.get("", entry=engine_entry("https://engine:443"))


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(home), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=120,
        check=False,
    )


def test_the_cli_refuses_plain_http_and_an_unreachable_server_is_said_plainly(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    refused = cli(home, "engine", "set", "http://192.168.1.20:8080")
    assert refused.returncode == 1
    assert "unencrypted" in refused.stderr and "--allow-plain-http" in refused.stderr
    assert not (home / "config" / "config.json").exists()  # nothing saved
    # a loopback address where nothing listens: tried first, so not saved; said in one line
    saved = cli(home, "engine", "set", "http://127.0.0.1:9")
    assert saved.returncode == 1 and "Cannot reach the engine at http://127.0.0.1:9" in saved.stderr
    assert "http://127.0.0.1:9 was not saved" in saved.stderr
    assert "`botpsy engine local`" in saved.stderr
    assert json.loads(cli(home, "engine", "show", "--json").stdout)["engine"] == "local"
    # a server set earlier that is down now: said plainly
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "config.json").write_text(
        json.dumps({"engine": {"url": "http://127.0.0.1:9"}}), encoding="utf-8"
    )
    shown = json.loads(cli(home, "engine", "show", "--json").stdout)
    assert shown["engine"] == "llama-server" and shown["url"] == "http://127.0.0.1:9"
    assert shown["status"].startswith("not working: Cannot reach")
    asked = cli(home, "ask", "hello")
    assert asked.returncode == 1 and "Cannot reach the engine" in asked.stderr
    assert "runs on this computer" in cli(home, "engine", "local").stdout
    assert json.loads(cli(home, "engine", "show", "--json").stdout)["engine"] == "local"
