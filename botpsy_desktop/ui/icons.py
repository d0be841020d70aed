"""The app and tray icons: shipped PNGs (botpsy_desktop/assets/icons), drawn if they are missing."""

from __future__ import annotations

import sys
from typing import Literal

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QGuiApplication, QIcon, QPainter, QPixmap

from botpsy_desktop.ui.assets import asset

APP_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
TRAY_SIZES = (16, 22, 24, 32, 48, 64)
TEMPLATE_SIZES = (18, 36)
Panel = Literal["light", "dark"]


def shipped_pixmaps(name: str, sizes: tuple[int, ...]) -> list[QPixmap]:
    """``icons/{name}-{size}.png`` for each size; empty if any is missing or unreadable."""
    pixmaps = []
    for size in sizes:
        path = asset(f"icons/{name}-{size}.png")
        pix = QPixmap(str(path)) if path is not None else QPixmap()
        if pix.isNull() or pix.width() != size:
            return []
        pixmaps.append(pix)
    return pixmaps


def _drawn(size: int) -> QPixmap:
    """The fallback app icon: a blue rounded square with a white "B"."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setBrush(QBrush(QColor("#2563eb")))
    p.setPen(Qt.PenStyle.NoPen)
    p.drawRoundedRect(QRectF(0, 0, size, size), size * 0.22, size * 0.22)
    font = QFont()
    font.setBold(True)
    font.setPixelSize(int(size * 0.62))
    p.setFont(font)
    p.setPen(QColor("white"))
    p.drawText(QRectF(0, 0, size, size), Qt.AlignmentFlag.AlignCenter, "B")
    p.end()
    return pix


def _with_badge(pix: QPixmap, badge: int) -> QPixmap:
    """A copy of ``pix`` with a red count in the top right corner (pending approvals)."""
    out = pix.copy()
    size = out.width()
    r = size * 0.45
    p = QPainter(out)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setBrush(QBrush(QColor("#dc2626")))
    p.setPen(Qt.PenStyle.NoPen)
    p.drawEllipse(QRectF(size - r, 0, r, r))
    font = QFont()
    font.setBold(True)
    font.setPixelSize(max(int(r * 0.7), 6))
    p.setFont(font)
    p.setPen(QColor("white"))
    p.drawText(QRectF(size - r, 0, r, r), Qt.AlignmentFlag.AlignCenter, str(min(badge, 9)))
    p.end()
    return out


def _icon(pixmaps: list[QPixmap], badge: int) -> QIcon:
    icon = QIcon()
    for pix in pixmaps:
        icon.addPixmap(_with_badge(pix, badge) if badge > 0 else pix)
    return icon


def app_icon(badge: int = 0) -> QIcon:
    """The BotPsy icon (a speech bubble with a face); ``badge`` > 0 adds a red count."""
    pixmaps = shipped_pixmaps("botpsy", APP_SIZES) or [_drawn(s) for s in APP_SIZES]
    return _icon(pixmaps, badge)


def panel_scheme() -> Panel | None:
    """Light or dark, as the desktop's colour scheme says; None when it does not say."""
    app = QGuiApplication.instance()
    if not isinstance(app, QGuiApplication):
        return None
    scheme = app.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return "dark"
    if scheme == Qt.ColorScheme.Light:
        return "light"
    return None


def tray_icon(badge: int = 0, panel: Panel | None = None) -> QIcon:
    """The tray icon: a one-colour glyph picked for the panel, with a rim for the other kind.

    macOS gets a template image (the menu bar colours it) unless there is a badge to show;
    Windows, and desktops that do not say light or dark, get the full-colour app icon.
    """
    if sys.platform == "darwin" and badge == 0:
        template = shipped_pixmaps("tray-template", TEMPLATE_SIZES)
        if template:
            icon = _icon(template, 0)
            icon.setIsMask(True)
            return icon
    panel = panel or (panel_scheme() if sys.platform.startswith("linux") else None)
    glyph = shipped_pixmaps(f"tray-{panel}", TRAY_SIZES) if panel else []
    return _icon(glyph, badge) if glyph else app_icon(badge)
