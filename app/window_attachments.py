"""Files dropped or pasted into the message box: each read off the GUI thread (the "attachments"
Runner, through engine.api's `read_attachment`: the documents' parser) and shown as a chip, or
refused with the reason; the message being written is never touched. A part of `MainWindow`
(app/main_window.py), kept in its own file; GUI thread only."""

from __future__ import annotations

from app.background import Runner
from app.i18n import tr
from engine.api import AttachmentError, is_image_file, read_attachment


class WindowAttachments:
    """Mixed into MainWindow: it uses the window's composer and worker."""

    attach_runner: Runner | None = None

    def attach_files(self, paths: list[str]) -> None:
        """Documents to read; images go to `attach_image_files` (app/window_images.py)."""
        images = [p for p in paths if is_image_file(p)]
        if images:
            self.attach_image_files(images)
        paths = [p for p in paths if not is_image_file(p)]
        if not paths:
            return
        if self.attach_runner is None:
            self.attach_runner = Runner("attachments", self)
        count = self.worker.count_tokens  # the L1 vocabulary alone: safe off the engine thread
        bar = self.composer.attachments
        for path in paths:
            self.attach_runner.run(lambda p=path: read_attachment(p, count), self._attached,
                                   lambda exc, p=path: bar.refuse(_why(exc, p)))

    def _attached(self, attachment) -> None:
        """A file read: a chip, unless it is too large for the message while documents are off
        (it could not be indexed for the chat): then refused now, not when the message is sent."""
        bar = self.composer.attachments
        if not attachment.inline and not self.docs_toggle.isEnabled():
            bar.refuse(tr("Not attached: {name} is too large to go into the message, and documents are off "
                          "(setting docs.enabled), so it cannot be indexed for this chat").format(name=attachment.name))
            return
        bar.add(attachment)

    def close_attachments(self) -> None:
        if self.attach_runner is not None:
            self.attach_runner.close()
        self.close_images()


def _why(exc: BaseException, path: str) -> str:
    if isinstance(exc, AttachmentError):
        return tr("Not attached: {why}").format(why=exc)
    return tr("Not attached: {path} could not be read ({why})").format(path=path, why=type(exc).__name__)

