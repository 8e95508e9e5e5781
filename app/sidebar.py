"""The chat list column beside the icon rail: its header (the title, "+" for a new chat), the search
box, and the chats under Pinned and date headers, each with a "…" button (on hover or selection) and
a right-click menu: pin, rename, export, delete. The column folds away (Ctrl+B). It holds no
conversation state: what the user asks for leaves as signals, and the window (which owns the current
chat and the engine) acts on them."""

from __future__ import annotations

from datetime import datetime
from typing import Callable

from PySide6.QtCore import QModelIndex, QPoint, QPointF, QRect, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QFont, QIcon, QPainter, QPen, QPixmap
from PySide6.QtWidgets import (QHBoxLayout, QLabel, QLineEdit, QListWidget, QListWidgetItem, QMenu, QStyle,
                               QStyledItemDelegate, QStyleOptionViewItem, QToolButton, QVBoxLayout, QWidget)

from app.a11y import describe
from app.chat_groups import grouped
from app.i18n import tr
from app.icons import icon, use
from app.theme import colour

SEARCH_PAUSE_MS = 200  # search when typing pauses
COLUMN_WIDTH = 248  # the chat list's width: fixed, so that a long title never moves the layout
MORE_W = 28  # the "…" button at a row's right end
PINNED_ROLE = Qt.UserRole + 1  # a chat row's pinned flag (Qt.UserRole holds its id; None on a header)


def group_title(group: str) -> str:
    """A group's header in the UI's language (app/chat_groups.py names the groups)."""
    return {"pinned": tr("Pinned"), "today": tr("Today"), "yesterday": tr("Yesterday"),
            "week": tr("Previous 7 days"), "month": tr("Previous 30 days"), "older": tr("Older")}[group]


def pin_icon(size: int = 16) -> QIcon:
    """A pushpin drawn with QPainter (no emoji font needed): the mark of a pinned chat's row, in the
    accent colour, and in the accent's text colour on a selected row (whose background is the
    accent: the pin vanished there). Drawn at 1×, 1.5×, 2× and 3× `size`: on a high-DPI screen Qt
    takes the one that fits, where a single 16-pixel drawing was scaled up, blurred."""
    icon = QIcon()
    for scale in (1, 1.5, 2, 3):
        icon.addPixmap(_pin_pixmap(round(size * scale), colour("accent")), QIcon.Normal)
        icon.addPixmap(_pin_pixmap(round(size * scale), colour("accent_text")), QIcon.Selected)
    return icon


def _pin_pixmap(size: int, fill: str) -> QPixmap:
    pixmap = QPixmap(size, size)
    pixmap.fill(Qt.transparent)
    p = QPainter(pixmap)
    p.setRenderHint(QPainter.Antialiasing)
    p.setPen(QPen(QColor(fill), size / 10, Qt.SolidLine, Qt.RoundCap))
    p.drawLine(QPointF(size * 0.5, size * 0.5), QPointF(size * 0.2, size * 0.85))  # the needle
    p.setPen(Qt.NoPen)
    p.setBrush(QColor(fill))
    p.drawEllipse(QPointF(size * 0.62, size * 0.38), size * 0.28, size * 0.28)  # the head
    p.end()
    return pixmap


def more_rect(row: QRect) -> QRect:
    """Where a row's "…" button is drawn, and clicked."""
    return QRect(row.right() - MORE_W, row.top(), MORE_W, row.height())


class RowDelegate(QStyledItemDelegate):
    """A chat row under the mouse or selected shows a "…" button at its right end; the title is
    drawn (and elided) left of it."""

    def paint(self, painter, option, index) -> None:
        active = option.state & (QStyle.State_MouseOver | QStyle.State_Selected)
        if index.data(Qt.UserRole) is None or not active:
            super().paint(painter, option, index)
            return
        widget = option.widget
        widget.style().drawPrimitive(QStyle.PE_PanelItemViewItem, option, painter, widget)
        narrow = QStyleOptionViewItem(option)
        narrow.rect = option.rect.adjusted(0, 0, -MORE_W, 0)
        super().paint(painter, narrow, index)
        mode = QIcon.Selected if option.state & QStyle.State_Selected else QIcon.Normal
        icon("ellipsis", "muted", 16).paint(painter, more_rect(option.rect).adjusted(6, 0, -6, 0), Qt.AlignCenter, mode)


