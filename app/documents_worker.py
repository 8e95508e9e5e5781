"""The documents' engine calls, on the engine thread through `EngineWorker.call`; the answers come
back to the GUI thread's callbacks (the window's "Use my documents" switch, the Documents panel).
Indexing itself runs on the engine's documents thread: `add` returns at once and its `on_added`
comes when that run is over.

Only `cancel_indexing` and `status` act at once on the GUI thread: neither waits on the engine.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from app.engine_worker import EngineWorker, said
from engine.api import Assistant, ConversationNotFound, DocumentsError, StorageError

log = logging.getLogger(__name__)
OFF = {"enabled": False, "roots": [], "files": [], "collections": []}


class DocumentsWorker:
    """Made and called on the GUI thread; its reads and writes run on the engine thread."""

    def __init__(self, engine: EngineWorker):
        self.engine = engine
        # One per add run not yet reported: Cancel sets them all, so runs still queued behind the
        # running one end too (the engine's cancel_indexing reaches only the running one).
        self._cancels: set[threading.Event] = set()

    @staticmethod
    def _documents(a: Assistant) -> Assistant | None:
        """The Assistant when it runs with documents, else None (engine thread)."""
        return a if a.documents_progress() is not None else None

    def refresh(self, on_listed: Callable[[dict], None], on_notice: Callable[[str], None]) -> None:
        """The lists {"enabled", "roots", "files", "collections"} to `on_listed`; a read that failed to `on_notice`."""
        def lists(a: Assistant) -> dict:
            if self._documents(a) is None:
                return OFF
            return {"enabled": True, "roots": a.document_roots(), "files": a.documents(),
                    "collections": a.document_collections()}

        self.engine.post_call(lambda: lists(self.engine.assistant) if self.engine.assistant else OFF, on_listed,
                              lambda exc: on_notice(said(exc)))

    def add(self, paths: list[str], collection: str, on_added: Callable[[dict], None]) -> None:
        """Queue folders/files for indexing into `collection`; `on_added` gets the run's report
        {"indexed", …, "cancelled"} or {"error"} (GUI thread)."""
        cancel = threading.Event()

        def start() -> None:
            a = self.engine.assistant
            if a is None or self._documents(a) is None:
                raise DocumentsError("documents are turned off (setting docs.enabled)")
            future = a.add_documents(paths, collection, wait=False, cancel=cancel)
            self._cancels.add(cancel)
            future.add_done_callback(lambda f: self._finished(f, cancel, on_added))

        self.engine.post_call(start, None, lambda exc: on_added({"error": str(exc) or type(exc).__name__}))

    def _finished(self, future, cancel: threading.Event, on_added: Callable[[dict], None]) -> None:
        """On the documents thread: the report goes to the GUI thread."""
        self._cancels.discard(cancel)
        try:
            report = future.result()
            payload = dict(report.to_dict(), cancelled=report.cancelled)
        except Exception as exc:  # noqa: BLE001 - said in the panel; the trace is in the engine's log
            payload = {"error": str(exc) or type(exc).__name__}
        self.engine.runner.to_gui(on_added, payload)

    def remove(self, path: str, collection: str, on_notice: Callable[[str], None]) -> None:
        """Take an added folder/file (`path`) or a whole `collection` out of the index (one of them, the other "")."""
        def remove(a: Assistant) -> None:
            if self._documents(a) is not None:
                a.remove_documents(path=path or None, collection=collection or None)

        self.engine.post_call(lambda: remove(self.engine.assistant), None,
                              lambda exc: on_notice(str(exc) if isinstance(exc, (DocumentsError, StorageError))
                                                    else said(exc)))

    def set_conversation(self, conversation_id: int, on: bool, on_state: Callable[[int, bool], None]) -> None:
        """Store the chat's "Use my documents"; an error (a deleted chat, a full disk) goes to the
        engine's `on_notice`."""
        def store(a: Assistant) -> bool:
            a.set_conversation_docs(conversation_id, True if on else None)
            return on

        self.engine.call(store, lambda stored: on_state(conversation_id, stored))

    def get_conversation(self, conversation_id: int, on_state: Callable[[int, bool], None]) -> None:
        def read(a: Assistant) -> bool | None:
            try:
                return a.conversation_docs(conversation_id) is not None
            except ConversationNotFound:
                return None  # deleted meanwhile

        self.engine.call(read, lambda on: on is not None and on_state(conversation_id, on))

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
