"""The window and tray icons come from the shipped PNGs; the tray glyph follows the panel."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QColor, QImage
from pytestqt.qtbot import QtBot

from botpsy_desktop.ui.assets import asset
from botpsy_desktop.ui.icons import APP_SIZES, app_icon, shipped_pixmaps, tray_icon
from botpsy_desktop.ui.notify import alarm_sound


def centre_lightness(image: QImage) -> int:
    """Median lightness of the opaque pixels around the middle of the glyph (its fill colour)."""
    values = [
        QColor(image.pixel(x, y)).lightness()
        for x in range(image.width() // 4, 3 * image.width() // 4)
        for y in range(image.height() // 3, 2 * image.height() // 3)
        if QColor.fromRgba(image.pixel(x, y)).alpha() > 200
    ]
    return sorted(values)[len(values) // 2]


def largest_channel_difference(a: QImage, b: QImage) -> int:
    """The largest difference of one colour or alpha channel between two same-sized images,
    compared premultiplied (where transparent pixels carry no colour)."""
    assert a.size() == b.size()
    fmt = QImage.Format.Format_ARGB32_Premultiplied
    a, b = a.convertToFormat(fmt), b.convertToFormat(fmt)
    worst = 0
    for y in range(a.height()):
        for x in range(a.width()):
            p, q = a.pixel(x, y), b.pixel(x, y)  # premultiplied ARGB as read back
            for shift in (0, 8, 16, 24):
                worst = max(worst, abs((p >> shift & 0xFF) - (q >> shift & 0xFF)))
    return worst


def test_the_app_icon_is_the_shipped_one_at_every_size(qtbot: QtBot) -> None:
    icon = app_icon()
    assert sorted(s.width() for s in icon.availableSizes()) == sorted(APP_SIZES)
    shipped = QImage(str(asset("icons/botpsy-48.png")))
    # the pixmap goes through a premultiplied-alpha round trip whose rounding depends on the
    # CPU's SIMD path in Qt: the same picture is the same to within one step per channel
    assert largest_channel_difference(icon.pixmap(48, 48).toImage(), shipped) <= 1


def test_a_badge_changes_the_icon(qtbot: QtBot) -> None:
    plain = app_icon().pixmap(32, 32).toImage()
    badged = app_icon(badge=3).pixmap(32, 32).toImage()
    assert plain != badged
    assert QColor(badged.pixel(28, 4)).red() > 200  # the red count in the top right corner


def test_the_tray_glyph_is_dark_on_light_panels_and_light_on_dark_ones(qtbot: QtBot) -> None:
    on_light = tray_icon(panel="light").pixmap(48, 48).toImage()
    on_dark = tray_icon(panel="dark").pixmap(48, 48).toImage()
    assert centre_lightness(on_light) < 80 < 180 < centre_lightness(on_dark)


def test_missing_icons_fall_back_to_drawing(qtbot: QtBot) -> None:
    assert shipped_pixmaps("no-such-icon", (16, 32)) == []
    assert asset("icons/no-such-icon-16.png") is None


def test_the_alarm_sound_is_the_shipped_one(tmp_path: Path) -> None:
    assert alarm_sound(tmp_path / "chime.wav") == asset("sounds/alarm.wav")
    assert not (tmp_path / "chime.wav").exists()
