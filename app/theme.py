"""Light and dark looks: Qt's Fusion style with a palette, and the chat view's bubble colours."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication

from app import render

DARK = {"window": "#202124", "base": "#2a2b2e", "text": "#e8eaed", "button": "#303134", "highlight": "#3d6fb6"}


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
    else:
        app.setPalette(app.style().standardPalette())
        render.set_colours()
