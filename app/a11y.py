"""Accessibility: what a screen reader hears. Every interactive widget gets a name and a
description (`describe`), the tab order follows reading order (`chain`), and a finished answer is
announced politely (`announce`: it waits for the reader's current speech, never interrupts it)."""

from __future__ import annotations

from collections import deque

from PySide6.QtGui import QAccessible, QAccessibleAnnouncementEvent
from PySide6.QtWidgets import QWidget

MAX_ANNOUNCED = 400  # characters: a long answer is read from the view, not from the announcement
# The latest announcements (widget's object name, politeness, text): the window tests read them.
ANNOUNCED: deque[tuple[str, str, str]] = deque(maxlen=20)


def describe(widget: QWidget, name: str, description: str, tooltip: bool = True) -> QWidget:
    widget.setAccessibleName(name)
    widget.setAccessibleDescription(description)
    if tooltip and not widget.toolTip():
        widget.setToolTip(description)
    return widget


def chain(*widgets: QWidget) -> None:
    """Tab moves through `widgets` in this order (reading order: left to right, top to bottom)."""
    for a, b in zip(widgets, widgets[1:]):
        QWidget.setTabOrder(a, b)


def announce(widget: QWidget, text: str, assertive: bool = False) -> None:
    text = " ".join(text.split())
    if len(text) > MAX_ANNOUNCED:
        text = text[:MAX_ANNOUNCED] + "…"
    if not text:
        return
    event = QAccessibleAnnouncementEvent(widget, text)
    politeness = QAccessible.AnnouncementPoliteness.Assertive if assertive else QAccessible.AnnouncementPoliteness.Polite
    event.setPoliteness(politeness)
    QAccessible.updateAccessibility(event)
    ANNOUNCED.append((widget.objectName(), politeness.name, text))
