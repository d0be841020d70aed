"""The profile's processes see each other's requests (core/busy.py): a shared lock on one file."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from botpsy_desktop.core.busy import ANSWERING, PREPARING, Busy

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="flock: POSIX only")

HOLDER = """
import sys, time
from pathlib import Path
from botpsy_desktop.core.busy import ANSWERING, Busy
busy = Busy(shared=Path(sys.argv[1]))
with busy.hold(ANSWERING):
    print("answering", flush=True)
    time.sleep(600)
"""


def test_a_request_in_another_process_is_seen_until_that_process_is_gone(tmp_path: Path) -> None:
    shared = tmp_path / "answering.lock"
    here = Busy(linger_s=0.0, shared=shared)
    assert not here.answering_elsewhere() and here.reason() == ""
    other = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(shared)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "answering"
        assert here.answering_elsewhere()
        assert here.reason() == ANSWERING  # the documents index waits for it too
    finally:
        other.kill()  # killed, not ended: the kernel drops its lock with it
        other.wait()
        assert other.stdout is not None
        other.stdout.close()
    deadline = time.monotonic() + 10
    while here.answering_elsewhere():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert here.reason() == ""


def test_only_answering_is_shared_and_a_process_does_not_see_itself(tmp_path: Path) -> None:
    shared = tmp_path / "answering.lock"
    first, second = Busy(linger_s=0.0, shared=shared), Busy(linger_s=0.0, shared=shared)
    with first.hold(PREPARING):
        assert not second.answering_elsewhere()  # preparing yields; it stops nobody
    with first.hold(ANSWERING):
        assert not first.answering_elsewhere()
        with first.hold(ANSWERING):  # two requests of one process: one lock
            assert second.answering_elsewhere()
        assert second.answering_elsewhere()
    assert not second.answering_elsewhere()


def test_without_a_shared_file_only_this_process_counts(tmp_path: Path) -> None:
    alone = Busy(linger_s=0.0)
    with Busy(linger_s=0.0, shared=tmp_path / "answering.lock").hold(ANSWERING):
        assert not alone.answering_elsewhere() and alone.reason() == ""
