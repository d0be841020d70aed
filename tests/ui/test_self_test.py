"""`botpsy-desktop --self-test`: as a fresh process with no display and on Xvfb (xcb), and
in-process with a model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from botpsy_desktop.ui.main import main
from tests.helpers.models import REPO_ROOT
from tests.helpers.services import needs, programs

CHECKS = ["qt", "assets", "window", "alarms", "llama.cpp", "model", "agent"]


def lines_by_check(out: str) -> dict[str, str]:
    """{check name: its line} from the self-test's output."""
    found = {}
    for line in out.splitlines():
        status, _, rest = line.partition(" ")
        name = rest.strip().split(":", 1)[0]
        if status in ("ok", "skip", "FAIL") and name in CHECKS:
            found[name] = line
    return found


def test_a_fresh_process_with_no_display_passes_without_a_model(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "BOTPSY_HOME")
    }
    env["HOME"] = str(tmp_path / "home")  # nothing may touch the real user folders
    run = subprocess.run(
        [sys.executable, "-m", "botpsy_desktop.ui.main", "--self-test"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    checks = lines_by_check(run.stdout)
    assert list(checks) == CHECKS
    assert checks["model"].startswith("skip model: no --model given")
    assert "platform offscreen" in checks["qt"]
    assert "alarm.wav" in checks["assets"] and "catalog.json" in checks["assets"]
    assert "APScheduler rang" in checks["alarms"]
    assert "create_folder waited for approval" in checks["agent"]
    assert run.stdout.rstrip().splitlines()[-1].startswith("self-test passed: 6 ok")
    # the throw-away profile is gone and the app wrote nothing to the home folder (libpulse
    # may leave its own ~/.config/pulse)
    profile = Path(run.stdout.splitlines()[0].rsplit("profile ", 1)[1])
    assert not profile.exists()
    assert not list((tmp_path / "home").rglob("*botpsy*"))


@needs(programs("xvfb-run"), "xvfb-run (an X server)", "apt install xvfb xauth")
def test_with_a_display_it_checks_the_xcb_platform(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "BOTPSY_HOME")}
    env["HOME"] = str(tmp_path / "home")
    run = subprocess.run(
        ["xvfb-run", "-a", sys.executable, "-m", "botpsy_desktop.ui.main", "--self-test"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    checks = lines_by_check(run.stdout)
    assert "platform xcb" in checks["qt"], checks["qt"]
    assert checks["window"].startswith("ok   window: shown (xcb)"), checks["window"]


def test_the_platform_follows_the_display_and_an_explicit_choice() -> None:
    from botpsy_desktop.ui.selftest import self_test_platform

    assert self_test_platform({"DISPLAY": ":1"}, "linux") == "xcb"
    assert self_test_platform({}, "linux") == "offscreen"
    assert self_test_platform({"DISPLAY": ":1"}, "darwin") == "offscreen"  # XQuartz: not Qt's
    assert self_test_platform({"DISPLAY": ":1", "QT_QPA_PLATFORM": "wayland"}, "linux") == (
        "wayland"
    )


@pytest.mark.model
def test_in_process_with_the_tiny_model_keeps_the_profile_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.helpers.models import tiny_qwen35_gguf

    home = tmp_path / "profile"
    code = main(["--self-test", "--model", str(tiny_qwen35_gguf()), "--home", str(home)])
    out = capsys.readouterr().out
    assert code == 0, out
    checks = lines_by_check(out)
    assert all(line.startswith("ok") for line in checks.values()), out
    assert "(qwen35, F16)" in checks["model"] and "tokens at" in checks["model"]
    assert "botpsy-synthetic-tiny · F16" in checks["window"]
    assert "llama-cpp-python 0.3.36" in checks["llama.cpp"]
    assert (home / "files" / "Documents" / "Self-test").is_dir()
    assert (home / "data" / "conversations.sqlite3").is_file()


def test_a_model_that_does_not_load_fails_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf file")
    code = main(["--self-test", "--model", str(bad), "--home", str(tmp_path / "p")])
    out = capsys.readouterr().out
    assert code == 1
    checks = lines_by_check(out)
    assert checks["window"].startswith("FAIL window: the window could not load the model:")
    assert checks["model"].startswith("FAIL model:") and "broken.gguf" in checks["model"]
    # the other checks still ran and said so
    assert checks["assets"].startswith("ok") and checks["agent"].startswith("ok")
    assert out.rstrip().splitlines()[-1].startswith("self-test FAILED (window, model)")


def test_a_home_folder_in_use_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "config").mkdir()
    assert main(["--self-test", "--home", str(tmp_path)]) == 2
    assert "is not an empty folder" in capsys.readouterr().out
