"""The window's side of tool calls: the approval dialog put up when the engine's thread asks
(EngineWorker.approve waits for the answer; the GUI thread never does), Stop or a new question
denying a call still waiting (each call and result is a block in the answer: the controller's
transcript, app/transcript.py). A part of
`MainWindow` (app/main_window.py), kept in its own file; GUI thread only."""

from __future__ import annotations

from app.i18n import tr
from app.tool_approval import ApprovalDialog


class WindowTools:
    """Mixed into MainWindow: it uses the window's status line and `approval`."""

    def _on_approval(self, approval, reply) -> None:
        self._end_approval()
        self.status_label.setText(tr("Waiting for your approval: {tool}").format(tool=approval.tool))
        dialog = self.approval = ApprovalDialog(approval, reply, self)
        dialog.finished.connect(lambda _r: self._approval_closed(dialog))
        dialog.open()

    def _end_approval(self) -> None:
        if self.approval is not None:
            dialog, self.approval = self.approval, None
            dialog.done(0)  # unanswered: denied

    def _approval_closed(self, dialog: ApprovalDialog) -> None:
        if self.approval is dialog:
            self.approval = None
            self.status_label.setText(tr("Calling {tool}…").format(tool=dialog.approval.tool)
                                      if dialog.answer != "deny" else tr("Thinking…"))
