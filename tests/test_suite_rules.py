"""The suite's own rules, run for real in a child pytest: a missing service skips locally, fails
under CI; a test that hangs is stopped by its time budget."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.helpers.models import REPO_ROOT

PROBE = textwrap.dedent(
    """
    import time

    from tests.helpers.services import missing, needs

    @needs(False, "frobnicator (a service nobody has)", "apt install frobnicator")
    def test_marked() -> None:
        pass

    def test_direct() -> None:
        missing("Frobnicator", "apt install frobnicator")

    @needs(True, "the shell", "apt install bash")
    def test_present() -> None:
        pass
    """
)
HANG = textwrap.dedent(
    """
    import ctypes
    import threading

    def test_hangs() -> None:
        threading.Event().wait()  # forever, in Python: the time budget fails the test

    def test_goes_on() -> None:
        pass
    """
)
STUCK = textwrap.dedent(
    """
    import ctypes

    def test_stuck_holding_the_interpreter_lock() -> None:
        # like the player's deadlock: a thread waits on a mutex in C and keeps the lock
        libc = ctypes.PyDLL(None)  # PyDLL: calls keep the interpreter lock
        mutex = ctypes.create_string_buffer(64)  # zeroed: a default, unlocked pthread mutex
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # never returns
    """
)


def child_pytest(folder: Path, ci: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    (folder / "conftest.py").write_text(
        "from tests.conftest import (  # noqa: F401\n"
        "    pytest_configure, pytest_runtest_protocol, pytest_runtest_setup, pytest_unconfigure\n"
        ")\n",
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", *args],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_missing_service_skips_with_its_reason_outside_ci(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    run = child_pytest(tmp_path, None)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 2 skipped in" in run.stdout
    assert (
        "frobnicator (a service nobody has) is not installed (apt install frobnicator; "
        "tools/install-test-deps.sh installs what apt can)" in run.stdout
    )


def test_under_ci_a_missing_service_is_a_failure(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE, encoding="utf-8")
    run = child_pytest(tmp_path, "true")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 1 passed, 1 error in" in run.stdout  # the mark fails in setup
    assert "CI runs every test, but Frobnicator is not installed" in run.stdout
    assert "skipped" not in run.stdout


def test_a_test_that_hangs_fails_within_its_budget_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "test_hang.py").write_text(HANG, encoding="utf-8")
    run = child_pytest(tmp_path, None, "-o", "timeout=2")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 failed, 1 passed" in run.stdout
    assert "Failed: Timeout (>2.0s) from pytest-timeout" in run.stdout


def test_a_thread_stuck_in_c_holding_the_lock_ends_the_run_with_every_stack(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_stuck.py").write_text(STUCK, encoding="utf-8")
    run = child_pytest(tmp_path, None, "-o", "timeout=1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Timeout (0:00:02)!" in run.stderr
    assert 'test_stuck.py", line 9 in test_stuck_holding_the_interpreter_lock' in run.stderr


def test_every_clock_sensitive_file_exists_and_is_marked() -> None:
    """A renamed or moved test file would silently drop out of the runs at other dates."""
    from tests.conftest import CLOCK_SENSITIVE

    root = Path(__file__).resolve().parent.parent
    missing = sorted(p for p in CLOCK_SENSITIVE if not (root / p).is_file())
    assert not missing, f"tests/conftest.py CLOCK_SENSITIVE names missing files: {missing}"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "clock", *CLOCK_SENSITIVE],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    collected = {line.split("::", 1)[0] for line in done.stdout.splitlines() if "::" in line}
    assert collected == set(CLOCK_SENSITIVE)
