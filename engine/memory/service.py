"""The memory the chat uses: explicit memories, every finished message, fused retrieval.

Writes land in SQLite at once (keyword search sees them immediately); embeddings are computed by
one background thread once the embedder has loaded, so neither a chat turn nor the app's start
waits for torch. Retrieval is skipped, and says so, until the embedder is ready.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from engine.memory.chunking import chunk_text
from engine.memory.embedder import INDEXING, Embedder
from engine.memory.store import MemoryRow, MemoryStore
from engine.retrieval import Hit, Hits, IndexWorker, Rules, fuse
from engine.retrieval.fusion import norm
from engine.retrieval.terms import is_mostly_cjk
from engine.storage import MAX_MESSAGE_CHARS, Database

log = logging.getLogger(__name__)

MAX_MEMORY_CHARS = 2_000      # an explicit memory is a fact, and pinned ones go into every prompt
MAX_QUERY_EMBED_CHARS = 2_000  # the embedder reads ~256 word pieces; the rest would be cut anyway
MIN_POOL = 20        # candidates taken from each of the vector and keyword lists
EMBED_BATCH = 8      # small: a search waits for at most one batch on the shared model
ROLES = ("user", "assistant")
_WAKE = object()  # a job that only says: memories were added (embed them)
__all__ = ["Hit", "Hits", "MemoryInputError", "MemoryNotFound", "MemoryService"]


class MemoryInputError(ValueError):
    """Text the memory refuses (empty, too long, NUL characters); the message says why."""


class MemoryNotFound(LookupError):
    pass


@dataclass
class _IndexJob:
    conversation_id: int
    message_id: int
    role: str
    text: str
    created: str | None
    attempts: int = field(default=0)


def clean(text: str) -> str:
    """Lone surrogates replaced, so SQLite and the tokenizer accept the text."""
    return text.encode("utf-8", errors="replace").decode("utf-8")


def parse_source(row: MemoryRow) -> dict | str:
    if row.kind == "message":
        return {"conversation_id": row.conversation_id, "message_id": row.message_id, "date": row.created}
    return "pinned" if row.kind == "pinned" else "memory"


class MemoryService:
    """Explicit memories and indexed messages, searched by meaning and by keyword.

    Args:
        db: the app's database (all writes go through its connection and lock).
        embedder: the sentence embedder; `start()` starts loading it.
        vector_backend: "sqlite-vec" | "numpy" | "auto" | None (see `MemoryStore`).
        ram_budget_mb: RAM the numpy path may hold under "auto".

    The similarity thresholds come from the embedder's model (`EmbedderModel`), per script.
    """

    def __init__(self, db: Database, embedder: Embedder, *, vector_backend: str | None = None,
                 ram_budget_mb: float = 256.0):
        self.db, self.embedder = db, embedder
        self.store = MemoryStore(db, embedder.model_id, embedder.dim, vector_backend, ram_budget_mb)
        self._worker = IndexWorker("memory-indexer", self._run_job, self._embed_pending, idle_s=0.25,
                                   startup=self._startup)
        self._searching = 0        # searches waiting for the model: the indexer lets them go first
        self._search_lock = threading.Lock()
        self._retry_at = 0.0

    @property
    def vector_backend(self) -> str:
        return self.store.vector_backend

    # ---- lifecycle
    @classmethod
    def from_settings(cls, db: Database, settings) -> MemoryService:
        """The service as the user configured it (`memory.*` settings); not started.

        Raises:
            ValueError: `memory.embedder` names no embedder of the catalog.
        """
        from engine.models.catalog import load_catalog

        chosen = settings.get("memory.embedder")
        entry = load_catalog().embedder(chosen)
        if entry is None:
            raise ValueError(f"unknown embedding model {chosen!r} (setting memory.embedder; see models/catalog.toml)")
        embedder = Embedder() if entry.bundled else Embedder(entry.path(), dim=entry.dim, model_id=entry.id)
        return cls(db, embedder, vector_backend=settings.get("memory.vector_backend"),
                   ram_budget_mb=settings.get("memory.ram_budget_mb"))

    def start(self) -> MemoryService:
        """Start loading the embedder and the indexing thread; returns at once."""
        self.embedder.start()
        self._worker.start()
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Store the queued messages, then stop the indexing thread; vectors still missing are
        computed on the next start. The service cannot search after this."""
        self._worker.stop(timeout)
        self.store.close()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until queued messages are stored and every memory has a vector; False on timeout
        or when vectors cannot be made (embedder failed or not started)."""
        w = self._worker
        if not w.running and w.outstanding:
            return False
        w.wait_for(lambda: w.outstanding == 0 and (not w.dirty or not self._can_embed()), timeout)
        return w.wait_for(lambda: w.outstanding == 0 and not w.dirty, 0)

    def _can_embed(self) -> bool:
        return self._worker.running and self.embedder.error is None and self.embedder.state != "not started"

    def retrieval_status(self) -> str:
        """"ready", or "skipped: <why>" (the status a search would return now)."""
        state = self.embedder.state
        if state == "ready":
            return "ready"
        if state == "loading":
            return "skipped: embedder loading"
        if state == "not started":
            return "skipped: embedder not started"
        return f"skipped: embedder {state}"

    def status(self) -> dict:
        return {"retrieval": self.retrieval_status(), "embedder": self.embedder.state,
                "model": self.embedder.model_id, "runtime": self.embedder.runtime_used,
                "load_s": self.embedder.load_seconds, "vector_backend": self.vector_backend,
                "sqlite": self.db.driver, "memories": self.store.counts(),
                "pending_vectors": self.store.pending_count()}

    # ---- writes
    def add(self, text: str, pin: bool = False, source: dict | None = None) -> int:
        """Store an explicit memory (a fact about the user, a preference); its id.

        Args:
            text: the fact, at most MAX_MEMORY_CHARS characters.
            pin: a critical memory that goes into every prompt (`pinned()`), not only retrieved.
            source: {"conversation_id", "message_id"} of the message that asked for it, if any.

        Raises:
            MemoryInputError: empty, too long, or contains NUL characters.
        """
        if not isinstance(text, str):
            raise MemoryInputError("memory text must be a string")
        if "\x00" in text:
            raise MemoryInputError("memory text contains NUL characters; remove them and try again")
        text = clean(text).strip()
        if not text:
            raise MemoryInputError("memory text is empty")
        if len(text) > MAX_MEMORY_CHARS:
            raise MemoryInputError(f"memory text is too long ({len(text)} characters; at most {MAX_MEMORY_CHARS})"
                                   " — keep a memory to one fact")
        source = source or {}
        (memory_id,) = self.store.insert("pinned" if pin else "note", [text],
                                         conversation_id=source.get("conversation_id"),
                                         message_id=source.get("message_id"))
        self._worker.put(_WAKE)
        return memory_id

    def index_message(self, conversation_id: int, message_id: int, role: str, text: str,
                      created: str | None = None) -> None:
        """Queue a finished message for retrieval across conversations; returns at once.

        The indexing thread splits it into ~500-character overlapping chunks, stores them (again:
        re-indexing a message replaces its chunks) and embeds them once the embedder is ready.
        System messages and empty texts are ignored, and so is a message deleted or superseded
        before its turn comes.

        Raises:
            MemoryInputError: text longer than MAX_MESSAGE_CHARS, or a role that is not a
                conversation role.
        """
        if role == "system" or not text or not text.strip():
            return
        if role not in ROLES:
            raise MemoryInputError(f"role must be one of {ROLES}, not {role!r}")
        if len(text) > MAX_MESSAGE_CHARS:
            raise MemoryInputError(f"message too long to index ({len(text)} characters; at most {MAX_MESSAGE_CHARS})")
        self._worker.put(_IndexJob(conversation_id, message_id, role, text, created))

    def forget(self, memory_id: int) -> None:
        """Delete a memory (row, keyword entry, vector) now; it is out of every later search.

        Raises:
            MemoryNotFound: no memory has this id.
        """
        if not self.store.delete([memory_id]):
            raise MemoryNotFound(f"no memory with id {memory_id}")

    def forget_all(self) -> int:
        """Delete every memory (explicit ones and indexed messages) now; how many there were.
        Conversations stay; messages written later are indexed again."""
        ids = [row.id for row in self.store.list(("pinned", "note", "message"))]
        return len(self.store.delete(ids))

    def forget_message(self, message_id: int) -> int:
        """Delete the chunks of a message deleted or superseded in the database; how many there
        were. An index job still queued for it stores nothing (it finds the message gone)."""
        return len(self.store.delete(self.store.message_chunk_ids(message_id)))

    # ---- reads
    def pinned(self) -> list[MemoryRow]:
        """The pinned (critical) memories, oldest first: every chat turn puts these in its prompt."""
        return self.store.list(("pinned",))

    def list(self, kinds: tuple[str, ...] = ("pinned", "note"), limit: int | None = None) -> list[MemoryRow]:
        """Memories of `kinds` ("pinned", "note", "message"), oldest first."""
        return self.store.list(kinds, limit)

    def search(self, query: str, k: int = 3, min_score: float | None = None, exclude_texts=(),
               exclude_message_ids=(), include_pinned: bool = True) -> Hits:
        """The memories most relevant to `query`, fused from vector and keyword ranks (RRF).

        Args:
            query: usually the user's new message.
            k: at most this many hits.
            min_score: cosine similarity a hit needs (default: the model's, per script); a hit
                that also matched by keyword needs only the model's `keyword_min_score` (or
                `min_score`, when that is lower).
            exclude_texts: texts already in the prompt window: a hit contained in one is dropped.
            exclude_message_ids: messages in the window: their chunks are dropped.
            include_pinned: False when the pinned memories are already in the prompt.

        Returns:
            `Hits` (a list, best first) with `.status` "ok", or "skipped: …" (embedder loading or
            failed, empty query) and no hits.
        """
        query = clean(query or "").replace("\x00", "").strip()
        if not query:
            return Hits(status="skipped: empty query")
        status = self.retrieval_status()
        if status != "ready":
            return Hits(status=status)
        if k <= 0:
            return Hits()
        found = self.store.candidates(query, max(MIN_POOL, 4 * k), self._embed_query)
        vec_min, kw_min = self.thresholds(query)
        if min_score is not None:
            vec_min, kw_min = min_score, min(min_score, kw_min)
        skip_messages = set(exclude_message_ids)
        rows = {r.id: r for r in self.store.rows(list(found.cosine), live_only=True)
                if (include_pinned or r.kind != "pinned") and r.message_id not in skip_messages}
        rules = Rules(floors=lambda _text: (vec_min, kw_min), describe=lambda row: (parse_source(row), row.kind),
                      shown=tuple(norm(t) for t in exclude_texts if t and t.strip()))
        return Hits(fuse(found, rows, k, rules))

    def _embed_query(self, query: str):
        with self._search_lock:
            self._searching += 1
        try:
            return self.embedder.embed([query[:MAX_QUERY_EMBED_CHARS]])[0]
        finally:
            with self._search_lock:
                self._searching -= 1

    def thresholds(self, query: str) -> tuple[float, float]:
        """(cosine a hit needs, cosine a keyword-matched hit needs) for this query's script."""
        m = self.embedder.model
        return ((m.min_score_cjk, m.keyword_min_score_cjk) if is_mostly_cjk(query)
                else (m.min_score, m.keyword_min_score))

    # ---- the indexing thread (IndexWorker: jobs in order, then vectors for what has none)
    def _run_job(self, job) -> None:
        if isinstance(job, _IndexJob):
            self._store_message(job)

    def _startup(self) -> None:
        """Housekeeping off the start path: drop chunks of deleted or superseded messages, bring
        the vector index up to date (sqlite-vec) or into RAM (numpy)."""
        try:
            orphans = self.store.orphan_ids()
            if orphans:
                log.info("dropping %d memory chunks of deleted or superseded messages", len(orphans))
                self.store.delete(orphans)
            if hasattr(self.store.index, "sync"):
                self.store.index.sync()
            else:
                self.store.index.load()
        except Exception:  # noqa: BLE001 - logged; searches still work, the next start retries
            log.exception("memory start-up housekeeping failed")

    def _store_message(self, job: _IndexJob) -> None:
        try:
            chunks = chunk_text(clean(job.text).replace("\x00", ""))
            # live_only: the message may have been deleted or superseded since it was queued.
            self.store.insert("message", chunks, conversation_id=job.conversation_id,
                              message_id=job.message_id, role=job.role, created=job.created,
                              replace_message=True, live_only=True)
        except Exception:  # noqa: BLE001 - one bad message must not stop the indexer
            log.exception("indexing message %s of conversation %s failed", job.message_id, job.conversation_id)

    def _embed_pending(self) -> bool:
        """Vectors for memories without one, a batch at a time while no message waits; True when
        none is left."""
        if not self.embedder.ready or time.monotonic() < self._retry_at:
            return False
        while not self._worker.waiting():  # new messages are stored first; they are quick
            while self._searching:
                time.sleep(0.005)
            batch = self.store.pending(EMBED_BATCH)
            if not batch:
                return True
            try:
                vecs = self.embedder.embed([text for _, text in batch], INDEXING)
                self.store.set_vectors([i for i, _ in batch], vecs)
            except Exception:  # noqa: BLE001 - retried later; memories stay keyword-searchable
                log.exception("embedding %d memories failed; retrying in 30 s", len(batch))
                self._retry_at = time.monotonic() + 30
                return False
        return False
