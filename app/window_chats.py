"""The chat list's actions on one chat: rename, pin, delete (after a confirmation) and export as
Markdown, JSON or HTML. A part of `MainWindow` (app/main_window.py), kept in its own file; GUI
thread only."""

from __future__ import annotations

from app.i18n import tr


class WindowChats:
    """Mixed into MainWindow: it uses the window's worker and controller."""

    def rename_chat(self, cid: int, current: str, title: str | None = None) -> None:
        if title is None:
            from PySide6.QtWidgets import QInputDialog

            title, ok = QInputDialog.getText(self, tr("Rename chat"), tr("Title"), text=current)
            if not ok:
                return
        self.worker.call(lambda a: a.rename_conversation(cid, title), refresh=True)

    def pin_chat(self, cid: int, pinned: bool) -> None:
        self.worker.call(lambda a: a.pin_conversation(cid, pinned), refresh=True)

    def delete_chat(self, cid: int, title: str, confirmed: bool = False) -> None:
        if not confirmed and not self.confirm(tr("Delete chat"), tr("Delete “{title}” and everything remembered "
                                                                      "from it?").format(title=title)):
            return
        self.chat.close_chat(cid)  # shown: the chat shows none
        self.worker.call(lambda a: a.delete_conversation(cid), refresh=True)

    def export_chat(self, cid: int, fmt: str, path: str | None = None) -> None:
        if path is None:
            from PySide6.QtWidgets import QFileDialog

            filt = {"md": "Markdown (*.md)", "json": "JSON (*.json)", "html": "HTML (*.html)"}[fmt]
            path, _ = QFileDialog.getSaveFileName(self, tr("Export chat"), f"chat-{cid}.{fmt}", filt)
            if not path:
                return
        self.worker.export(cid, path, fmt)
