"""Documents through the front door: the Assistant's document calls, and `Documents`, the same
calls without a chat engine (the CLI's `assistant docs`, a future docs watcher process).

Indexing runs on the documents service's own thread; `add_documents` returns a Future unless
asked to wait. Searches and listings are reads on the calling thread's own SQLite connection.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from pathlib import Path

from engine.config.paths import db_path
from engine.config.settings import Settings
from engine.docs.attach import chat_collection
from engine.docs.service import AddReport, DocumentService, DocumentsError
from engine.docs.store import DEFAULT_COLLECTION
from engine.memory.embedder import Embedder
from engine.storage import Database

__all__ = ["DEFAULT_COLLECTION", "AddReport", "Documents", "DocumentsApi", "DocumentsError"]


def embedder_from_settings(settings: Settings) -> Embedder:
    """The embedder the memory setting names (documents and memory share one model)."""
    from engine.models.catalog import load_catalog

    chosen = settings.get("memory.embedder")
    entry = load_catalog().embedder(chosen)
    if entry is None:
        raise ValueError(f"unknown embedding model {chosen!r} (setting memory.embedder; see models/catalog.toml)")
    return Embedder() if entry.bundled else Embedder(entry.path(), dim=entry.dim, model_id=entry.id)


class DocumentsApi:
    """Document calls on top of `self.docs` (a DocumentService, or None when documents are off)."""

    docs: DocumentService | None

    def _docs(self) -> DocumentService:
        if self.docs is None:
            raise DocumentsError("documents are turned off (setting docs.enabled)")
        return self.docs

    def add_documents(self, paths: list[str | os.PathLike], collection: str = DEFAULT_COLLECTION,
                      wait: bool = True, cancel: threading.Event | None = None) -> dict | Future:
        """Index folders/files into `collection` (again: only what changed). With `wait`, the
        report {"indexed", "unchanged", "removed", "chunks", "seconds", "skipped": [{"path",
        "reason"}]}; else a Future of the AddReport (the indexing thread does the work)."""
        future = self._docs().add(paths, collection, cancel)
        return future.result().to_dict() if wait else future

    def attach_documents(self, conversation_id: int, paths: list[str | os.PathLike]) -> dict:
        """Large attachments of a chat: indexed into the chat's own collection (waiting for it), and
        the chat answers from it, with citations (a chat already using every collection keeps
        that). Returns the add report (see `add_documents`)."""
        self.conversation(conversation_id)  # ConversationNotFound before any indexing
        collection = chat_collection(conversation_id)
        report = self.add_documents(paths, collection, wait=True)
        if self.conversation_docs(conversation_id) != "*":
            self.set_conversation_docs(conversation_id, collection)
        return report

    def search_documents(self, query: str, collection: str | None = None, k: int | None = None) -> list[dict]:
        """Excerpts best first: {"path", "page", "heading", "line", "text", "score", "rrf", "collection"}."""
        hits = self._docs().search(query, k, collection)
        return [hit_dict(h) for h in hits]

    def documents(self, collection: str | None = None) -> list[dict]:
        """Every file met under the added folders: {"path", "collection", "status" (indexed |
        skipped), "reason", "pages", "chunks", "size", "indexed", …}."""
        return self._docs().files(collection)

    def document_roots(self, collection: str | None = None) -> list[dict]:
        """The folders/files the user added: {"path", "collection", "files", "chunks", "scanned"}."""
        return self._docs().roots(collection)

    def document_collections(self) -> list[dict]:
        return self._docs().collections()

    def remove_documents(self, path: str | None = None, collection: str | None = None) -> dict:
        """Take an added folder/file or a collection out of the index: {"roots", "files"}."""
        return self._docs().remove(path, collection)

    def documents_ready(self, timeout: float | None = None) -> str:
        """Load the embedding model documents are searched with, waiting up to `timeout` s; its
        state: "ready", "loading" (searches rank by keywords meanwhile) or "failed: …"."""
        embedder = self._docs().embedder
        embedder.start()
        embedder.wait(timeout)
        return embedder.state

    def cancel_indexing(self) -> None:
        if self.docs is not None:
            self.docs.cancel()

    def documents_progress(self) -> dict | None:
        """The indexing job's progress (never blocks): {"state", "files_done", "files_total",
        "chunks", "rate_chunks_s", "current", "queued"}; None when documents are off."""
        return self.docs.progress() if self.docs is not None else None


def hit_dict(h) -> dict:
    at = h.source
    return {"path": at["path"], "page": at["page"], "heading": at["heading"], "line": at["line"], "text": h.text,
            "score": h.score if h.score is not None else 0.0, "rrf": h.rrf, "collection": at["collection"]}


class Documents(DocumentsApi):
    """The documents index on its own (no models loaded): what `assistant docs` uses.

        with Documents.open() as docs:
            docs.add_documents(["~/Papers"])

    Args (open): settings (default: the user's), database (default: the data dir's).
    """

    def __init__(self, service: DocumentService, owned: list):
        self.docs, self._owned = service, owned

    @classmethod
    def open(cls, settings: Settings | None = None, database: Database | None = None,
             start: bool = False, db_file: str | os.PathLike | None = None) -> "Documents":
        """`start`: run indexing on the service's thread (and resume unfinished folders);
        otherwise each call indexes on the calling thread. `db_file`: another SQLite file than
        the data dir's (the installed app's selftest leaves the user's index alone)."""
        settings = settings or Settings.shared()
        db = database if database is not None else Database(db_file or db_path())
        owned: list = [] if database is not None else [db]
        embedder = embedder_from_settings(settings)  # loaded by the first add or search
        service = DocumentService.from_settings(db, settings, embedder)
        if start:
            service.start()
        return cls(service, [service, embedder] + owned)

    def close(self) -> None:
        for thing in self._owned:
            if isinstance(thing, Embedder) and thing.state == "loading":
                thing.wait(60)  # never leave while ONNX Runtime is still loading
            thing.close()
        self._owned = []

    def __enter__(self) -> "Documents":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def expand(paths: list[str]) -> list[str]:
    return [str(Path(p).expanduser()) for p in paths]
