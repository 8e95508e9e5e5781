"""One hybrid index over a caller's chunk table: the trigram keyword table, the CJK pair table
where the caller keeps one, the vectors and their in-RAM or sqlite-vec index.

The memory (memories, memories_fts, memory_vectors, memory_vec) and the documents (doc_chunks,
doc_chunks_fts, doc_chunks_cjk, doc_vectors) each name their tables in a `Tables` and subclass
`HybridIndex` for their own rows. Every write that touches vectors goes through `writing()`, so
the vector index learns of it only once the transaction has committed (or reloads after a failed
one).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine.retrieval.terms import cjk_pairs, fts_phrase, keyword_terms, like_pattern, query_pairs, stem
from engine.retrieval.vectors import NumpyIndex, SqliteVecIndex, VectorIndex
from engine.storage import Database

log = logging.getLogger(__name__)

KEYWORD_RANKED = 400      # newest keyword matches that BM25 ranks
SHORT_TERM_SCAN = 20_000  # newest chunks a 1-2 character keyword is looked for in (a LIKE scan)
_PART = 500               # ids per `IN (…)` list


@dataclass(frozen=True)
class Tables:
    """Where one index keeps its parts (schema: engine/storage/migrations.py).

    Attributes:
        chunks: the rows searched, with `id` and `text` columns.
        fts: trigram FTS5 over chunks.text (external content: entries are deleted with their text).
        vectors, vector_id: one float32 embedding per chunk, keyed by `vector_id`, with its model.
        pairs: unicode61 FTS5 of each chunk's CJK character pairs (column `grams`), or None.
        vec0: the sqlite-vec bit table (created at open) and meta: the key/value table that records
            its spec; None where only the numpy path is used.
        always: SQL condition on chunks a short term is looked for in whatever their age.
        pending_first: ORDER BY of the chunks waiting for a vector (which get one first).
    """

    chunks: str
    fts: str
    vectors: str
    vector_id: str
    pairs: str | None = None
    vec0: str | None = None
    meta: str | None = None
    always: str | None = None
    pending_first: str = "c.id"


@dataclass
class Candidates:
    """What one query found, before fusion: each list best first, with every cosine known."""

    vector: list[tuple[int, float]] = field(default_factory=list)  # (id, cosine), nearest first
    keyword: list[int] = field(default_factory=list)
    pairs: list[int] = field(default_factory=list)
    cosine: dict[int, float] = field(default_factory=dict)  # keyword-only hits with a vector too
    embedded: bool = False  # the query had a vector (else only keywords ranked)

    def ids(self) -> list[int]:
        return list(dict.fromkeys([*self.cosine, *self.keyword, *self.pairs]))


class Write:
    """A write transaction's connection, and what it changed in the vector index."""

    def __init__(self, conn):
        self.conn = conn
        self.added: list[int] = []
        self.vecs: list[np.ndarray] = []
        self.removed: list[int] = []

    def execute(self, sql: str, params=()):
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows):
        return self.conn.executemany(sql, rows)


