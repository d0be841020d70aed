"""The app icon, drawn at run time so no binary asset is needed in the package."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QIcon, QPainter, QPixmap


def app_icon(badge: int = 0) -> QIcon:
    """A blue rounded square with a white "B"; ``badge`` > 0 adds a red count (approvals)."""
    icon = QIcon()
    for size in (16, 24, 32, 48, 64, 128, 256):
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
        if badge > 0:
            r = size * 0.45
            p.setBrush(QBrush(QColor("#dc2626")))
            p.setPen(Qt.PenStyle.NoPen)
            p.drawEllipse(QRectF(size - r, 0, r, r))
            font.setPixelSize(max(int(r * 0.7), 6))
            p.setFont(font)
            p.setPen(QColor("white"))
            p.drawText(QRectF(size - r, 0, r, r), Qt.AlignmentFlag.AlignCenter, str(min(badge, 9)))
        p.end()
        icon.addPixmap(pix)
    return icon