class ChatList(QListWidget):
    """The chat list. Home, End, Page Up and Page Down land on a chat: Qt's own move stays put when
    the row it aims at is a group header (not enabled), so Home did nothing under "Pinned".
    A click on a row's "…" opens its menu (`more` with the point to show it at)."""

    more = Signal(QPoint)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setItemDelegate(RowDelegate(self))
        self.setMouseTracking(True)

    def mousePressEvent(self, event):  # noqa: N802 - Qt's name
        item = self.itemAt(event.position().toPoint())
        if item is not None and item.data(Qt.UserRole) is not None and event.button() == Qt.LeftButton:
            rect = self.visualItemRect(item)
            if more_rect(rect).contains(event.position().toPoint()):
                self.setCurrentItem(item)
                self.more.emit(QPoint(rect.right() - MORE_W, rect.bottom()))
                return
        super().mousePressEvent(event)

    def moveCursor(self, action, modifiers) -> QModelIndex:  # noqa: N802 - Qt's name
        index = super().moveCursor(action, modifiers)
        if not index.isValid() or index.flags() & Qt.ItemIsEnabled:
            return index
        below = range(index.row() + 1, self.count())
        above = range(index.row() - 1, -1, -1)
        for row in (*below, *above):  # the header's own chats first
            item = self.item(row)
            if item.flags() & Qt.ItemIsEnabled and not item.isHidden():
                return self.indexFromItem(item)
        return index


