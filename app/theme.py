"""Light and dark looks: Qt's Fusion style with a palette, and the chat view's bubble colours."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from app import render

DARK = {"window": "#202124", "base": "#2a2b2e", "text": "#e8eaed", "button": "#303134", "highlight": "#3d6fb6"}
ACCENT = "#3d6fb6"
STYLE = """
QPushButton { padding: 5px 12px; border-radius: 6px; border: 1px solid %(border)s; background: %(button)s; }
QPushButton:hover { border-color: %(accent)s; }
QPushButton:disabled { color: %(muted)s; }
QPushButton#sendButton { background: %(accent)s; color: white; border: none; font-weight: bold; }
QPushButton#sendButton:disabled { background: %(muted)s; }
QPushButton#newConversationButton { background: %(accent)s; color: white; border: none; }
QListWidget#conversationList { border: none; background: transparent; }
QListWidget#conversationList::item { padding: 7px 6px; border-radius: 6px; }
QListWidget#conversationList::item:selected { background: %(accent)s; color: white; }
QLineEdit, QPlainTextEdit, QTextBrowser { border: 1px solid %(border)s; border-radius: 8px; padding: 4px; }
QProgressBar { border: 1px solid %(border)s; border-radius: 5px; text-align: center; min-height: 16px; }
QProgressBar::chunk { background: %(accent)s; border-radius: 4px; }
QGroupBox { border: 1px solid %(border)s; border-radius: 8px; margin-top: 14px; padding: 8px; }
QGroupBox::title { subcontrol-origin: margin; left: 10px; }
"""


def apply_theme(name: str) -> None:
    app = QApplication.instance()
    if app is None:
        return
    app.setStyle("Fusion")
    if name == "dark":
        p = QPalette()
        for role, key in ((QPalette.Window, "window"), (QPalette.Base, "base"), (QPalette.AlternateBase, "window"),
                          (QPalette.Button, "button"), (QPalette.Highlight, "highlight")):
            p.setColor(role, QColor(DARK[key]))
        for role in (QPalette.WindowText, QPalette.Text, QPalette.ButtonText, QPalette.BrightText):
            p.setColor(role, QColor(DARK["text"]))
        app.setPalette(p)
        render.set_colours(user="#1f3a5f", assistant="#303134", code="#1b1b1b", meta="#9aa0a6")
        app.setStyleSheet(STYLE % {"border": "#4a4b4e", "button": DARK["button"], "accent": ACCENT, "muted": "#5f6368"})
    else:
        app.setPalette(app.style().standardPalette())
        render.set_colours()
        app.setStyleSheet(STYLE % {"border": "#c9ccd1", "button": "#ffffff", "accent": ACCENT, "muted": "#b0b4ba"})
