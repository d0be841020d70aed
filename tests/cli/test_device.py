"""The computer itself, end to end through the real CLI and build_app, against a real session:
PulseAudio null sinks (volume, mute and output read back from the server), GNOME's settings
through dconf (dark mode, do not disturb read back with gsettings), desktop entries started by
GLib, the kernel's battery and backlight files laid out in a folder the config names, and a
screen saver on the session bus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from botpsy_desktop.agent.events import ApprovalNeeded, Event, ToolResult
from botpsy_desktop.app import build_app
from botpsy_desktop.llm.engines.replay import ReplayBackend
from tests.helpers import desktop_session
from tests.helpers.desktop_session import DesktopSession
from tests.helpers.replay import xml_call
from tests.helpers.services import missing

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def session(tmp_path: Path) -> Iterator[DesktopSession]:
    if not desktop_session.available():
        missing("a desktop session (D-Bus, PulseAudio, gsettings, gio)", desktop_session.INSTALL)
    with desktop_session.desktop_session(tmp_path / "session") as running:
        yield running


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """The kernel's power-supply and backlight files, as a laptop has them."""
    root = tmp_path / "sys"
    bat = root / "class" / "power_supply" / "BAT0"
    bat.mkdir(parents=True)
    for name, value in {
        "type": "Battery", "capacity": "64", "status": "Discharging",
        "energy_now": "32000000", "energy_full": "50000000", "power_now": "8000000",
    }.items():  # fmt: skip
        (bat / name).write_text(value + "\n", encoding="ascii")
    ac = root / "class" / "power_supply" / "AC"
    ac.mkdir()
    (ac / "type").write_text("Mains\n", encoding="ascii")
    (ac / "online").write_text("0\n", encoding="ascii")
    light = root / "class" / "backlight" / "intel_backlight"
    light.mkdir(parents=True)
    (light / "type").write_text("raw\n", encoding="ascii")
    (light / "max_brightness").write_text("1000\n", encoding="ascii")
    (light / "brightness").write_text("800\n", encoding="ascii")
    return root


