"""The question put before every tool call: which server, which tool, and the exact arguments,
answered with Allow once, Always allow this tool, or Deny. Window-modal but not blocking (`open`,
not `exec`): the engine's thread waits for the answer, the GUI thread never does. Closing the
dialog, or Stop, denies."""

from __future__ import annotations

import json
from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout

from app.i18n import tr
from app.theme import set_tone

ONCE, ALWAYS, DENY = "once", "always", "deny"  # engine/tools/runner.py's answers


class ApprovalDialog(QDialog):
    def __init__(self, approval, reply: Callable[[str], None], parent=None):
        super().__init__(parent)
        self.setObjectName("toolApproval")
        self.setWindowTitle(tr("Allow this tool call?"))
        self.setWindowModality(Qt.WindowModal)
        self.approval = approval
        self._reply = reply
        self.answer: str | None = None
        source = tr("built-in") if approval.server == "builtin" else approval.server
        head = QLabel(tr("The model wants to call <b>{tool}</b> from <b>{server}</b>.").format(
            tool=_escape(approval.tool), server=_escape(source)))
        head.setTextFormat(Qt.RichText)
        head.setWordWrap(True)
        about = QLabel(approval.description[:400])
        about.setWordWrap(True)
        set_tone(about, "muted")
        self.arguments = QPlainTextEdit(json.dumps(approval.arguments, ensure_ascii=False, indent=2))
        self.arguments.setObjectName("toolArguments")
        self.arguments.setReadOnly(True)
        self.arguments.setAccessibleName(tr("Arguments"))
        self.arguments.setMinimumHeight(110)
        note = QLabel(tr("What the tool returns is given to the model as data, never as your instructions."))
        note.setWordWrap(True)
        set_tone(note, "hint")
        self.once_button = QPushButton(tr("Allow once"))
        self.always_button = QPushButton(tr("Always allow this tool"))
        self.deny_button = QPushButton(tr("Deny"))
        for button, name, answer in ((self.once_button, "allowOnceButton", ONCE),
                                     (self.always_button, "allowAlwaysButton", ALWAYS),
                                     (self.deny_button, "denyButton", DENY)):
            button.setObjectName(name)
            button.setAccessibleName(button.text())
            button.clicked.connect(lambda _=False, a=answer: self.decide(a))
        self.always_button.setToolTip(tr("Remembered for {key}; revoke it in the Tools panel.").format(
            key=approval.key))
        self.once_button.setDefault(True)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for b in (self.deny_button, self.always_button, self.once_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.addWidget(head)
        if approval.description:
            layout.addWidget(about)
        layout.addWidget(QLabel(tr("Arguments")))
        layout.addWidget(self.arguments, 1)
        layout.addWidget(note)
        layout.addLayout(buttons)
        self.resize(520, 340)

    def decide(self, answer: str) -> None:
        if self.answer is None:
            self.answer = answer
            self._reply(answer)
        self.accept() if answer != DENY else self.reject()

    def done(self, result: int) -> None:  # noqa: A003 - Qt's name; Esc or the close box: a denial
        if self.answer is None:
            self.answer = DENY
            self._reply(DENY)
        super().done(result)


def _escape(text: str) -> str:
    import html

    return html.escape(text)
