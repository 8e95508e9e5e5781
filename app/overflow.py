"""A message too long for the model's context (MessageTooLong): the window asks the user whether
to keep its head and tail, have it summarised, or take it back into the composer."""

from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QMessageBox, QWidget

from app.i18n import tr
from engine.api import MessageTooLong


def ask_overflow(parent: QWidget, exc: MessageTooLong, on_choice: Callable[[str | None], None]) -> QMessageBox:
    """Open the choice (non-modal, objectName messageTooLongDialog); `on_choice` gets "head_tail",
    "summarise" or None (Cancel) when it closes."""
    approx = "~" if exc.estimated else ""
    box = QMessageBox(QMessageBox.Warning, tr("Message too long"), tr(
        "This message has {tokens} tokens; at most {fits} fit in the model's context of {n_ctx} tokens.").format(
        tokens=approx + str(exc.tokens), fits=approx + str(exc.fits), n_ctx=exc.n_ctx), parent=parent)
    box.setInformativeText(tr("Keep its beginning and end (the middle is cut), or have the model summarise it? "
                              "The chat keeps your whole message either way."))
    box.setObjectName("messageTooLongDialog")
    head = box.addButton(tr("Keep head and tail"), QMessageBox.AcceptRole)
    summary = box.addButton(tr("Summarise it"), QMessageBox.AcceptRole)
    cancel = box.addButton(QMessageBox.Cancel)
    head.setObjectName("keepHeadTailButton")
    summary.setObjectName("summariseButton")
    cancel.setObjectName("cancelButton")
    choices = {head: "head_tail", summary: "summarise"}
    box.finished.connect(lambda _r: on_choice(choices.get(box.clickedButton())))
    box.open()
    return box
