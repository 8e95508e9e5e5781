"""Files attached to the message being written: a row of chips above the message box ("report.pdf ·
1 234 tokens ✕", or "· indexed for this chat, cited" for a large one), and a line that says what could not
be attached and why. The files are read off the GUI thread (the window's "attachments" Runner);
this widget only shows them."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from app.a11y import describe
from app.i18n import tr
from app.theme import set_tone


class AttachmentBar(QWidget):
    sig_changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("attachments")
        self.items: list = []  # engine.api Attachment
        self.row = QHBoxLayout()
        self.row.setContentsMargins(0, 0, 0, 0)
        self.row.addStretch(1)  # chips go before it
        self.note = QLabel("")
        self.note.setObjectName("attachmentNote")
        self.note.setWordWrap(True)
        set_tone(self.note, "warn")
        self.note.hide()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.row)
        layout.addWidget(self.note)
        self._chips: list[QWidget] = []
        self._draw()

    def add(self, attachment) -> None:
        if any(a.path == attachment.path for a in self.items):
            return
        self.items.append(attachment)
        self._draw()

    def remove(self, index: int) -> None:
        if 0 <= index < len(self.items):
            del self.items[index]
            self._draw()

    def refuse(self, text: str) -> None:
        """Say why a file was not attached (the message being written is untouched)."""
        self.note.setText(text)
        self.note.show()

    def take(self) -> list:
        """The attachments, handed over with the message; the bar empties."""
        items, self.items = self.items, []
        self.note.hide()
        self._draw()
        return items

    def inline_tokens(self) -> int:
        return sum(a.tokens or 0 for a in self.items if a.inline)

    def _draw(self) -> None:
        for chip in self._chips:
            self.row.removeWidget(chip)
            chip.deleteLater()
        self._chips = []
        for k, a in enumerate(self.items):
            chip = QFrame()  # a frame: it draws the border the stylesheet gives it
            chip.setObjectName("attachmentChip")
            box = QHBoxLayout(chip)
            box.setContentsMargins(6, 2, 2, 2)
            size = (tr("{n} tokens").format(n=a.tokens) if a.inline and a.tokens is not None else
                    tr("in the message") if a.inline else tr("indexed for this chat, cited"))
            label = QLabel(f"{a.name} · {size}")
            label.setToolTip(a.path)
            close = describe(QToolButton(), tr("Remove {name}").format(name=a.name),
                             tr("Do not attach this file"))
            close.setText("✕")
            close.clicked.connect(lambda _=False, i=k: self.remove(i))
            box.addWidget(label)
            box.addWidget(close)
            set_tone(chip, "chip")
            self.row.insertWidget(self.row.count() - 1, chip)
            self._chips.append(chip)
        self.setVisible(bool(self.items) or not self.note.isHidden())
        self.sig_changed.emit()
