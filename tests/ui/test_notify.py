"""A ringing alarm becomes a window with Snooze/Dismiss, fired by the real service's clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from pytestqt.qtbot import QtBot

from botpsy_desktop.adapters.alarms import AlarmKind, AlarmService
from botpsy_desktop.ui.notify import AlarmNotifier, AlarmWindow, chime


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_fired_alarm_shows_a_window_and_can_be_snoozed_then_dismissed(
    qtbot: QtBot, tmp_path: Path
) -> None:
    clock = Clock()
    service = AlarmService(tmp_path / "alarms.sqlite3", tz=ZoneInfo("Europe/Paris"), now=clock)
    notifier = AlarmNotifier(service, tmp_path / "chime.wav")
    alarm = service.add(AlarmKind.ALARM, clock.now + timedelta(minutes=5), label="Wake up")
    assert service.fire_due() == []
    clock.now += timedelta(minutes=5)
    fired = service.fire_due()  # what the scheduler thread calls; listeners get the event
    assert [f.id for f in fired] == [alarm.id]
    qtbot.waitUntil(lambda: bool(notifier.windows), timeout=3000)
    window = notifier.windows[0]
    assert (
        isinstance(window, AlarmWindow)
        and "Wake up" in window.findChildren(type(window.detail))[0].text()
    )
    window.snooze_button.click()
    assert window.outcome.startswith("snoozed")
    clock.now += timedelta(minutes=9)
    assert [f.snoozed for f in service.fire_due()] == [True]
    qtbot.waitUntil(
        lambda: bool(notifier.windows) and notifier.windows[-1] is not window, timeout=3000
    )
    notifier.windows[-1].dismiss_button.click()
    assert service.ringing() == []
    notifier.close()
    service.shutdown()


def test_the_chime_is_a_real_wav(tmp_path: Path) -> None:
    import wave

    with wave.open(str(chime(tmp_path / "c.wav"))) as w:
        assert w.getframerate() == 22050 and w.getnframes() > 10000
