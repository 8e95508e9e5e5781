"""The icon rail on the window's left edge: Chats, Documents and Tools are pages of the main area
(the rail marks the one shown), Models and Settings open their dialogs. Each button has a tooltip
with its shortcut and an accessible name; the window owns what they open."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QButtonGroup, QToolButton, QVBoxLayout, QWidget

from app.a11y import describe
from app.i18n import tr
from app.icons import use
from app.shortcuts import SHORTCUTS, shown

PAGES = ("chats", "documents", "tools")  # the main area's pages, in the rail's order
RAIL_WIDTH = 52


class NavRail(QWidget):
    page = Signal(str)     # one of PAGES, chosen by the user
    models = Signal()
    settings = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("navRail")
        self.setFixedWidth(RAIL_WIDTH)
        self.group = QButtonGroup(self)
        self.group.setExclusive(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 8, 6, 8)
        layout.setSpacing(6)
        self.buttons: dict[str, QToolButton] = {}
        for key, icon_name, name, what in (
                ("chats", "messages-square", tr("Chats"), tr("Your chats and the conversation")),
                ("documents", "library", tr("Documents"), tr("Folders the assistant may search and cite")),
                ("tools", "wrench", tr("Tools"),
                 tr("Built-in tools and MCP servers: their state, their tools, what you allowed")),
                ("models", "box", tr("Models"), tr("Download, import and choose models")),
                ("settings", "settings", tr("Settings"), tr("Models per tier, GPU, memory, language and more"))):
            # the keys are the shortcut table's (app/shortcuts.py), which the window installs
            keys = next(k for k, _what, method in SHORTCUTS if method == f"open_{key}")
            button = self._button(key, icon_name, name, what, keys)
            if key in PAGES:
                button.setCheckable(True)
                self.group.addButton(button)
                button.clicked.connect(lambda _on=False, k=key: self.page.emit(k))
            if key == "models":
                layout.addStretch(1)  # Models and Settings at the foot, as the peers put them
            layout.addWidget(button, 0, Qt.AlignHCenter)
        self.buttons["models"].clicked.connect(self.models.emit)
        self.buttons["settings"].clicked.connect(self.settings.emit)
        self.buttons["chats"].setChecked(True)

    def _button(self, key: str, icon_name: str, name: str, what: str, keys: str) -> QToolButton:
        button = QToolButton()
        button.setObjectName({"documents": "documentsButton", "tools": "toolsButton", "settings": "settingsButton",
                              "models": "modelManagerButton"}.get(key, "chatsButton"))
        button.setProperty("rail", True)
        use(button, icon_name, "muted", 20, on_tone="accent")
        button.setFixedSize(40, 40)
        button.setToolTip(f"{name} ({shown(keys)})")
        describe(button, name, what)
        self.buttons[key] = button
        return button

    def show_page(self, key: str) -> None:
        """Mark `key` as the page shown (without a `page` signal)."""
        self.buttons[key].setChecked(True)
