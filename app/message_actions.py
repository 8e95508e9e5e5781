"""What can be done to one message in the chat, and the row of small icon buttons that offers it
under the message (never over its text) when the pointer rests on the message (the same list is
the message's right-click menu, which the keyboard reaches too: Menu key or Shift+F10 over the
message at the text cursor)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QToolButton, QWidget

from app.a11y import describe
from app.i18n import tr
from app.icons import use
from app.transcript import Shown

ICONS = {"copy": "copy", "markdown": "code", "regenerate": "refresh-cw", "edit": "pencil", "branch": "git-branch",
         "delete": "trash-2"}


def actions_for(message: Shown, idle: bool) -> list[tuple[str, str, str]]:
    """(action, label, description) for a finished message. Copying is always offered; what
    starts a turn or changes the chat needs the engine idle and the message stored (its id)."""
    if message.streaming or not (message.content or message.steps):
        return []
    answer = message.answer
    out = [("copy", tr("Copy"), tr("Copy this message as plain text"))]
    if answer:
        out.append(("markdown", tr("Copy Markdown"), tr("Copy this answer's Markdown as written")))
    if not (idle and message.id):
        return out
    if answer:
        out += [("regenerate", tr("Regenerate"), tr("Answer this message again; this answer stays as a branch")),
                ("branch", tr("Branch from here"),
                 tr("Ask something else after this answer; what followed stays as a branch"))]
    elif message.role == "user":
        out.append(("edit", tr("Edit"), tr("Change this message and send it again; the old one stays as a branch")))
    out.append(("delete", tr("Delete"), tr("Delete this answer and the message it answers") if answer
                else tr("Delete this message and its answer")))
    return out


class MessageToolbar(QFrame):
    """A row of small icon buttons under a message (in the gap the view leaves there), at its left
edge for an answer and its right edge for a user's bubble."""

    triggered = Signal(str, int)  # action, the message's index in the view

    def __init__(self, parent: QWidget):
        super().__init__(parent)
        self.setObjectName("messageToolbar")
        self.setFrameShape(QFrame.NoFrame)
        self.index: int | None = None
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(2, 1, 2, 1)
        self._row.setSpacing(2)
        self.hide()

    def show_for(self, index: int, actions: list[tuple[str, str, str]], corner: QPoint, right: bool = False) -> None:
        """Offer `actions` for message `index`, the toolbar's top left at `corner` (its top right
        with `right`)."""
        if index != self.index or [b.objectName() for b in self.buttons()] != [f"msg_{a}" for a, _, _ in actions]:
            for b in self.buttons():
                self._row.removeWidget(b)
                b.setParent(None)
                b.deleteLater()
            for action, label, description in actions:
                b = QToolButton(self)
                b.setObjectName(f"msg_{action}")
                b.setText(label)
                use(b, ICONS.get(action, "ellipsis"), "muted", 15)
                b.setToolButtonStyle(Qt.ToolButtonIconOnly)
                b.setAutoRaise(True)
                b.setFocusPolicy(Qt.NoFocus)  # the keyboard has the context menu; Tab stays in reading order
                describe(b, label, description)
                b.clicked.connect(lambda _=False, a=action: self.triggered.emit(a, self.index))
                self._row.addWidget(b)
            self.index = index
            self.adjustSize()
        self.move(max(0, corner.x() - (self.width() if right else 0)), max(0, corner.y()))
        self.show()
        self.raise_()

    def buttons(self) -> list[QToolButton]:
        return [self._row.itemAt(i).widget() for i in range(self._row.count())]

    def button(self, action: str) -> QToolButton | None:
        return self.findChild(QToolButton, f"msg_{action}")

    def clear(self) -> None:
        self.index = None
        self.hide()
