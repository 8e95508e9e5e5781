"""What can be done to one message in the chat, and the row of small icon buttons that offers it
under the message (never over its text) when the pointer rests on the message, or when the
keyboard steps to it (Alt+Up / Alt+Down: the row takes the focus, Left and Right move in it, Esc
goes back). The same list is the message's right-click menu (Menu key or Shift+F10)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QPoint, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget

from app.a11y import describe
from app.i18n import tr
from app.icons import use
from app.theme import set_tone
from app.transcript import Shown

ICONS = {"copy": "copy", "markdown": "code", "regenerate": "refresh-cw", "edit": "pencil", "branch": "git-branch",
         "delete": "trash-2", "older": "chevron-left", "newer": "chevron-right"}


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
    branch = message.branch
    if branch:  # ‹ 2/3 ›: the other answers to its message, or its other edits
        if branch[0] > 1:
            out.append(("older", tr("Previous branch"), tr("Show the branch before this one")))
        if branch[0] < branch[1]:
            out.append(("newer", tr("Next branch"), tr("Show the branch after this one")))
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

    def show_for(self, index: int, actions: list[tuple[str, str, str]], corner: QPoint, right: bool = False,
                 branch: tuple[int, int] | None = None) -> None:
        """Offer `actions` for message `index`, the toolbar's top left at `corner` (its top right
        with `right`); `branch`: (which, of how many), written between the branch arrows."""
        names = self._names([f"msg_{a}" for a, _, _ in actions], branch)
        if index != self.index or [w.objectName() for w in self.widgets()] != names:
            for w in self.widgets():
                self._row.removeWidget(w)
                w.setParent(None)
                w.deleteLater()
            described = {f"msg_{a}": (a, label, what) for a, label, what in actions}
            for name in names:
                part = self._branch_label(branch) if name == "msg_branch_count" else self._button(*described[name])
                self._row.addWidget(part)
                part.show()  # now, not when the layout gets to it: the keyboard may focus it at once
            self.index = index
            self.adjustSize()
        self.move(max(0, corner.x() - (self.width() if right else 0)), max(0, corner.y()))
        self.show()
        self.raise_()

    @staticmethod
    def _names(names: list[str], branch: tuple[int, int] | None) -> list[str]:
        """The row's widgets' names for these actions: the branch count sits after ‹ (before ›
        when there is no ‹)."""
        if not branch or not {"msg_older", "msg_newer"} & set(names):
            return names
        at = names.index("msg_older") + 1 if "msg_older" in names else names.index("msg_newer")
        return names[:at] + ["msg_branch_count"] + names[at:]

    def _branch_label(self, branch: tuple[int, int]) -> QLabel:
        label = QLabel(f"{branch[0]}/{branch[1]}", self)
        label.setObjectName("msg_branch_count")
        set_tone(label, "muted")
        describe(label, tr("Branch {which} of {count}").format(which=branch[0], count=branch[1]), "")
        return label

    def _button(self, action: str, label: str, description: str) -> QToolButton:
        b = QToolButton(self)
        b.setObjectName(f"msg_{action}")
        b.setText(label)
        use(b, ICONS.get(action, "ellipsis"), "muted", 15)
        b.setToolButtonStyle(Qt.ToolButtonIconOnly)
        b.setAutoRaise(True)
        b.setFocusPolicy(Qt.NoFocus)  # reached by Alt+Up / Alt+Down (take_focus); Tab stays in reading order
        describe(b, label, description)
        b.clicked.connect(lambda _=False: self.triggered.emit(action, self.index))
        b.installEventFilter(self)
        return b

    def widgets(self) -> list[QWidget]:
        return [self._row.itemAt(i).widget() for i in range(self._row.count())]

    def buttons(self) -> list[QToolButton]:
        return [w for w in self.widgets() if isinstance(w, QToolButton)]

    def take_focus(self) -> None:
        """The keyboard stepped to this message: its first action takes the focus."""
        buttons = self.buttons()
        for b in buttons:
            b.setFocusPolicy(Qt.StrongFocus)
        if buttons:
            buttons[0].setFocus(Qt.ShortcutFocusReason)

    def eventFilter(self, button, event) -> bool:  # noqa: N802 - Qt's name
        """On a button: Left and Right move along the row (round at its ends); Esc gives the focus
        back to the conversation. A button's own arrow keys would leave the row."""
        if event.type() == QEvent.ShortcutOverride and event.key() == Qt.Key_Escape:
            event.accept()  # Esc here leaves the row: the window's Esc (Stop) does not take it
            return True
        if event.type() != QEvent.KeyPress or event.key() not in (Qt.Key_Left, Qt.Key_Right, Qt.Key_Escape):
            return False
        if event.key() == Qt.Key_Escape:
            self.parentWidget().parentWidget().setFocus(Qt.ShortcutFocusReason)  # the view (this is in its viewport)
            self.clear()
            return True
        buttons = self.buttons()
        if button in buttons:
            step = 1 if event.key() == Qt.Key_Right else -1
            buttons[(buttons.index(button) + step) % len(buttons)].setFocus(Qt.TabFocusReason)
        return True

    def button(self, action: str) -> QToolButton | None:
        """The shown row's button for `action` (a row replaced is deleted later: not its buttons)."""
        return next((b for b in self.buttons() if b.objectName() == f"msg_{action}"), None)

    def clear(self) -> None:
        self.index = None
        self.hide()
