"""Memories in the app's one SQLite file: rows, the trigram keyword index and the vectors.

Tables come from migration 0005_memory; the vec0 table is created here, at open, because only a
connection with sqlite-vec loaded can create it (`vector_backend` says which path is active).
Every write is one explicit transaction under the `Database` lock, rows, FTS entries and vectors
together, so `forget` is complete the moment it returns.
"""

from __future__ import annotations

import logging
import unicodedata
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from engine.memory.vector_index import NumpyIndex, SqliteVecIndex, VectorIndex
from engine.storage import Database

log = logging.getLogger(__name__)

KINDS = ("pinned", "note", "message")
MAX_KEYWORD_TERMS = 24
KEYWORD_RANKED = 400      # newest keyword matches that BM25 ranks
SHORT_TERM_SCAN = 20_000  # newest chunks a 1-2 character keyword is looked for in (a LIKE scan)
_TRIGRAM = 3
MAX_QUERY_SCAN_CHARS = 4000  # keywords come from the query's start (a pasted document is not a query)
# English words too common to be keywords (trigram substrings of them match almost everything).
_STOPWORDS = frozenset("""
    the and for are was were what who whom how why when where which that this these those with you
    your yours did does have has had from about tell can could would should there their they them its
    not but all any our out into then than also just like some more most very know remember please
    me my mine his her him she he we us is am be been it do of to in on at by or as so if an a i
""".split())


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


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


def _is_cjk(ch: str) -> bool:
    return unicodedata.east_asian_width(ch) in ("W", "F") and ch.isalnum()


def is_mostly_cjk(text: str) -> bool:
    """At least half of the letters and digits are CJK (Han, kana, Hangul)."""
    alnum = [ch for ch in text[:MAX_QUERY_SCAN_CHARS] if ch.isalnum()]
    return bool(alnum) and 2 * sum(map(_is_cjk, alnum)) >= len(alnum)


def _words(text: str) -> list[str]:
    """Split on whitespace and punctuation (any script: "，" and "。" too); symbols stay ("c++")."""
    return "".join(" " if ch.isspace() or unicodedata.category(ch).startswith("P") else ch
                   for ch in text).split()


def keyword_terms(query: str) -> tuple[list[str], list[str]]:
    """(terms the trigram index can match, shorter terms), from a free-text query.

    Words split on spaces and punctuation; English stopwords dropped; a run of 4+ CJK characters
    (no spaces between words) becomes its overlapping 3-character pieces, so "我最喜欢的颜色"
    still matches "喜欢的" and "的颜色".
    """
    long_terms: list[str] = []
    short_terms: list[str] = []
    for word in _words(query[:MAX_QUERY_SCAN_CHARS].casefold()):
        if not word or word in _STOPWORDS:
            continue
        if len(word) < _TRIGRAM:
            short_terms.append(word)
        elif len(word) > _TRIGRAM and all(_is_cjk(ch) for ch in word):
            long_terms.extend(word[i:i + _TRIGRAM] for i in range(len(word) - _TRIGRAM + 1))
        else:
            long_terms.append(word)
    dedup = list(dict.fromkeys(long_terms))
    return dedup[:MAX_KEYWORD_TERMS], list(dict.fromkeys(short_terms))[:MAX_KEYWORD_TERMS]