class HybridIndex:
    """Chunks searched by meaning and by keyword, in `db`'s file.

    Args:
        db: the app's database.
        model_id, dim: the embedder whose vectors are searched (others wait to be re-embedded).
        tables: where this index's parts are.
        vector_backend: "sqlite-vec" | "numpy"; None: sqlite-vec when the connection has it and
            `tables` name a vec0 table; "auto": numpy while this model's vectors fit in
            `ram_budget_mb` (docs/memory.md), else sqlite-vec when the connection has it.
        dtype: of the numpy path's vectors (float16 halves a large index's RAM; only the coarse
            candidates are rescored, in float32).
        stemmed: Latin keywords are cut to their stems ("descaling" → "descal").
        name: the keyword thread's name prefix.
    """

    def __init__(self, db: Database, model_id: str, dim: int, tables: Tables, *,
                 vector_backend: str | None = None, ram_budget_mb: float = 256.0, dtype=np.float32,
                 stemmed: bool = False, name: str = "index"):
        if dim % 8:
            raise ValueError(f"embedding dimension must be a multiple of 8, not {dim}")
        self.db, self.model_id, self.dim, self.tables, self.stemmed = db, model_id, dim, tables, stemmed
        backend = self._choose_backend(vector_backend, ram_budget_mb)
        if backend == "sqlite-vec":
            self.index: VectorIndex = SqliteVecIndex(self)
            self.index.ensure_table()
        elif backend == "numpy":
            self.index = NumpyIndex(self, dtype=dtype)
        else:
            raise ValueError(f"vector backend must be 'sqlite-vec' or 'numpy', not {backend!r}")
        # Keywords need no embedding: looked up on the other core while the query is embedded.
        self._keyword_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-keywords")

    def _choose_backend(self, backend: str | None, ram_budget_mb: float) -> str:
        has_vec = bool(self.db.vec_version) and self.tables.vec0 is not None
        if backend == "auto":
            (count,) = self.read(f"SELECT count(*) FROM {self.tables.vectors} WHERE model = ?", (self.model_id,))[0]
            fits = count * (self.dim * 4 + self.dim // 8 + 8) <= ram_budget_mb * 1e6
            backend = "numpy" if fits or not has_vec else "sqlite-vec"
        if backend is None:
            backend = "sqlite-vec" if has_vec else "numpy"
        if backend == "sqlite-vec" and not self.db.vec_version:
            raise ValueError(f"sqlite-vec is not loaded in this connection (driver {self.db.driver})")
        return backend

    @property
    def vector_backend(self) -> str:
        """Which vector path is active: "sqlite-vec" | "numpy"."""
        return self.index.name

    def close(self) -> None:
        """Stop the keyword thread (the index cannot search after this)."""
        self._keyword_pool.shutdown(wait=True)

    # ---- low level: writes through the Database's one writer, reads on this thread's reader
    def transaction(self):
        """One write transaction (all statements commit together or not at all)."""
        return self.db.transaction()

    @contextmanager
    def writing(self):
        """A write transaction (a `Write`) after which the vector index learns what it changed."""
        try:
            with self.db.transaction() as conn:
                write = Write(conn)
                yield write
        except BaseException:
            self.index.committed([], None, [])  # reload rather than guess
            raise
        if write.added or write.removed:
            self.index.committed(write.added, np.concatenate(write.vecs) if write.vecs else None, write.removed)

    def read(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.db.read(sql, params)

    def data_version(self) -> int:
        return self.db.data_version()

    def table_exists(self, name: str) -> bool:
        return bool(self.read("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)))

    def meta(self, key: str) -> str | None:
        rows = self.read(f"SELECT value FROM {self.tables.meta} WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, conn, key: str, value: str) -> None:
        conn.execute(f"INSERT OR REPLACE INTO {self.tables.meta} (key, value) VALUES (?, ?)", (key, value))

    # ---- keyword entries
    def index_texts(self, conn, ids: list[int], texts: list[str]) -> None:
        """Inside a write: the keyword entries of chunks just inserted."""
        t = self.tables
        conn.executemany(f"INSERT INTO {t.fts} (rowid, text) VALUES (?, ?)", list(zip(ids, texts)))
        if t.pairs:
            conn.executemany(f"INSERT INTO {t.pairs} (rowid, grams) VALUES (?, ?)",
                             [(i, g) for i, text in zip(ids, texts) if (g := " ".join(cjk_pairs(text)))])

    def drop(self, write: Write, ids: list[int]) -> list[int]:
        """Inside `writing()`: delete chunks with their keyword entries and vectors; the ids that existed."""
        t = self.tables
        removed = []
        for start in range(0, len(ids), _PART):
            part = list(ids[start:start + _PART])
            marks = ",".join("?" * len(part))
            rows = write.execute(f"SELECT id, text FROM {t.chunks} WHERE id IN ({marks})", part).fetchall()
            if not rows:
                continue
            write.executemany(f"INSERT INTO {t.fts} ({t.fts}, rowid, text) VALUES ('delete', ?, ?)", rows)
            found = [r[0] for r in rows]
            marks = ",".join("?" * len(found))
            if t.pairs:
                write.execute(f"DELETE FROM {t.pairs} WHERE rowid IN ({marks})", found)
            write.execute(f"DELETE FROM {t.vectors} WHERE {t.vector_id} IN ({marks})", found)
            write.execute(f"DELETE FROM {t.chunks} WHERE id IN ({marks})", found)
            self.index.remove(write, found)
            removed.extend(found)
        write.removed.extend(removed)
        return removed

    # ---- vectors
    def pending(self, limit: int) -> list[tuple[int, str]]:
        """Chunks without a vector from this model, `Tables.pending_first` first."""
        t = self.tables
        return self.read(f"SELECT c.id, c.text FROM {t.chunks} c LEFT JOIN {t.vectors} v ON v.{t.vector_id} = c.id"
                         f" WHERE v.{t.vector_id} IS NULL OR v.model != ? ORDER BY {t.pending_first} LIMIT ?",
                         (self.model_id, limit))

    def pending_count(self) -> int:
        t = self.tables
        return self.read(f"SELECT count(*) FROM {t.chunks} c LEFT JOIN {t.vectors} v ON v.{t.vector_id} = c.id"
                         f" WHERE v.{t.vector_id} IS NULL OR v.model != ?", (self.model_id,))[0][0]

    def set_vectors(self, ids: list[int], vecs: np.ndarray) -> list[int]:
        """Store vectors for chunks that still exist (one may be deleted while it is being
        embedded); the ids written."""
        if len(ids) != len(vecs) or (len(ids) and vecs.shape[1] != self.dim):
            raise ValueError(f"need one {self.dim}-dimensional vector per id")
        if not ids:
            return []
        with self.writing() as write:
            marks = ",".join("?" * len(ids))
            alive = {r[0] for r in write.execute(f"SELECT id FROM {self.tables.chunks} WHERE id IN ({marks})",
                                                 list(ids))}
            keep = [k for k, i in enumerate(ids) if i in alive]
            written = [ids[k] for k in keep]
            if written:
                self._put_vectors(write, written, vecs[keep])
        return written

    def _put_vectors(self, write: Write, ids: list[int], vecs: np.ndarray) -> None:
        vecs = np.ascontiguousarray(vecs, dtype="<f4")
        write.executemany(f"INSERT OR REPLACE INTO {self.tables.vectors} ({self.tables.vector_id}, model, embedding)"
                          " VALUES (?, ?, ?)", [(i, self.model_id, v.tobytes()) for i, v in zip(ids, vecs)])
        self.index.add(write, ids, vecs)
        write.added.extend(ids)
        write.vecs.append(vecs)

    def vectors(self, ids: list[int]) -> tuple[list[int], np.ndarray]:
        """(ids that have a vector from this model, their vectors)."""
        t = self.tables
        found: list[int] = []
        blobs: list[bytes] = []
        for start in range(0, len(ids), _PART):
            part = list(ids[start:start + _PART])
            marks = ",".join("?" * len(part))
            for chunk_id, blob in self.read(f"SELECT {t.vector_id}, embedding FROM {t.vectors}"
                                            f" WHERE model = ? AND {t.vector_id} IN ({marks})", (self.model_id, *part)):
                found.append(chunk_id)
                blobs.append(blob)
        return found, np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(found), self.dim)

    # ---- search
    def vector_search(self, query: np.ndarray, n: int) -> list[tuple[int, float]]:
        """The `n` chunks nearest to a unit-length query: (id, cosine), best first."""
        return self.index.search(np.ascontiguousarray(query, dtype=np.float32), n)

    def keyword_search(self, query: str, n: int) -> list[int]:
        """Chunk ids matching any of the query's keywords, best first.

        BM25 ranks the matches when there are at most KEYWORD_RANKED of them. With more (a common
        word), BM25's document-frequency pass alone takes 10-25 ms at 100 000 chunks, so the newest
        KEYWORD_RANKED matches are ranked by how many query terms they contain instead. Terms
        shorter than 3 characters cannot use the trigram index: only when the query has no longer
        term are they looked up with LIKE, in the newest SHORT_TERM_SCAN chunks and those
        `Tables.always` names.
        """
        long_terms, short_terms = keyword_terms(query)
        if self.stemmed:
            long_terms = list(dict.fromkeys(map(stem, long_terms)))
        if long_terms:
            return self._trigram_search(long_terms, n)
        if short_terms:
            return self._like_search(short_terms, n)
        return []

    def _trigram_search(self, terms: list[str], n: int) -> list[int]:
        t = self.tables
        expr = " OR ".join(map(fts_phrase, terms))
        newest = [r[0] for r in self.read(f"SELECT rowid FROM {t.fts} WHERE {t.fts} MATCH ?"
                                          " ORDER BY rowid DESC LIMIT ?", (expr, KEYWORD_RANKED + 1))]
        if len(newest) <= KEYWORD_RANKED:
            return [r[0] for r in self.read(f"SELECT rowid FROM {t.fts} WHERE {t.fts} MATCH ?"
                                            " ORDER BY rank LIMIT ?", (expr, n))]
        marks = ",".join("?" * KEYWORD_RANKED)
        rows = self.read(f"SELECT id, text FROM {t.chunks} WHERE id IN ({marks})", tuple(newest[:KEYWORD_RANKED]))
        scored = sorted((-sum(term in text.casefold() for term in terms), -chunk_id) for chunk_id, text in rows)
        return [-neg_id for _, neg_id in scored[:n]]

    def _like_search(self, terms: list[str], n: int) -> list[int]:
        t = self.tables
        like = " OR ".join(["text LIKE ? ESCAPE '\\'"] * len(terms))
        patterns = tuple(map(like_pattern, terms))
        newest = self.read(f"SELECT max(id) FROM {t.chunks}")[0][0] or 0
        sql, params = f"SELECT id FROM {t.chunks} WHERE id > ? AND ({like})", (newest - SHORT_TERM_SCAN, *patterns)
        if t.always:
            sql, params = sql + f" UNION SELECT id FROM {t.chunks} WHERE {t.always} AND ({like})", params + patterns
        return [r[0] for r in self.read(sql + " ORDER BY id DESC LIMIT ?", (*params, n))]

    def pair_search(self, query: str, n: int) -> list[int]:
        """Chunk ids holding the query's CJK character pairs, best BM25 first ([] for a query
        without CJK, or an index without a pair table). Question words and particles ("哪里",
        "的人") are not looked for."""
        pairs = query_pairs(query) if self.tables.pairs else []
        if not pairs:
            return []
        t = self.tables
        expr = " OR ".join(map(fts_phrase, pairs))
        return [r[0] for r in self.read(f"SELECT rowid FROM {t.pairs} WHERE {t.pairs} MATCH ?"
                                        " ORDER BY rank LIMIT ?", (expr, n))]

    def candidates(self, query: str, pool: int, embed: Callable[[str], np.ndarray | None]) -> Candidates:
        """The `pool` best of each list for `query`: keywords (and pairs) looked up on the keyword
        thread while `embed` makes the query's vector (None: keywords only), then the vector
        list, and the cosine of every keyword match that has a vector."""
        keywords = self._keyword_pool.submit(lambda: (self.keyword_search(query, pool), self.pair_search(query, pool)))
        try:
            qvec = embed(query)
        except BaseException:
            keywords.exception()  # the lookup ends before the error goes on (no read left running)
            raise
        found = Candidates(embedded=qvec is not None)
        if qvec is not None:
            found.vector = self.vector_search(qvec, pool)
            found.cosine = dict(found.vector)
        found.keyword, found.pairs = keywords.result()
        missing = [i for i in dict.fromkeys([*found.keyword, *found.pairs]) if i not in found.cosine]
        if missing and qvec is not None:
            ids, vecs = self.vectors(missing)
            found.cosine.update(zip(ids, (vecs @ qvec).tolist()))
        return found