@pytest.fixture
def profile(tmp_path: Path, session: DesktopSession, sysfs: Path) -> Path:
    home = tmp_path / "profile"
    (home / "config").mkdir(parents=True)
    (tmp_path / "files").mkdir()
    config = {
        "files": {"roots": [str(tmp_path / "files")]},
        "device": {"pulse_server": session.pulse_server, "sysfs": str(sysfs)},
        "alarms": {"time_zone": "UTC"},
    }
    (home / "config" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return home


def botpsy(session: DesktopSession, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "botpsy_desktop", *args],
        cwd=ROOT,
        env={**os.environ, **session.env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ask(
    session: DesktopSession, profile: Path, request: str, *turns: str, approve: str = "deny"
) -> dict[str, Any]:
    replay = profile.parent / f"replay-{abs(hash(request))}.json"
    replay.write_text(json.dumps(list(turns)), encoding="utf-8")
    done = botpsy(
        session, "--home", str(profile), "ask", "--replay", str(replay), "--json",
        "--approve", approve, request,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def sink(session: DesktopSession, name: str | None = None) -> tuple[int, bool, str]:
    """(volume %, muted, name) of the default sink (or ``name``), read from the server."""
    import pulsectl

    with pulsectl.Pulse("botpsy-tests", server=session.pulse_server) as pulse:
        wanted = name or pulse.server_info().default_sink_name
        [found] = [s for s in pulse.sink_list() if s.name == wanted]
        return round(found.volume.value_flat * 100), bool(found.mute), str(found.name)


def gsettings(session: DesktopSession, schema: str, key: str) -> str:
    done = subprocess.run(
        ["gsettings", "get", schema, key],
        env={**os.environ, **session.env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_turn_it_down_a_bit_runs_at_once_and_undo_sets_it_back(
    session: DesktopSession, profile: Path
) -> None:
    assert sink(session)[0] == 50
    data = ask(
        session, profile, "turn it down a bit",
        xml_call("set_volume", change="-10"), "Turned down.",
    )  # fmt: skip
    [call] = data["tool_calls"]
    assert call["ok"] and call["decision"] == "allowed", call  # small and reversible: no dialog
    assert json.loads(call["result"])["message"] == "Volume 50% → 40%"
    assert sink(session)[0] == 40  # read back from the sound server
    undone = botpsy(session, "--home", str(profile), "undo", "--json")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert sink(session)[0] == 50


def test_an_undo_after_the_person_moved_the_volume_asks_and_says_why(
    session: DesktopSession, profile: Path
) -> None:
    ask(session, profile, "volume to 30", xml_call("set_volume", percent="30"), "Done.")
    assert sink(session)[0] == 30
    import pulsectl

    with pulsectl.Pulse("the-person", server=session.pulse_server) as pulse:
        pulse.volume_set_all_chans(pulse.get_sink_by_name("speakers"), 0.7)  # their own slider
    undone = botpsy(session, "--home", str(profile), "undo", "--approve", "deny", "--json")
    assert "changed since" in undone.stdout + undone.stderr, undone.stdout + undone.stderr
    assert sink(session)[0] == 70  # their change stays


def test_mute_and_the_output_are_changed_on_the_server(
    session: DesktopSession, profile: Path
) -> None:
    ask(session, profile, "mute", xml_call("mute_sound", mute="true"), "Muted.")
    assert sink(session)[1] is True
    data = ask(
        session, profile, "play the sound on my headphones",
        xml_call("choose_sound_output", output="headphones"), "Done.",
    )  # fmt: skip
    assert data["tool_calls"][0]["ok"], data
    assert sink(session)[2] == "headphones"
    status = ask(session, profile, "what's my volume?", xml_call("sound_status"), "50%.")
    shown = json.loads(status["tool_calls"][0]["result"])
    assert shown["output"] == "Headphones" and shown["volume"] == 50


def test_dark_mode_and_do_not_disturb_are_the_desktop_settings(
    session: DesktopSession, profile: Path
) -> None:
    assert gsettings(session, "org.gnome.desktop.interface", "color-scheme") == "'default'"
    ask(session, profile, "switch to dark mode", xml_call("set_appearance", mode="dark"), "Done.")
    assert gsettings(session, "org.gnome.desktop.interface", "color-scheme") == "'prefer-dark'"
    ask(
        session, profile, "don't disturb me",
        xml_call("set_do_not_disturb", on="true"), "Done.",
    )  # fmt: skip
    assert gsettings(session, "org.gnome.desktop.notifications", "show-banners") == "false"
    undone = botpsy(session, "--home", str(profile), "undo", "--json")
    assert undone.returncode == 0, undone.stdout + undone.stderr
    assert gsettings(session, "org.gnome.desktop.notifications", "show-banners") == "true"
    assert gsettings(session, "org.gnome.desktop.interface", "color-scheme") == "'prefer-dark'"


def test_brightness_and_battery_come_from_the_kernel_files(
    session: DesktopSession, profile: Path, sysfs: Path
) -> None:
    light = sysfs / "class" / "backlight" / "intel_backlight" / "brightness"
    data = ask(
        session, profile, "dim the screen to 30%",
        xml_call("set_brightness", percent="30"), "Done.",
    )  # fmt: skip
    assert json.loads(data["tool_calls"][0]["result"])["message"] == "Brightness 80% → 30%"
    assert light.read_text(encoding="ascii").strip() == "300"
    data = ask(session, profile, "how much battery?", xml_call("battery_status"), "64%.")
    battery = json.loads(data["tool_calls"][0]["result"])
    assert battery["plugged_in"] is False
    assert battery["batteries"] == [
        {"name": "BAT0", "percent": 64, "state": "discharging", "minutes_left": 240}
    ]


def test_apps_start_with_a_file_and_files_open_in_their_default_app(
    session: DesktopSession, profile: Path, tmp_path: Path
) -> None:
    sheet = session.add_app("taxsheets", "Tax Sheets", mime="text/csv")
    session.default_app("text/csv", sheet)
    (tmp_path / "files" / "taxes.csv").write_text("year,amount\n", encoding="utf-8")
    data = ask(
        session, profile, "open my tax spreadsheet",
        xml_call("open_file", path=str(tmp_path / "files" / "taxes.csv")), "Opened.",
    )  # fmt: skip
    assert data["tool_calls"][0]["decision"] == "allowed", data
    session.add_app("calc", "Pocket Calculator")
    ask(
        session, profile, "start the pocket calculator",
        xml_call("start_app", name="pocket calculator"), "Ok",
    )  # fmt: skip
    assert session.launches(2) == [
        f"Tax Sheets: {tmp_path / 'files' / 'taxes.csv'}",
        "Pocket Calculator: ",
    ]
    outside = tmp_path / "secret.csv"
    outside.write_text("x", encoding="utf-8")
    data = ask(
        session, profile, "open that",
        xml_call("start_app", name="Tax Sheets", file=str(outside)), "Sorry.",
    )  # fmt: skip
    assert not data["tool_calls"][0]["ok"]
    assert len(session.launches(3, timeout=1.0)) == 2  # nothing outside the allowed folders


def test_the_screen_locks_through_the_desktop(session: DesktopSession, profile: Path) -> None:
    data = ask(session, profile, "lock the screen", xml_call("lock_screen"), "Locked.")
    assert json.loads(data["tool_calls"][0]["result"]) == {
        "locked": True,
        "by": "org.freedesktop.ScreenSaver",
    }
    assert len(session.locks) == 1


def test_a_web_address_from_a_file_asks_a_typed_one_opens_and_cards_say_what_changed(
    session: DesktopSession, profile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in session.env.items():
        monkeypatch.setenv(key, value)
    browser = session.add_app("browser", "Browser", mime="x-scheme-handler/https", takes="%U")
    session.default_app("x-scheme-handler/https", browser)
    note = tmp_path / "files" / "mail.txt"
    note.write_text("Claim your prize at https://prize.example/win", encoding="utf-8")
    app = build_app(profile)
    try:

        def run(request: str, *turns: str) -> tuple[list[ApprovalNeeded], list[ToolResult]]:
            asked: list[ApprovalNeeded] = []
            events: list[Event] = []
            for event in app.session(ReplayBackend(list(turns))).run(request):
                if isinstance(event, ApprovalNeeded):
                    asked.append(event)
                    event.request.deny(by="test")
                events.append(event)
            return asked, [e for e in events if isinstance(e, ToolResult)]

        asked, results = run(
            f"read {note}",
            xml_call("read_text_file", path=str(note)),
            xml_call("open_web_address", url="https://prize.example/win"),
            "Opened.",
        )
        assert [a.request.tool for a in asked] == ["open_web_address"]
        assert results[-1].decision == "denied"
        assert session.launches(1, timeout=1.0) == []
        asked, results = run(
            "open https://example.org/news",
            xml_call("open_web_address", url="https://example.org/news"),
            "Opened.",
        )
        assert asked == [], [a.request.reasons for a in asked]
        assert results[0].ok
        assert session.launches(1) == ["Browser: https://example.org/news"]
        # the card says what changed, and what Undo would do
        asked, [result] = run("turn it down a bit", xml_call("set_volume", change=-10), "Ok.")
        assert asked == [] and result.summary == "Volume 50% → 40%"
        assert result.undo == "Set the volume to 50%" and result.action_id is not None
    finally:
        app.close()


def test_doctor_says_what_the_device_tools_reach(session: DesktopSession, profile: Path) -> None:
    done = botpsy(session, "--home", str(profile), "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["sound"]["status"] == "ok" and checks["sound"]["detail"] == "Speakers at 50%"
    assert checks["desktop settings"]["detail"] == "GNOME settings (light mode)"
    assert checks["brightness"]["detail"] == "80%"


def test_system_status_reads_disk_network_and_processes(
    session: DesktopSession, profile: Path
) -> None:
    data = ask(session, profile, "how is my computer doing?", xml_call("system_status"), "Fine.")
    status = json.loads(data["tool_calls"][0]["result"])
    assert status["disks"] and status["disks"][0]["total_gb"] > 0
    assert status["cpu_cores"] >= 1 and len(status["busiest"]) >= 1
    assert "online" in status["network"]


# --- a change for a while: "mute for an hour", "don't disturb me until 3" ----------------------


def test_mute_for_an_hour_is_set_back_an_hour_later_unless_changed_since(
    session: DesktopSession, profile: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime

    from botpsy_desktop.adapters.alarms import AlarmKind
    from tests.helpers.clock import Clock

    for key, value in session.env.items():
        monkeypatch.setenv(key, value)
    clock = Clock(datetime(2026, 3, 2, 9, 0, tzinfo=UTC))
    app = build_app(profile, now=clock)
    try:
        alarms = app.alarms
        assert alarms is not None

        def run(request: str, *turns: str) -> ToolResult:
            events = list(app.session(ReplayBackend(list(turns))).run(request))
            assert not any(isinstance(e, ApprovalNeeded) for e in events)
            [result] = [e for e in events if isinstance(e, ToolResult)]
            return result

        muted = run("mute for an hour", xml_call("mute_sound", mute=True, until="an hour"), "Ok")
        assert muted.ok, muted.output
        assert sink(session)[1] is True
        assert json.loads(muted.output)["until"] == "Mon 2 Mar 10:00 (in 1 h)", muted.output
        assert muted.summary.startswith("Sound muted until "), muted.summary
        [way_back] = [a for a in alarms.alarms() if a.kind is AlarmKind.RESTORE]
        assert way_back.label == "Unmute the sound"
        clock.advance(minutes=59)
        assert alarms.fire_due() == [] and sink(session)[1] is True
        clock.advance(minutes=1)
        alarms.fire_due()  # the scheduler's call: the app's listener sets it back
        assert sink(session)[1] is False
        assert [a for a in alarms.alarms() if a.kind is AlarmKind.RESTORE] == []
        [undo, _] = app.store.actions(2)
        assert undo["approved_by"] == "the way back you asked for (scheduled)"

        # changed since: the person unmuted themselves; the way back leaves it alone
        heard: list[str] = []
        assert app.restores is not None
        app.restores.said.append(heard.append)
        run("mute until 11", xml_call("mute_sound", mute=True, until="11:00"), "Ok")
        import pulsectl

        with pulsectl.Pulse("the-person", server=session.pulse_server) as pulse:
            pulse.mute(pulse.get_sink_by_name("speakers"), False)
            pulse.volume_set_all_chans(pulse.get_sink_by_name("speakers"), 0.9)
        clock.advance(hours=1)
        alarms.fire_due()
        assert sink(session)[:2] == (90, False)
        assert heard and "left as it is now" in heard[0] and "changed since" in heard[0]

        # a time that is past, or a word that is no time, changes nothing
        before = sink(session)
        bad = run("mute", xml_call("mute_sound", mute=True, until="yesterday"), "Ok")
        assert not bad.ok and sink(session) == before
    finally:
        app.close()


def test_do_not_disturb_until_a_time_missed_while_closed_is_set_back_by_the_daemon(
    session: DesktopSession, profile: Path
) -> None:
    data = ask(
        session, profile, "don't disturb me for 2 seconds",
        xml_call("set_do_not_disturb", on="true", until="2 seconds"), "Ok.",
    )  # fmt: skip
    assert data["tool_calls"][0]["ok"], data
    assert gsettings(session, "org.gnome.desktop.notifications", "show-banners") == "false"
    import time

    time.sleep(2.5)  # due while nothing ran: the daemon catches up when it starts
    daemon = subprocess.Popen(
        [sys.executable, "-m", "botpsy_desktop", "--home", str(profile), "daemon", "--json"],
        cwd=ROOT,
        env={**os.environ, **session.env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert daemon.stdout is not None
        line = daemon.stdout.readline()
        assert json.loads(line) == {
            "event": "restored",
            "text": "Done: Turn do not disturb off again.",
        }, line
        assert gsettings(session, "org.gnome.desktop.notifications", "show-banners") == "true"
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)