def _fts_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _like_pattern(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


class MemoryStore:
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
        if dim % 8:
            raise ValueError(f"embedding dimension must be a multiple of 8, not {dim}")
        self.db, self.model_id, self.dim = db, model_id, dim
        if vector_backend == "auto":
            (count,) = self.read("SELECT count(*) FROM memory_vectors WHERE model = ?", (model_id,))[0]
            fits = count * (dim * 4 + dim // 8 + 8) <= ram_budget_mb * 1e6
            vector_backend = "numpy" if fits or not db.vec_version else "sqlite-vec"
        if vector_backend is None:
            vector_backend = "sqlite-vec" if db.vec_version else "numpy"
        if vector_backend == "sqlite-vec" and not db.vec_version:
            raise ValueError(f"sqlite-vec is not loaded in this connection (driver {db.driver})")
        if vector_backend == "sqlite-vec":
            self.index: VectorIndex = SqliteVecIndex(self)
            self.index.ensure_table()
        elif vector_backend == "numpy":
            self.index = NumpyIndex(self)
        else:
            raise ValueError(f"vector backend must be 'sqlite-vec' or 'numpy', not {vector_backend!r}")

    @property
    def vector_backend(self) -> str:
        """Which vector path is active: "sqlite-vec" | "numpy"."""
        return self.index.name

    # ---- low level: writes through the Database's one writer, reads on this thread's reader
    def transaction(self):
        """One write transaction (all statements commit together or not at all)."""
        return self.db.transaction()

    def read(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.db.read(sql, params)

    def data_version(self) -> int:
        return self.db.data_version()

    def table_exists(self, name: str) -> bool:
        return bool(self.read("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)))

    def meta(self, key: str) -> str | None:
        rows = self.read("SELECT value FROM memory_meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    @staticmethod
    def set_meta(conn, key: str, value: str) -> None:
        conn.execute("INSERT OR REPLACE INTO memory_meta (key, value) VALUES (?, ?)", (key, value))

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
        created = created or _now()
        ids: list[int] = []
        removed: list[int] = []
        try:
            with self.transaction() as conn:
                if replace_message and message_id is not None:
                    removed = self._delete_in(conn, [r[0] for r in conn.execute(
                        "SELECT id FROM memories WHERE message_id = ? AND kind = 'message'", (message_id,))])
                if live_only and not conn.execute("SELECT 1 FROM messages WHERE id = ? AND superseded_by IS NULL",
                                                  (message_id,)).fetchone():
                    texts = []
                for chunk, text in enumerate(texts):
                    cur = conn.execute(
                        "INSERT INTO memories (kind, text, conversation_id, message_id, role, chunk, created)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)", (kind, text, conversation_id, message_id, role, chunk, created))
                    ids.append(cur.lastrowid)
                    conn.execute("INSERT INTO memories_fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, text))
        except BaseException:
            self.index.committed([], None, [])
            raise
        if removed:
            self.index.committed([], None, removed)
        return ids

    def insert_many(self, rows: list[tuple[str, str, int | None, int | None, str | None, int, str]],
                    vecs: np.ndarray | None = None) -> list[int]:
        """Bulk load (kind, text, conversation_id, message_id, role, chunk, created) rows, with
        their vectors when given, in one transaction (the benchmark's fast path)."""
        ids: list[int] = []
        try:
            with self.transaction() as conn:
                for row in rows:
                    cur = conn.execute(
                        "INSERT INTO memories (kind, text, conversation_id, message_id, role, chunk, created)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?)", row)
                    ids.append(cur.lastrowid)
                conn.executemany("INSERT INTO memories_fts (rowid, text) VALUES (?, ?)",
                                 [(i, r[1]) for i, r in zip(ids, rows)])
                if vecs is not None:
                    self._put_vectors(conn, ids, vecs)
        except BaseException:
            self.index.committed([], None, [])
            raise
        if vecs is not None:
            self.index.committed(ids, vecs, [])
        return ids

    def delete(self, ids: list[int]) -> list[int]:
        """Remove memories with their keyword entries and vectors; the ids that existed."""
        try:
            with self.transaction() as conn:
                removed = self._delete_in(conn, ids)
        except BaseException:
            self.index.committed([], None, [])
            raise
        if removed:
            self.index.committed([], None, removed)
        return removed

    def _delete_in(self, conn, ids: list[int]) -> list[int]:
        removed = []
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            marks = ",".join("?" * len(part))
            rows = conn.execute(f"SELECT id, text FROM memories WHERE id IN ({marks})", part).fetchall()
            if not rows:
                continue
            conn.executemany("INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', ?, ?)", rows)
            found = [r[0] for r in rows]
            marks = ",".join("?" * len(found))
            conn.execute(f"DELETE FROM memory_vectors WHERE memory_id IN ({marks})", found)
            conn.execute(f"DELETE FROM memories WHERE id IN ({marks})", found)
            self.index.remove(conn, found)
            removed.extend(found)
        return removed

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

    # ---- vectors
    def pending(self, limit: int) -> list[tuple[int, str]]:
        """Memories without a vector from this model: explicit ones first, then newest first."""
        return self.read(
            "SELECT m.id, m.text FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id"
            " WHERE v.memory_id IS NULL OR v.model != ? ORDER BY m.kind = 'message', m.id DESC LIMIT ?",
            (self.model_id, limit))

    def pending_count(self) -> int:
        return self.read("SELECT count(*) FROM memories m LEFT JOIN memory_vectors v ON v.memory_id = m.id"
                         " WHERE v.memory_id IS NULL OR v.model != ?", (self.model_id,))[0][0]

    def set_vectors(self, ids: list[int], vecs: np.ndarray) -> list[int]:
        """Store vectors for memories that still exist (one may be forgotten while it is being
        embedded); the ids written."""
        if len(ids) != len(vecs) or (len(ids) and vecs.shape[1] != self.dim):
            raise ValueError(f"need one {self.dim}-dimensional vector per id")
        written: list[int] = []
        try:
            with self.transaction() as conn:
                marks = ",".join("?" * len(ids))
                alive = {r[0] for r in conn.execute(f"SELECT id FROM memories WHERE id IN ({marks})", list(ids))}
                keep = [k for k, i in enumerate(ids) if i in alive]
                written = [ids[k] for k in keep]
                if written:
                    self._put_vectors(conn, written, vecs[keep])
        except BaseException:
            self.index.committed([], None, [])
            raise
        if written:
            self.index.committed(written, vecs[keep], [])
        return written

    def _put_vectors(self, conn, ids: list[int], vecs: np.ndarray) -> None:
        vecs = np.ascontiguousarray(vecs, dtype="<f4")
        conn.executemany("INSERT OR REPLACE INTO memory_vectors (memory_id, model, embedding) VALUES (?, ?, ?)",
                         [(i, self.model_id, v.tobytes()) for i, v in zip(ids, vecs)])
        self.index.add(conn, ids, vecs)

    def vectors(self, ids: list[int]) -> tuple[list[int], np.ndarray]:
        """(ids that have a vector from this model, their vectors)."""
        found: list[int] = []
        blobs: list[bytes] = []
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            marks = ",".join("?" * len(part))
            for memory_id, blob in self.read(f"SELECT memory_id, embedding FROM memory_vectors"
                                             f" WHERE model = ? AND memory_id IN ({marks})", (self.model_id, *part)):
                found.append(memory_id)
                blobs.append(blob)
        vecs = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(found), self.dim)
        return found, vecs

    def vector_search(self, query: np.ndarray, n: int) -> list[tuple[int, float]]:
        """The `n` memories nearest to a unit-length query: (id, cosine), best first."""
        return self.index.search(np.ascontiguousarray(query, dtype=np.float32), n)

    # ---- keywords
    def keyword_search(self, query: str, n: int) -> list[int]:
        """Memory ids matching any of the query's keywords, best first.

        BM25 ranks the matches when there are at most KEYWORD_RANKED of them. With more (a common
        word), BM25's document-frequency pass alone takes 10-25 ms at 100 000 chunks, so the newest
        KEYWORD_RANKED matches are ranked by how many query terms they contain instead. Terms
        shorter than 3 characters cannot use the trigram index: only when the query has no longer
        term are they looked up with LIKE, in the explicit memories and the newest SHORT_TERM_SCAN
        chunks.
        """
        long_terms, short_terms = keyword_terms(query)
        if long_terms:
            expr = " OR ".join(_fts_phrase(t) for t in long_terms)
            newest = [r[0] for r in self.read("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?"
                                              " ORDER BY rowid DESC LIMIT ?", (expr, KEYWORD_RANKED + 1))]
            if len(newest) <= KEYWORD_RANKED:
                return [r[0] for r in self.read("SELECT rowid FROM memories_fts WHERE memories_fts MATCH ?"
                                                " ORDER BY rank LIMIT ?", (expr, n))]
            marks = ",".join("?" * KEYWORD_RANKED)
            rows = self.read(f"SELECT id, text FROM memories WHERE id IN ({marks})", tuple(newest[:KEYWORD_RANKED]))
            scored = sorted(((-sum(t in text.casefold() for t in long_terms), -memory_id) for memory_id, text in rows))
            return [-neg_id for _, neg_id in scored[:n]]
        if short_terms:
            like = " OR ".join(["text LIKE ? ESCAPE '\\'"] * len(short_terms))
            patterns = tuple(map(_like_pattern, short_terms))
            newest = self.read("SELECT max(id) FROM memories")[0][0] or 0
            return [r[0] for r in self.read(
                f"SELECT id FROM memories WHERE id > ? AND ({like})"
                f" UNION SELECT id FROM memories WHERE kind IN ('pinned', 'note') AND ({like})"
                " ORDER BY id DESC LIMIT ?", (newest - SHORT_TERM_SCAN, *patterns, *patterns, n))]
        return []
