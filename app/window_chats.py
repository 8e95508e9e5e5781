"""The chat list's actions on one chat: rename, pin, delete (after a confirmation) and export as
Markdown, JSON or HTML. GUI thread only."""

from __future__ import annotations

from typing import Callable

from PySide6.QtWidgets import QFileDialog, QInputDialog, QWidget

from app.chat_controller import ChatController
from app.engine_worker import EngineWorker
from app.i18n import tr


class ChatListActions:
    """`parent` hosts their dialogs; `confirm(title, text)` asks before a delete."""

    def __init__(self, parent: QWidget, worker: EngineWorker, chat: ChatController,
                 confirm: Callable[[str, str], bool]):
        self.parent, self.worker, self.chat, self.confirm = parent, worker, chat, confirm

    def rename(self, cid: int, current: str, title: str | None = None) -> None:
        if title is None:
            title, ok = QInputDialog.getText(self.parent, tr("Rename chat"), tr("Title"), text=current)
            if not ok:
                return
        self.worker.call(lambda a: a.rename_conversation(cid, title), refresh=True)

    def pin(self, cid: int, pinned: bool) -> None:
        self.worker.call(lambda a: a.pin_conversation(cid, pinned), refresh=True)

    def delete(self, cid: int, title: str, confirmed: bool = False) -> None:
        if not confirmed and not self.confirm(tr("Delete chat"), tr("Delete “{title}” and everything remembered "
                                                                      "from it?").format(title=title)):
            return
        self.chat.close_chat(cid)  # shown: the chat shows none
        self.worker.call(lambda a: a.delete_conversation(cid), refresh=True)

    def export(self, cid: int, fmt: str, path: str | None = None) -> None:
        if path is None:
            filt = {"md": "Markdown (*.md)", "json": "JSON (*.json)", "html": "HTML (*.html)"}[fmt]
            path, _ = QFileDialog.getSaveFileName(self.parent, tr("Export chat"), f"chat-{cid}.{fmt}", filt)
            if not path:
                return
        self.worker.export(cid, path, fmt)
