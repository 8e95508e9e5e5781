"""The window's left column: chat search, the chat list with its right-click menu, and the New
chat / Documents / Settings / Models buttons. It holds no conversation state: what the user asks for leaves
as signals, and the window (which owns the current chat and the engine) acts on them."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QLineEdit, QListWidget, QListWidgetItem, QMenu, QPushButton, QVBoxLayout, QWidget

from app.i18n import tr

SEARCH_PAUSE_MS = 200  # search when typing pauses


class ChatSidebar(QWidget):
    searched = Signal(str)         # the search box's text, once typing pauses
    selected = Signal(int)         # a chat clicked (conversation id)
    rename = Signal(int, str)      # conversation id, its current title
    export = Signal(int, str)      # conversation id, "md" | "json" | "html"
    delete = Signal(int, str)      # conversation id, its title

    def __init__(self, busy: Callable[[], bool], parent=None):
        super().__init__(parent)
        self.busy = busy  # no menu mid-turn
        self.search = QLineEdit()
        self.search.setPlaceholderText(tr("Search chats"))
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(SEARCH_PAUSE_MS)
        timer.timeout.connect(lambda: self.searched.emit(self.search.text()))
        self.search.textChanged.connect(timer.start)
        self._matches: set[int] | None = None  # conversation ids matching the search (None: all)
        self.chat_list = QListWidget()
        self.chat_list.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        self.chat_list.setTextElideMode(Qt.ElideRight)
        self.chat_list.currentItemChanged.connect(self._clicked)
        self.chat_list.setContextMenuPolicy(Qt.CustomContextMenu)
        self.chat_list.customContextMenuRequested.connect(self._menu)
        self.new_button = QPushButton(tr("New chat"))
        self.settings_button = QPushButton(tr("Settings"))
        self.models_button = QPushButton(tr("Models"))
        self.documents_button = QPushButton(tr("Documents"))
        self.documents_button.setObjectName("documentsButton")
        self.tools_button = QPushButton(tr("Tools"))
        self.tools_button.setObjectName("toolsButton")
        self.tools_button.setToolTip(tr("Built-in tools and MCP servers: their state, their tools, what you allowed"))
        layout = QVBoxLayout(self)
        layout.addWidget(self.search)
        layout.addWidget(self.chat_list, 1)
        for button in (self.new_button, self.documents_button, self.tools_button, self.settings_button,
                       self.models_button):
            layout.addWidget(button)

    def set_conversations(self, rows: list[dict], current: int | None) -> None:
        """The list from the engine (newest first), `current` selected without a `selected` signal."""
        self.chat_list.blockSignals(True)
        self.chat_list.clear()
        for r in rows:
            item = QListWidgetItem(r["title"][:60])
            item.setData(Qt.UserRole, r["id"])
            item.setToolTip(r["updated"][:19])
            self.chat_list.addItem(item)
            if r["id"] == current:
                self.chat_list.setCurrentItem(item)
        self.chat_list.blockSignals(False)
        self._filter()

    def show_matches(self, query: str, ids: list[int]) -> None:
        """The engine's answer to a search (title or any message, via SQLite FTS): the matching chats' ids."""
        if query != self.search.text():
            return  # an older search's answer
        self._matches = set(ids) if query.strip() else None
        self._filter()

    def _clicked(self, item, _previous) -> None:
        if item is not None:
            self.selected.emit(item.data(Qt.UserRole))

    def _filter(self) -> None:
        for i in range(self.chat_list.count()):
            item = self.chat_list.item(i)
            item.setHidden(self._matches is not None and item.data(Qt.UserRole) not in self._matches)

    def _menu(self, pos) -> None:
        item = self.chat_list.itemAt(pos)
        if item is None or self.busy():
            return
        cid = item.data(Qt.UserRole)
        menu = QMenu(self)
        menu.addAction(tr("Rename…"), lambda: self.rename.emit(cid, item.text()))
        menu.addAction(tr("Export as Markdown…"), lambda: self.export.emit(cid, "md"))
        menu.addAction(tr("Export as JSON…"), lambda: self.export.emit(cid, "json"))
        menu.addAction(tr("Export as HTML…"), lambda: self.export.emit(cid, "html"))
        menu.addSeparator()
        menu.addAction(tr("Delete…"), lambda: self.delete.emit(cid, item.text()))
        menu.exec(self.chat_list.mapToGlobal(pos))
