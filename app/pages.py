"""The main area's pages: the chat, and Documents and Tools made the first time they are opened.
A page is its panel embedded (a QDialog made a plain widget), never a frame over the chat. Esc on a
page, or the rail's Chats, leaves it for the chat; the rail marks the page shown."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QLabel, QStackedWidget, QWidget

from app.rail import NavRail


class Pages(QStackedWidget):
    shown = Signal(str)  # the page now shown ("chats", "documents", "tools")

    def __init__(self, chat: QWidget, rail: NavRail, parent=None):
        super().__init__(parent)
        self.setObjectName("pages")
        self.rail = rail
        self.addWidget(chat)
        self.made: dict[str, QWidget] = {"chats": chat}
        rail.page.connect(self.open_key)
        self.makers: dict[str, Callable[[], QWidget]] = {}  # the window's: how each page is made

    def current_key(self) -> str:
        return next((k for k, w in self.made.items() if w is self.currentWidget()), "chats")

    def open_key(self, key: str) -> QWidget:
        if key not in self.made:
            page = self.makers[key]()
            page.setWindowFlags(Qt.Widget)  # a dialog becomes a page of the main area
            heading = QLabel(page.windowTitle())  # a page has no title bar: its heading says what it is
            heading.setObjectName("pageTitle")
            page.layout().insertWidget(0, heading)
            page.finished.connect(lambda _result: self.open_key("chats"))  # Esc, Close
            self.made[key] = page
            self.addWidget(page)
        page = self.made[key]
        page.show()  # an embedded dialog hides itself on Esc; it is shown again when chosen
        self.setCurrentWidget(page)
        self.rail.show_page(key)
        self.shown.emit(key)
        return page
