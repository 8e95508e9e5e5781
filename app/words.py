"""`tr` without importing Qt: the window's strings go through Qt's translator (app/i18n.py
installs Chinese), and a Qt-free part of the app (app/chat_controller.py) says the same words
through this one. Before Qt is loaded, or in a test without it, a string is itself."""

from __future__ import annotations

import sys

CONTEXT = "app"


def tr(text: str) -> str:
    core = sys.modules.get("PySide6.QtCore")
    return core.QCoreApplication.translate(CONTEXT, text) if core is not None else text
