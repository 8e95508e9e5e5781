"""The documents' engine calls, on the engine thread: a child of `EngineWorker`, so it moves to the
engine's QThread with it (and back at shutdown). The window and the Documents panel call its
slots through queued signals and hear back through its signals, as JSON text (see
app/engine_worker.py for why). Indexing itself runs on the engine's documents thread:
`add` returns at once and `added` comes when that run is over.

Only `cancel_indexing` and `status` are called from the GUI thread: neither waits on the engine.
"""

from __future__ import annotations

import json
import logging
import threading

from PySide6.QtCore import QObject, Signal, Slot

from app.engine_worker import EngineWorker
from engine.api import ConversationNotFound, DocumentsError, StorageError

log = logging.getLogger(__name__)


class DocumentsWorker(QObject):
    listed = Signal(str)                  # JSON {"enabled", "roots", "files", "collections"}
    added = Signal(str)                   # JSON: an add run's report {"indexed", …, "cancelled"}, or {"error"}
    conversation_docs = Signal(int, bool)  # conversation id, "Use my documents" on
    notice = Signal(str)                  # a refused request, for the user

    def __init__(self, engine: EngineWorker):
        super().__init__(engine)
        self.engine = engine
        # One per add run not yet reported: Cancel sets them all, so runs still queued behind the
        # running one end too (the engine's cancel_indexing reaches only the running one).
        self._cancels: set[threading.Event] = set()

    def _assistant(self):
        """The engine's Assistant when it runs with documents, else None."""
        a = self.engine.assistant
        return a if a is not None and a.documents_progress() is not None else None

    # ---- slots (engine thread)
    @Slot()
    def refresh(self) -> None:
        a = self._assistant()
        if a is None:
            self.listed.emit(json.dumps({"enabled": False, "roots": [], "files": [], "collections": []}))
            return
        try:
            payload = {"enabled": True, "roots": a.document_roots(), "files": a.documents(),
                       "collections": a.document_collections()}
        except StorageError as exc:
            self.notice.emit(str(exc))
            return
        self.listed.emit(json.dumps(payload, ensure_ascii=False))

    @Slot(str, str)
    def add(self, paths_json: str, collection: str) -> None:
        """Queue folders/files for indexing into `collection`; `added` says how it went."""
        a = self._assistant()
        if a is None:
            self.added.emit(json.dumps({"error": "documents are turned off (setting docs.enabled)"}))
            return
        cancel = threading.Event()
        try:
            future = a.add_documents(json.loads(paths_json), collection, wait=False, cancel=cancel)
        except DocumentsError as exc:
            self.added.emit(json.dumps({"error": str(exc)}))
            return
        self._cancels.add(cancel)
        future.add_done_callback(lambda f: self._finished(f, cancel))

    def _finished(self, future, cancel: threading.Event) -> None:
        """On the documents thread: a queued signal carries the report to the GUI."""
        self._cancels.discard(cancel)
        try:
            report = future.result()
            payload = dict(report.to_dict(), cancelled=report.cancelled)
        except Exception as exc:  # noqa: BLE001 - said in the panel; the trace is in the engine's log
            payload = {"error": str(exc) or type(exc).__name__}
        self.added.emit(json.dumps(payload, ensure_ascii=False))

    @Slot(str, str)
    def remove(self, path: str, collection: str) -> None:
        """Take an added folder/file (`path`) or a whole `collection` out of the index (one of them, the other "")."""
        a = self._assistant()
        if a is not None:
            try:
                a.remove_documents(path=path or None, collection=collection or None)
            except (DocumentsError, StorageError) as exc:
                self.notice.emit(str(exc))
        self.refresh()

    @Slot(int, bool)
    def set_conversation(self, conversation_id: int, on: bool) -> None:
        a = self.engine.assistant
        if a is None:
            return
        try:
            a.set_conversation_docs(conversation_id, True if on else None)
        except (ConversationNotFound, StorageError) as exc:
            self.notice.emit(str(exc))
            return
        self.conversation_docs.emit(conversation_id, on)

    @Slot(int)
    def get_conversation(self, conversation_id: int) -> None:
        a = self.engine.assistant
        if a is None:
            return
        try:
            on = a.conversation_docs(conversation_id) is not None
        except ConversationNotFound:
            return  # deleted meanwhile
        self.conversation_docs.emit(conversation_id, on)

    # ---- called from the GUI thread: never waits on the engine
    def cancel_indexing(self) -> None:
        """Stop the running indexing run after the file being written, and those queued (flags: no
        lock, no wait)."""
        for cancel in list(self._cancels):
            cancel.set()
        a = self.engine.assistant
        if a is not None:
            a.cancel_indexing()  # a rescan (the folder watcher, a resumed run) has no event of ours

    def status(self) -> dict | None:
        """The published documents status (`Assistant.status()["documents"]`); None when off."""
        return (self.engine.status() or {}).get("documents")
