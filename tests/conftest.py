"""The whole suite: a test marked ``needs`` whose program or service is missing goes through
tests.helpers.services.missing (skipped locally, a failure under CI); a hang ends the run.

pytest-timeout (``timeout`` and ``timeout_method`` in pyproject.toml) ends a test that runs past
its budget from a Python thread. That thread cannot run while another thread is stuck in C
holding Python's interpreter lock (the player deadlock in Qt's media backend was one), so each
test also arms faulthandler's watchdog, a C thread that needs no lock: past the budget plus a
margin it prints every thread's stack and ends the run with status 1.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Generator

import pytest
import pytest_timeout

from tests.helpers.services import missing

_STDERR = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "needs(present, what, install): a program or service the test needs; when it is not "
        "present the test is skipped, or fails under CI (tests/helpers/services.py)",
    )
    config.stash[_STDERR] = os.dup(2)  # the real stderr: output capture replaces fd 2 in tests


def pytest_unconfigure(config: pytest.Config) -> None:
    fd = config.stash.get(_STDERR, None)
    if fd is not None:
        os.close(fd)


def budget_s(item: pytest.Item) -> float | None:
    """The test's pytest-timeout budget (its mark, else --timeout, $PYTEST_TIMEOUT, the ini)."""
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        value = mark.args[0]
    else:
        value = pytest_timeout.get_env_settings(item.config).timeout
    return float(value) if value else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    budget = budget_s(item)
    if budget is None:
        return (yield)
    faulthandler.dump_traceback_later(
        budget + min(60.0, budget), exit=True, file=item.config.stash[_STDERR]
    )
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()


CLOCK_SENSITIVE = frozenset(
    {
        "tests/adapters/test_alarms.py",
        "tests/adapters/test_routines.py",
        "tests/adapters/test_calendar.py",
        "tests/agent/test_approvals.py",
        "tests/agent/test_scheduler.py",
        "tests/agent/test_store.py",
        "tests/cli/test_alarms_cli.py",
        "tests/cli/test_alarm_rows.py",
        "tests/cli/test_routines_cli.py",
        "tests/cli/test_routines_daemon.py",
        "tests/cli/test_approvals_restart.py",
        "tests/cli/test_caldav_bounds.py",
        "tests/cli/test_db_restore.py",
        "tests/ui/test_stored_approvals.py",
        "tests/ui/test_routines_window.py",
        "tests/ui/test_alarm_rows_window.py",
    }
)
"""The tests of alarms, routines, the calendar, reminders, parked approvals' deadlines and
backups: marked ``clock``, and run by tools/test_at_dates.py at the dates that break naive code
(a Friday or Saturday evening, a month's last day, both DST changes in Europe and the US, 29
February, 31 December 23:59, a time zone far from UTC)."""

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = os.path.relpath(str(item.path), _ROOT).replace(os.sep, "/")
        if path in CLOCK_SENSITIVE:
            item.add_marker(pytest.mark.clock)


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("needs"):
        if not mark.kwargs["present"]:
            missing(mark.kwargs["what"], mark.kwargs["install"])


@pytest.fixture(autouse=True)
def _not_the_desktop_of_whoever_runs_the_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes into the settings of the session the suite runs in: a test that wants
    a desktop (GNOME's shortcuts, dconf) starts its own (tests/helpers/desktop_session.py)."""
    monkeypatch.delenv("XDG_CURRENT_DESKTOP", raising=False)
