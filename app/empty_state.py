"""What the window shows where there is nothing yet (no chats, no documents) or nothing works (the
engine could not start): what happened, what to do next, and a button for each next step."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.a11y import describe


class EmptyState(QWidget):
    def __init__(self, name: str, parent=None):
        super().__init__(parent)
        self.setObjectName(name)
        self.title = QLabel("")
        self.title.setObjectName(f"{name}Title")
        self.title.setAlignment(Qt.AlignCenter)
        self.title.setStyleSheet("font-size:16pt;font-weight:600")
        self.text = QLabel("")
        self.text.setObjectName(f"{name}Text")
        self.text.setAlignment(Qt.AlignCenter)
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.button_row = QHBoxLayout()
        row = QHBoxLayout()
        row.addStretch(1)
        row.addLayout(self.button_row)
        row.addStretch(1)
        self.buttons: list[QPushButton] = []
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addWidget(self.title)
        layout.addWidget(self.text)
        layout.addSpacing(12)
        layout.addLayout(row)
        layout.addStretch(2)

    def show_state(self, title: str, text: str, actions: list[tuple[str, str, Callable[[], None]]]) -> None:
        """`actions`: (label, what it does, callback); the first is the default."""
        self.title.setText(title)
        self.text.setText(text)
        for b in self.buttons:
            self.button_row.removeWidget(b)
            b.deleteLater()
        self.buttons = []
        for k, (label, what, act) in enumerate(actions):
            button = describe(QPushButton(label), label, what)
            button.clicked.connect(act)
            button.setDefault(k == 0)
            self.button_row.addWidget(button)
            self.buttons.append(button)
        self.show()
