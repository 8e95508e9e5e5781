"""How the chat reads: a centred column, and the shapes Qt's rich text cannot draw, painted under it.

Why the chat stays one QTextBrowser (issue 42 asked for a choice): one document gives selection
across messages, find, a screen reader's one text, and the incremental drawing that keeps a long
chat fast (issue 27: only the answer being written is drawn again; bench/window_long_chat.py).
One widget per message, or a list view with delegates, would have to rebuild those. What the
document lacks is rounded corners and a centred column, and those are cheap to add:
- the column: the view's viewport margins, set from its width (the scroll bar stays at the edge; a
  table's right alignment and 100 % widths ignore a root frame's own margins);
- the shapes: rounded rectangles painted on the viewport before the document is drawn over them,
  for each user bubble and code block on screen. Qt's HTML keeps no class names, so a table is
  known by its cell padding (USER_PAD, CODE_PAD: values nothing else in the chat uses)."""

from __future__ import annotations

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QPainter, QPen, QTextTable

COLUMN = 760      # the reading column's width up to a large window (logical pixels)
COLUMN_MAX = 960  # its width on a wide screen: it grows with the window, to this
SIDE = 20         # the least space beside the column
USER_PAD = 11     # cell padding of a user bubble's table
CODE_PAD = 7      # cell padding of a code block's table
RADIUS = 14       # a bubble's corners
CODE_RADIUS = 8


def column_width(width: int) -> int:
    """The reading column in a viewport `width` wide."""
    return max(200, min(width - 2 * SIDE, max(COLUMN, min(COLUMN_MAX, round(width * 0.6)))))


def set_column(view) -> int:
    """Centre the document in `view` as a column (the viewport is the column); its width."""
    width = view.width()
    column = column_width(width)
    bar = view.verticalScrollBar()
    side = max(0, (width - column) // 2)
    # The scroll bar takes its width from the right side: the column keeps its width whether or not it shows.
    right = max(0, width - column - side - (bar.width() if bar.isVisible() else 0))
    margins = view.viewportMargins()
    if (margins.left(), margins.right()) != (side, right):
        view.setViewportMargins(side, 0, right, 0)
    return column


def paint_shapes(view, colours: dict) -> None:
    """Rounded user bubbles and code blocks for the frames on screen, under the text."""
    doc = view.document()
    layout = doc.documentLayout()
    dx, dy = view.horizontalScrollBar().value(), view.verticalScrollBar().value()
    height = view.viewport().height()
    painter = QPainter(view.viewport())
    painter.setRenderHint(QPainter.Antialiasing)
    frames = doc.rootFrame().childFrames()  # the messages, top to bottom
    lo, hi = 0, len(frames)
    while lo < hi:  # the first one on screen: a long chat's repaint looks at the visible ones only
        mid = (lo + hi) // 2
        if layout.frameBoundingRect(frames[mid]).bottom() < dy:
            lo = mid + 1
        else:
            hi = mid
    for frame in frames[lo:]:
        rect = layout.frameBoundingRect(frame).translated(-dx, -dy)
        if rect.top() > height:
            break
        _paint(painter, layout, frame, rect, dx, dy, colours)
    painter.end()


def _paint(painter: QPainter, layout, frame, rect: QRectF, dx: int, dy: int, colours: dict) -> None:
    fmt = frame.frameFormat()
    pad = fmt.toTableFormat().cellPadding() if isinstance(frame, QTextTable) else None
    if pad:  # a table's bounding rect comes shifted by its cell padding (Qt 6.12, measured): its true place
        rect = rect.translated(-pad, -pad)
    if pad == USER_PAD:
        painter.setPen(Qt.NoPen)
        painter.setBrush(QColor(colours["user"]))
        painter.drawRoundedRect(rect, RADIUS, RADIUS)
    elif pad == CODE_PAD:
        painter.setPen(QPen(QColor(colours["border"]), 1))
        painter.setBrush(QColor(colours["code"]))
        painter.drawRoundedRect(rect.adjusted(0.5, 0.5, -0.5, -0.5), CODE_RADIUS, CODE_RADIUS)
    for child in frame.childFrames():  # code inside an answer, a list or a quote
        _paint(painter, layout, child, layout.frameBoundingRect(child).translated(-dx, -dy), dx, dy, colours)