class ChatSidebar(QWidget):
    searched = Signal(str)         # the search box's text, once typing pauses
    selected = Signal(int)         # a chat clicked (conversation id)
    rename = Signal(int, str)      # conversation id, its current title
    export = Signal(int, str)      # conversation id, "md" | "json" | "html"
    delete = Signal(int, str)      # conversation id, its title
    pin = Signal(int, bool)        # conversation id, pinned from now on

    def __init__(self, busy: Callable[[], bool], parent=None):
        super().__init__(parent)
        self.busy = busy  # no menu mid-turn
        self.now: Callable[[], datetime] = lambda: datetime.now().astimezone()  # the date groups' clock
        self._pin_icon = pin_icon()
        self.setObjectName("chatColumn")
        self.setFixedWidth(COLUMN_WIDTH)
        self.search = QLineEdit()
        self.search.setPlaceholderText(tr("Search chats"))
        self.search.setClearButtonEnabled(True)
        magnifier = use(QAction(self.search), "search", "muted", 16)
        self.search.addAction(magnifier, QLineEdit.LeadingPosition)
        for part in self.search.findChildren(QToolButton):  # the magnifier and the clear button Qt adds
            clear = part.defaultAction() is not magnifier
            describe(part, tr("Clear the search") if clear else tr("Search chats"),
                     tr("Clear the search") if clear else tr("Type to find chats by their words (Ctrl+K)"))
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(SEARCH_PAUSE_MS)
        timer.timeout.connect(lambda: self.searched.emit(self.search.text()))
        self.search.textChanged.connect(timer.start)
        self._matches: set[int] | None = None  # conversation ids matching the search (None: all)
        self.chat_list = ChatList()
        self.chat_list.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.chat_list.setTextElideMode(Qt.ElideRight)
        self.chat_list.currentItemChanged.connect(self._clicked)
        self.chat_list.setContextMenuPolicy(Qt.CustomContextMenu)
        self.chat_list.customContextMenuRequested.connect(self._menu)
        self.chat_list.more.connect(self._menu)
        title = QLabel(tr("Chats"))
        title.setObjectName("columnTitle")
        self.new_button = use(QToolButton(), "square-pen", "text", 18)
        self.new_button.setObjectName("newConversationButton")
        head = QHBoxLayout()
        head.setContentsMargins(4, 0, 0, 0)
        head.addWidget(title, 1)
        head.addWidget(self.new_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 10, 4, 8)
        layout.addLayout(head)
        layout.addWidget(self.search)
        layout.addWidget(self.chat_list, 1)

    def set_conversations(self, rows: list[dict], current: int | None) -> None:
        """The list from the engine (pinned, then newest first) under its group headers, `current`
        selected without a `selected` signal."""
        self.chat_list.blockSignals(True)
        self.chat_list.clear()
        for group, members in grouped(rows, self.now()):
            self.chat_list.addItem(self._header(group_title(group)))
            for r in members:
                item = QListWidgetItem(r["title"][:60])
                item.setData(Qt.UserRole, r["id"])
                item.setData(PINNED_ROLE, bool(r.get("pinned")))
                if r.get("pinned"):
                    item.setIcon(self._pin_icon)  # a mark beside the title: the text stays the title
                item.setToolTip(r["updated"][:19])
                self.chat_list.addItem(item)
                if r["id"] == current:
                    self.chat_list.setCurrentItem(item)
        self.chat_list.blockSignals(False)
        self._filter()

    def chat_items(self) -> list[QListWidgetItem]:
        """The chat rows, in list order, without the group headers."""
        items = (self.chat_list.item(i) for i in range(self.chat_list.count()))
        return [item for item in items if item.data(Qt.UserRole) is not None]

    def _header(self, title: str) -> QListWidgetItem:
        """A group's header row: neither selectable nor enabled, so clicks and Up/Down pass it by;
        drawn disabled (the theme's muted text), small and bold."""
        item = QListWidgetItem(title)
        item.setFlags(Qt.NoItemFlags)
        font = QFont(self.chat_list.font())
        font.setBold(True)
        if font.pointSizeF() > 0:
            font.setPointSizeF(font.pointSizeF() * 0.85)
        item.setFont(font)
        item.setData(Qt.AccessibleTextRole, tr("{group}, a group of chats").format(group=title))
        return item

    def show_matches(self, query: str, ids: list[int]) -> None:
        """The engine's answer to a search (title or any message, via SQLite FTS): the matching chats' ids."""
        if query != self.search.text():
            return  # an older search's answer
        self._matches = set(ids) if query.strip() else None
        self._filter()

    def _clicked(self, item, _previous) -> None:
        if item is not None and item.data(Qt.UserRole) is not None:
            self.selected.emit(item.data(Qt.UserRole))

    def _filter(self) -> None:
        """Hide the chats the search did not find, and the headers left with no chat shown."""
        header, shown = None, False
        for i in range(self.chat_list.count()):
            item = self.chat_list.item(i)
            cid = item.data(Qt.UserRole)
            if cid is None:
                if header is not None:
                    header.setHidden(not shown)
                header, shown = item, False
                continue
            item.setHidden(self._matches is not None and cid not in self._matches)
            shown = shown or not item.isHidden()
        if header is not None:
            header.setHidden(not shown)

    def _menu(self, pos) -> None:
        item = self.chat_list.itemAt(pos)
        if item is None or item.data(Qt.UserRole) is None or self.busy():
            return
        cid, pinned = item.data(Qt.UserRole), bool(item.data(PINNED_ROLE))
        menu = QMenu(self)
        menu.addAction(tr("Unpin") if pinned else tr("Pin"), lambda: self.pin.emit(cid, not pinned))
        menu.addAction(tr("Rename…"), lambda: self.rename.emit(cid, item.text()))
        menu.addAction(tr("Export as Markdown…"), lambda: self.export.emit(cid, "md"))
        menu.addAction(tr("Export as JSON…"), lambda: self.export.emit(cid, "json"))
        menu.addAction(tr("Export as HTML…"), lambda: self.export.emit(cid, "html"))
        menu.addSeparator()
        menu.addAction(tr("Delete…"), lambda: self.delete.emit(cid, item.text()))
        menu.exec(self.chat_list.mapToGlobal(pos))
