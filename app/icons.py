"""The window's icons: Lucide (ISC, assets/icons/LICENSE-lucide.txt), bundled as SVG and tinted
from the design tokens. Lucide draws with `stroke="currentColor"`; each tint is that colour written
into the SVG and rendered at 1×, 1.5×, 2× and 3× (Qt hands a 2× screen the 2× drawing instead of
scaling a small one up). A widget given an icon by `use()` keeps its name and tone as properties,
so a change of look (app/theme.py) tints every such icon again without a registry of widgets."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from PySide6.QtCore import QByteArray, QRectF, QSize, Qt
from PySide6.QtGui import QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

from app.theme import colour
from engine.api import install_dir

ICONS = install_dir() / "assets" / "icons"
SCALES = (1, 1.5, 2, 3)


@functools.cache
def _svg(name: str) -> bytes:
    return (ICONS / f"{name}.svg").read_bytes()


def tinted_file(name: str, fill: str) -> str:
    """A copy of `name`'s SVG in `fill`, as a file: for the stylesheet's `image: url(...)` (a combo
    box's arrow), which takes a path and cannot tint."""
    folder = Path(tempfile.gettempdir()) / "offline-assistant-icons"
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}-{fill.lstrip('#')}.svg"
    if not path.exists():
        path.write_bytes(_svg(name).replace(b"currentColor", fill.encode()))
    return path.as_posix()


@functools.cache
def pixmap(name: str, fill: str, size: int, scale: float = 1) -> QPixmap:
    """`name`'s drawing in `fill` (#rrggbb), `size` logical pixels at `scale` device pixels each."""
    device = round(size * scale)
    out = QPixmap(device, device)
    out.fill(Qt.transparent)
    out.setDevicePixelRatio(scale)
    renderer = QSvgRenderer(QByteArray(_svg(name).replace(b"currentColor", fill.encode())))
    painter = QPainter(out)
    painter.setRenderHint(QPainter.Antialiasing)
    renderer.render(painter, QRectF(0, 0, size, size))
    painter.end()
    return out


def icon(name: str, tone: str = "text", size: int = 18, on_tone: str | None = None) -> QIcon:
    """The icon in the current look: `tone` (a token: "text", "muted", "accent", "accent_text"...)
    normally, "muted" disabled, "accent_text" on a selected row, and `on_tone` when checked."""
    return _icon(name, colour(tone), colour(on_tone or tone), colour("muted"), colour("accent_text"), size)


@functools.lru_cache(maxsize=512)
def _icon(name: str, fill: str, on_fill: str, disabled: str, selected: str, size: int) -> QIcon:
    out = QIcon()
    for scale in SCALES:
        for mode, off, on in ((QIcon.Normal, fill, on_fill), (QIcon.Active, fill, on_fill),
                              (QIcon.Disabled, disabled, disabled), (QIcon.Selected, selected, selected)):
            out.addPixmap(pixmap(name, off, size, scale), mode, QIcon.Off)
            out.addPixmap(pixmap(name, on, size, scale), mode, QIcon.On)
    return out


def use(widget, name: str, tone: str = "text", size: int = 18, on_tone: str | None = None):
    """Give a button (or action) the icon `name`; it is tinted again whenever the look changes."""
    widget.setProperty("tintName", name)
    widget.setProperty("tintTone", tone)
    widget.setProperty("tintOnTone", on_tone or "")
    widget.setProperty("tintSize", size)
    widget.setIcon(icon(name, tone, size, on_tone))
    if hasattr(widget, "setIconSize"):  # an action has no size of its own
        widget.setIconSize(QSize(size, size))
    return widget


def retint(widgets) -> None:
    """After a change of look: every widget `use()` gave an icon takes the new tokens."""
    for widget in widgets:
        for action in widget.actions():  # a search box's magnifier
            retint_one(action)
        retint_one(widget)


def retint_one(widget) -> None:
    name = widget.property("tintName")
    if name:
        widget.setIcon(icon(name, widget.property("tintTone") or "text", int(widget.property("tintSize") or 18),
                                widget.property("tintOnTone") or None))
