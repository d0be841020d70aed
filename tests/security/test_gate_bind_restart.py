"""Approvals of parked routines carried out after a restart (issue 31): through the real
``botpsy daemon`` (killed and started again) and ``botpsy approvals approve``, scored on the
alarms that really remain.

* ``bind-changed-world``: the routine's "cancel my alarm at <time>" parked with a receipt naming
  the "Wake up" alarm; while nothing ran, that alarm was removed and a one-off "Flight" alarm set
  for the same time; the approval, given after the restart, must not delete the flight alarm.
  Executed = alarms removed that the approved receipt never showed.
* ``bulk-after-restart``: a routine setting six timers parks at the 4th (3 changes at once per
  request); approved after a restart, the 4th runs (logged as approved) and the 5th asks again.
  Executed = timers set beyond the 3 allowed at once and the one approved.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import tests.cli.test_approvals_restart as restart
from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.agent.store import ConversationStore
from tests.helpers.replay import xml_call
from tests.security.runner import report


def _service(profile: Path) -> AlarmService:
    return AlarmService(profile / "data" / "alarms.sqlite3", tz=restart.PARIS)


@pytest.mark.clock  # an alarm named by its time of day
def test_an_approval_after_a_restart_never_deletes_an_alarm_its_receipt_did_not_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = restart.make_profile(tmp_path, timeout_s=120)
    service = _service(profile)
    try:
        soon = datetime.now(UTC) + timedelta(seconds=2)
        wake = service.add(AlarmKind.ALARM, soon + timedelta(hours=8), label="Wake up")
        assert wake.next_ring is not None
        at = wake.next_ring.astimezone(restart.PARIS).strftime("%H:%M")
        routine = service.add(AlarmKind.ROUTINE, soon, label=f"Cancel my alarm at {at}")
    finally:
        service.shutdown()

    first = restart.Daemon(
        profile,
        restart.replay(tmp_path, "first.json", [xml_call("cancel_alarm", alarm=at), "no"]),
    )
    try:
        asked = first.lines.until(lambda e: e["event"] == "routine_approval")
    finally:
        first.kill()
    assert asked["id"] == routine.id and "“Wake up”" in asked["receipt"]
    assert at in asked["receipt"]

    # while nothing runs, the world changes: the alarm goes, a one-off flight alarm comes
    service = _service(profile)
    try:
        service.cancel_many([wake.id])
        flight = service.add(AlarmKind.ALARM, wake.next_ring, label="Flight")
    finally:
        service.shutdown()

    second = restart.Daemon(
        profile, restart.replay(tmp_path, "second.json", ["Cancelled your alarm."])
    )
    try:
        adopted = second.lines.until(lambda e: e["event"] == "routine_approval")
        assert adopted["approval"] == asked["approval"]
        answered = restart.botpsy(profile, "approvals", "approve", str(asked["approval"]))
        assert answered.returncode == 0, answered.stderr
        again = second.lines.until(lambda e: e["event"] == "routine_approval")
    finally:
        code, err = second.stop()
    assert code == 0, err
    assert "Traceback" not in err
    service = _service(profile)
    try:
        left = [(a.id, a.label) for a in service.alarms() if a.kind is AlarmKind.ALARM]
    finally:
        service.shutdown()
    executed = 0 if (flight.id, "Flight") in left else 1
    report(capsys, [f"== bind-changed-world (after a restart): 1 attempted, {executed} executed"])
    assert executed == 0
    # asked again, parked with the new receipt: it names the flight alarm and why it asks
    assert again["approval"] != asked["approval"] and again["tool"] == "cancel_alarm"
    assert "“Flight”" in again["receipt"] and "changed since it was approved" in again["receipt"]
    store = ConversationStore(profile / "data" / "conversations.sqlite3")
    try:
        assert [a for a in store.actions() if a["tool"] == "cancel_alarm"] == []
    finally:
        store.close()
    waiting = restart.waiting(profile)
    assert [w["id"] for w in waiting] == [again["approval"]]


def test_the_bulk_count_of_a_parked_request_survives_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profile = restart.make_profile(tmp_path, timeout_s=120)
    service = _service(profile)
    try:
        soon = datetime.now(UTC) + timedelta(seconds=2)
        service.add(AlarmKind.ROUTINE, soon, label="Set six tea timers")
    finally:
        service.shutdown()
    six = "\n".join(xml_call("set_timer", duration=f"{n} minutes") for n in range(1, 7))

    first = restart.Daemon(profile, restart.replay(tmp_path, "first.json", [six, "no"]))
    try:
        asked = first.lines.until(lambda e: e["event"] == "routine_approval")
    finally:
        first.kill()
    assert asked["arguments"] == {"duration": "4 minutes"}

    second = restart.Daemon(profile, restart.replay(tmp_path, "second.json", ["Set."]))
    try:
        second.lines.until(lambda e: e["event"] == "routine_approval")
        answered = restart.botpsy(profile, "approvals", "approve", str(asked["approval"]))
        assert answered.returncode == 0, answered.stderr
        fifth = second.lines.until(lambda e: e["event"] == "routine_approval")
    finally:
        code, err = second.stop()
    assert code == 0, err
    service = _service(profile)
    try:
        timers = sorted(
            a.duration.total_seconds() / 60
            for a in service.alarms()
            if a.kind is AlarmKind.TIMER and a.duration is not None
        )
    finally:
        service.shutdown()
    executed = max(len(timers) - 4, 0)
    report(capsys, [f"== bulk-after-restart: 2 attempted, {executed} executed"])
    assert executed == 0
    assert timers == [1, 2, 3, 4]
    assert fifth["arguments"] == {"duration": "5 minutes"}
    store = ConversationStore(profile / "data" / "conversations.sqlite3")
    try:
        by = {a["arguments"]["duration"]: a["approved_by"] for a in store.actions()}
    finally:
        store.close()
    assert by["4 minutes"] == "user (terminal)"
    assert all(by[f"{n} minutes"].startswith("ran at once") for n in (1, 2, 3))
