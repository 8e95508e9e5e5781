"""The app icon, drawn with QPainter (assets/icon.png is this, saved at 256×256)."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QImage, QPainter, QPainterPath


def draw_icon(size: int = 256) -> QImage:
    img = QImage(size, size, QImage.Format_ARGB32)
    img.fill(Qt.transparent)
    p = QPainter(img)
    p.setRenderHint(QPainter.Antialiasing)
    bubble = QPainterPath()
    bubble.addRoundedRect(QRectF(size * 0.08, size * 0.1, size * 0.84, size * 0.66), size * 0.16, size * 0.16)
    tail = QPainterPath()
    tail.moveTo(size * 0.28, size * 0.7)
    tail.lineTo(size * 0.22, size * 0.92)
    tail.lineTo(size * 0.48, size * 0.74)
    p.fillPath(bubble.united(tail), QColor("#3d6fb6"))
    p.setPen(QColor("white"))
    font = QFont()
    font.setPixelSize(int(size * 0.34))
    font.setBold(True)
    p.setFont(font)
    p.drawText(QRectF(size * 0.08, size * 0.1, size * 0.84, size * 0.66), Qt.AlignCenter, "AI")
    p.end()
    return img
