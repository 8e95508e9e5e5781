"""The window's side of tool calls: the approval dialog put up when the engine's thread asks
(EngineWorker.approve waits for the answer; the GUI thread never does), Stop or a new question
denying a call still waiting. Each call and result is a block in the answer (the controller's
transcript, app/transcript.py). GUI thread only."""

from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QWidget

from app.i18n import tr
from app.tool_approval import ApprovalDialog


class Approvals:
    """The one call waiting for the user's answer (`dialog`), over `parent`; `say` is the status
    line."""

    def __init__(self, parent: QWidget, say: Callable[[str], None]):
        self.parent, self.say = parent, say
        self.dialog: ApprovalDialog | None = None

    def ask(self, approval, reply) -> None:
        self.end()
        self.say(tr("Waiting for your approval: {tool}").format(tool=approval.tool))
        dialog = self.dialog = ApprovalDialog(approval, reply, self.parent)
        dialog.finished.connect(lambda _r: self._closed(dialog))
        dialog.open()

    def end(self) -> None:
        """A call still waiting is denied (Stop, a new question, closing the window)."""
        if self.dialog is not None:
            dialog, self.dialog = self.dialog, None
            dialog.done(0)  # unanswered: denied

    def _closed(self, dialog: ApprovalDialog) -> None:
        if self.dialog is dialog:
            self.dialog = None
            self.say(tr("Calling {tool}…").format(tool=dialog.approval.tool) if dialog.answer != "deny"
                     else tr("Thinking…"))
