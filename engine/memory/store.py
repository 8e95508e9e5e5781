"""Memories in the app's one SQLite file: rows on a hybrid index (engine/retrieval).

Tables come from migration 0005_memory; the vec0 table is created here, at open, because only a
connection with sqlite-vec loaded can create it (`vector_backend` says which path is active).
Every write is one explicit transaction under the `Database` lock, rows, FTS entries and vectors
together, so `forget` is complete the moment it returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from engine.retrieval.index import HybridIndex, Tables
from engine.storage import Database, now

log = logging.getLogger(__name__)

KINDS = ("pinned", "note", "message")
TABLES = Tables(chunks="memories", fts="memories_fts", vectors="memory_vectors", vector_id="memory_id",
                vec0="memory_vec", meta="memory_meta", always="kind IN ('pinned', 'note')",
                pending_first="c.kind = 'message', c.id DESC")  # explicit memories first, then the newest


@dataclass(frozen=True)
class MemoryRow:
    id: int
    kind: str
    text: str
    conversation_id: int | None
    message_id: int | None
    role: str | None
    chunk: int
    created: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


_ROW_COLS = "m.id, m.kind, m.text, m.conversation_id, m.message_id, m.role, m.chunk, m.created"
_INSERT = "INSERT INTO memories (kind, text, conversation_id, message_id, role, chunk, created) VALUES (?, ?, ?, ?, ?, ?, ?)"


class MemoryStore(HybridIndex):
    """Rows, keyword index and vectors of the memory, in `db`'s file.

    Args:
        db: the app's database (migrated to 0005_memory).
        model_id: the embedder whose vectors are searched (others are ignored until re-embedded).
        dim: its embedding dimension.
        vector_backend: "sqlite-vec" or "numpy"; None: sqlite-vec when the connection has it;
            "auto": numpy while this model's vectors fit in `ram_budget_mb` (it meets the 30 ms
            target at 100 000 chunks, sqlite-vec's scalar bit scan does not: docs/memory.md),
            else sqlite-vec when the connection has it.
        ram_budget_mb: RAM the numpy path may hold under "auto" (float32 + sign bits per vector).
    """

    def __init__(self, db: Database, model_id: str, dim: int, vector_backend: str | None = None,
                 ram_budget_mb: float = 256.0):
        super().__init__(db, model_id, dim, TABLES, vector_backend=vector_backend, ram_budget_mb=ram_budget_mb,
                         name="memory")

    # ---- rows
    def insert(self, kind: str, texts: list[str], *, conversation_id: int | None = None,
               message_id: int | None = None, role: str | None = None, created: str | None = None,
               replace_message: bool = False, live_only: bool = False) -> list[int]:
        """Store texts (chunks 0..n-1 of one source) with their keyword entries; their ids.

        With `replace_message`, the message's earlier chunks go first (re-indexing is idempotent).
        With `live_only`, nothing is stored when the message is deleted or superseded: checked in
        the same transaction, so a delete committed before this call is always seen.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        created = created or now()
        ids: list[int] = []
        with self.writing() as write:
            if replace_message and message_id is not None:
                self.drop(write, [r[0] for r in write.execute(
                    "SELECT id FROM memories WHERE message_id = ? AND kind = 'message'", (message_id,))])
            if live_only and not write.execute("SELECT 1 FROM messages WHERE id = ? AND superseded_by IS NULL",
                                               (message_id,)).fetchone():
                texts = []
            for chunk, text in enumerate(texts):
                ids.append(write.execute(_INSERT, (kind, text, conversation_id, message_id, role, chunk,
                                                   created)).lastrowid)
            self.index_texts(write, ids, texts)
        return ids

    def insert_many(self, rows: list[tuple[str, str, int | None, int | None, str | None, int, str]],
                    vecs: np.ndarray | None = None) -> list[int]:
        """Bulk load (kind, text, conversation_id, message_id, role, chunk, created) rows, with
        their vectors when given, in one transaction (the benchmark's fast path)."""
        with self.writing() as write:
            ids = [write.execute(_INSERT, row).lastrowid for row in rows]
            self.index_texts(write, ids, [r[1] for r in rows])
            if vecs is not None:
                self._put_vectors(write, ids, vecs)
        return ids

    def delete(self, ids: list[int]) -> list[int]:
        """Remove memories with their keyword entries and vectors; the ids that existed."""
        with self.writing() as write:
            return self.drop(write, ids)

    def message_chunk_ids(self, message_id: int) -> list[int]:
        return [r[0] for r in self.read("SELECT id FROM memories WHERE message_id = ? AND kind = 'message'",
                                        (message_id,))]

    def get(self, memory_id: int) -> MemoryRow | None:
        rows = self.rows([memory_id])
        return rows[0] if rows else None

    def rows(self, ids: list[int], live_only: bool = False) -> list[MemoryRow]:
        """The rows for `ids` (any order). `live_only` drops chunks of messages that were deleted
        or superseded since they were indexed."""
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        live = (" AND (m.kind != 'message' OR EXISTS (SELECT 1 FROM messages g"
                " WHERE g.id = m.message_id AND g.superseded_by IS NULL))") if live_only else ""
        return [MemoryRow(*r) for r in self.read(
            f"SELECT {_ROW_COLS} FROM memories m WHERE m.id IN ({marks}){live}", tuple(ids))]

    def list(self, kinds: tuple[str, ...] = ("pinned", "note"), limit: int | None = None) -> list[MemoryRow]:
        """Memories of these kinds, oldest first (at most `limit`, the newest ones)."""
        marks = ",".join("?" * len(kinds))
        sql = f"SELECT {_ROW_COLS} FROM memories m WHERE m.kind IN ({marks}) ORDER BY m.id DESC"
        params: tuple = tuple(kinds)
        if limit is not None:
            sql += " LIMIT ?"
            params += (limit,)
        return [MemoryRow(*r) for r in reversed(self.read(sql, params))]

    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(KINDS, 0)
        counts.update(self.read("SELECT kind, count(*) FROM memories GROUP BY kind"))
        return counts

    def orphan_ids(self) -> list[int]:
        """Chunks whose message was deleted or superseded."""
        return [r[0] for r in self.read(
            "SELECT m.id FROM memories m LEFT JOIN messages g ON g.id = m.message_id"
            " WHERE m.kind = 'message' AND (g.id IS NULL OR g.superseded_by IS NOT NULL)")]
