"""The memory without a chat engine (`assistant memory`): add, search, forget and list what the
assistant remembers, on the data dir's database, with no language model loaded.

    with Memories.open() as memories:
        memory_id = memories.add("I live in Lyon")

The embedding model loads on `start()` (its own thread); keyword search and listing need none.
"""

from __future__ import annotations

from engine.config.paths import db_path
from engine.config.settings import Settings
from engine.memory.service import Hits, MemoryInputError, MemoryNotFound, MemoryService
from engine.memory.store import MemoryRow
from engine.storage import Database

__all__ = ["Memories", "MemoryInputError", "MemoryNotFound"]


class Memories:
    """The memory service on its own database connection; `close` closes both."""

    def __init__(self, service: MemoryService):
        self._service = service

    @classmethod
    def open(cls, settings: Settings | None = None, start: bool = False) -> "Memories":
        """As the user configured it (`memory.*` settings). `start`: begin loading the embedding
        model and the indexing thread now (a search by meaning needs both).

        Raises:
            ValueError: `memory.embedder` names no embedder of the catalog.
        """
        db = Database(db_path())
        try:
            service = MemoryService.from_settings(db, settings or Settings.shared())
        except BaseException:
            db.close()
            raise
        memories = cls(service)
        return memories.start() if start else memories

    def start(self) -> "Memories":
        self._service.start()
        return self

    # ---- the embedding model
    @property
    def embedder_id(self) -> str:
        return self._service.embedder.model_id

    def embedder_ready(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` s for the embedding model; True once it is loaded."""
        return self._service.embedder.wait(timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every memory has its vector; False on timeout or when none can be made."""
        return self._service.flush(timeout)

    def retrieval_status(self) -> str:
        """"ready", or "skipped: <why>" (what a search by meaning would say now)."""
        return self._service.retrieval_status()

    @property
    def vector_backend(self) -> str:
        return self._service.vector_backend

    # ---- the memories
    def add(self, text: str, pin: bool = False) -> int:
        """Store a fact (`pin`: put it in every prompt); its id. Raises MemoryInputError."""
        return self._service.add(text, pin=pin)

    def search(self, query: str, k: int = 3, min_score: float | None = None) -> Hits:
        """Hits best first (id, text, score, source, kind); `.status` says how it searched."""
        return self._service.search(query, k=k, min_score=min_score)

    def forget(self, memory_id: int) -> None:
        """Delete a memory or an indexed message chunk. Raises MemoryNotFound."""
        self._service.forget(memory_id)

    def list(self, kinds: tuple[str, ...] = ("pinned", "note"), limit: int | None = None) -> list[MemoryRow]:
        """Oldest first; `limit`: only the newest N."""
        return self._service.list(kinds, limit)

    # ---- lifecycle
    def close(self) -> None:
        """Store what is queued, stop the indexing thread, close the database."""
        self._service.close()
        self._service.db.close()

    def __enter__(self) -> "Memories":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
