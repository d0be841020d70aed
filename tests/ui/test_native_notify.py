"""Alarms ring as native notifications while the window is hidden: a real D-Bus notification
server on a private bus (Snooze/Dismiss actions), and the tray message where there is none."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.ui.desktop_notify import FreedesktopNotifications
from botpsy_desktop.ui.notify import AlarmNotifier
from tests.helpers.notification_server import ServerProcess, notification_server, private_bus
from tests.helpers.services import needs, programs

needs_dbus = needs(programs("dbus-daemon"), "dbus-daemon (a private D-Bus)", "apt install dbus")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[AlarmService, Clock]]:
    clock = Clock()
    svc = AlarmService(tmp_path / "alarms.sqlite3", tz=ZoneInfo("Europe/Paris"), now=clock)
    yield svc, clock
    svc.shutdown()


def hidden_window(qtbot: QtBot) -> QWidget:
    window = QWidget()  # the main window, closed to the tray
    qtbot.addWidget(window)
    return window


def notified(server: ServerProcess, n: int) -> list[dict[str, object]]:
    assert server.wait_for(lambda _e: len(server.notifications()) >= n, 5) is not None
    return server.notifications()


@needs_dbus
def test_an_alarm_rings_as_a_desktop_notification_with_snooze_and_dismiss(
    qtbot: QtBot, tmp_path: Path, service: tuple[AlarmService, Clock]
) -> None:
    svc, clock = service
    with notification_server() as server:
        desktop = FreedesktopNotifications(server.address)
        assert desktop.wait_ready() and desktop.actions and desktop.server == "test-server"
        notifier = AlarmNotifier(svc, tmp_path / "c.wav", None, hidden_window(qtbot), desktop)
        alarm = svc.add(AlarmKind.ALARM, clock.now + timedelta(minutes=5), label="Wake up")
        clock.now += timedelta(minutes=5)
        assert [f.id for f in svc.fire_due()] == [alarm.id]  # the scheduler thread's call

        first = notified(server, 1)[0]
        assert first["app_name"] == "BotPsy" and first["summary"] == "⏰ Wake up"
        assert "ringing: alarm" in str(first["body"]) and "Wake up" in str(first["body"])
        assert first["actions"] == [
            "default",
            "Open BotPsy",
            "snooze",
            "Snooze",
            "dismiss",
            "Dismiss",
        ]
        assert first["hints"] == {
            "urgency": 2,
            "desktop-entry": "botpsy-desktop",
            "category": "x-botpsy.alarm",
        }
        assert notifier.windows == []  # the buttons are on the notification
        qtbot.waitUntil(lambda: bool(notifier.native), timeout=5000)

        server.invoke(int(str(first["id"])), "snooze")  # the user clicks Snooze
        qtbot.waitUntil(lambda: svc.ringing() == [], timeout=5000)
        snoozed = svc.get(alarm.id)
        assert snoozed is not None and snoozed.next_ring is not None

        clock.now += timedelta(minutes=9)
        assert [f.snoozed for f in svc.fire_due()] == [True]
        second = notified(server, 2)[1]
        assert "after a snooze" in str(second["body"])
        qtbot.waitUntil(lambda: bool(notifier.native), timeout=5000)
        server.invoke(int(str(second["id"])), "dismiss")
        qtbot.waitUntil(lambda: not notifier.native, timeout=5000)
        assert svc.ringing() == []

        # dismissed elsewhere (the tray menu, `botpsy`): the notification is closed
        clock.now += timedelta(days=1)
        svc.add(AlarmKind.TIMER, clock.now + timedelta(seconds=30), label="Tea")
        clock.now += timedelta(seconds=30)
        svc.fire_due()
        third = notified(server, 3)[2]
        qtbot.waitUntil(lambda: bool(notifier.native), timeout=5000)
        svc.dismiss(svc.ringing()[0].id)
        notifier.sweep()
        closed = server.wait_for(lambda e: e == {"event": "close", "id": third["id"]}, 5)
        assert closed is not None and not notifier.native
        notifier.close()
        desktop.shutdown()


@needs_dbus
def test_a_server_without_actions_gets_a_plain_notification_and_the_alarm_window(
    qtbot: QtBot, tmp_path: Path, service: tuple[AlarmService, Clock]
) -> None:
    svc, clock = service
    with notification_server(capabilities=["body"]) as server:
        desktop = FreedesktopNotifications(server.address)
        assert desktop.wait_ready() and not desktop.actions
        notifier = AlarmNotifier(svc, tmp_path / "c.wav", None, hidden_window(qtbot), desktop)
        svc.add(AlarmKind.REMINDER, clock.now + timedelta(minutes=1), label="Call mum")
        clock.now += timedelta(minutes=1)
        svc.fire_due()
        note = notified(server, 1)[0]
        assert note["summary"] == "⏰ Call mum" and note["actions"] == []
        # Snooze and Dismiss cannot be on the notification: the small window offers them
        qtbot.waitUntil(lambda: bool(notifier.windows), timeout=5000)
        notifier.windows[0].dismiss_button.click()
        assert svc.ringing() == []
        notifier.close()
        desktop.shutdown()


@needs_dbus
def test_no_notification_server_means_not_available(qtbot: QtBot) -> None:
    with private_bus() as address:  # a session bus with nobody owning the notification name
        desktop = FreedesktopNotifications(address)
        assert desktop.wait_ready() is False
        assert desktop.notify("x", "summary", "body") is False
        desktop.shutdown()


def test_the_window_open_shows_the_alarm_window_not_a_notification(
    qtbot: QtBot, tmp_path: Path, service: tuple[AlarmService, Clock]
) -> None:
    svc, clock = service
    window = QWidget()
    qtbot.addWidget(window)
    window.show()
    notifier = AlarmNotifier(svc, tmp_path / "c.wav", None, window)
    svc.add(AlarmKind.TIMER, clock.now + timedelta(minutes=1), label="Pasta")
    clock.now += timedelta(minutes=1)
    svc.fire_due()
    qtbot.waitUntil(lambda: bool(notifier.windows), timeout=5000)
    assert notifier.sent == []
    notifier.windows[0].snooze_button.click()
    assert svc.ringing() == []
    notifier.close()


FALLBACK = textwrap.dedent(
    """
    import sys, time
    from datetime import UTC, datetime, timedelta
    from pathlib import Path
    from zoneinfo import ZoneInfo
    from PySide6.QtWidgets import QApplication, QLabel, QSystemTrayIcon, QWidget
    app = QApplication(sys.argv[:1])
    from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
    from botpsy_desktop.ui.desktop_notify import FreedesktopNotifications
    from botpsy_desktop.ui.icons import tray_icon
    from botpsy_desktop.ui.notify import AlarmNotifier

    def pump(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    work = Path(sys.argv[1])
    now = [datetime(2026, 12, 1, 6, 0, tzinfo=UTC)]
    service = AlarmService(work / "alarms.sqlite3", tz=ZoneInfo("UTC"), now=lambda: now[0])
    print("tray", QSystemTrayIcon.isSystemTrayAvailable())
    icon = QSystemTrayIcon(tray_icon())
    icon.show()
    window = QWidget()  # hidden: closed to the tray
    desktop = FreedesktopNotifications(sys.argv[2])
    print("dbus", desktop.wait_ready())
    notifier = AlarmNotifier(service, work / "c.wav", icon, window, desktop)
    pump(1.0)
    service.add(AlarmKind.ALARM, now[0] + timedelta(minutes=1), label="Wake up")
    now[0] += timedelta(minutes=1)
    service.fire_due()
    pump(1.0)
    for w in app.topLevelWidgets():
        if w.isVisible() and w.metaObject().className() == "QBalloonTip":
            print("balloon", [l.text() for l in w.findChildren(QLabel) if l.text()])
    print("windows", len(notifier.windows), notifier.windows[0].isVisible())
    notifier.windows[0].dismiss_button.click()
    print("ringing", service.ringing())
    notifier.close()
    desktop.shutdown()
    service.shutdown()
    """
)


@needs_dbus
@needs(
    programs("xvfb-run", "trayer"),
    "xvfb-run or trayer (an X server and a tray host)",
    "apt install xvfb xauth trayer",
)
def test_without_a_notification_server_the_tray_shows_the_message(tmp_path: Path) -> None:
    script = tmp_path / "fallback.py"
    script.write_text(FALLBACK, encoding="utf-8")
    with private_bus() as address:
        shell = (
            "trayer --edge top --align right --widthtype request --height 24 & "
            "sleep 1.5; "
            f"{sys.executable} {script} {tmp_path} '{address}'; code=$?; kill %1; exit $code"
        )
        env = {k: v for k, v in os.environ.items() if k != "QT_QPA_PLATFORM"}
        env["QT_QPA_PLATFORM"] = "xcb"
        env["DBUS_SESSION_BUS_ADDRESS"] = address  # no StatusNotifier host: the X11 tray
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
        proc = subprocess.run(
            ["xvfb-run", "-a", "-s", "-screen 0 1024x768x24", "bash", "-c", shell],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
            check=False,
        )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-2000:]
    assert "tray True" in out and "dbus False" in out, out
    balloon = [line for line in out.splitlines() if line.startswith("balloon ")]
    assert len(balloon) == 1, out + proc.stderr[-1000:]
    assert "⏰ Wake up" in balloon[0] and "ringing: alarm" in balloon[0]
    # a tray message has no buttons: the small window offers Snooze and Dismiss
    assert "windows 1 True" in out and "ringing []" in out
