"""Documents in the app's one SQLite file: roots, files, chunks, the trigram keyword index, vectors.

Tables come from migration 0009_documents. A file is written whole in one transaction (its row,
chunks, keyword entries and vectors, replacing what it had), so a crash leaves either the old
version of a file or the new one, never half of it. Vectors are searched in RAM by the memory's
two-stage numpy index (engine/memory/vector_index.py), here over doc_vectors.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from engine.docs.chunks import Chunk
from engine.memory.store import KEYWORD_RANKED, _fts_phrase, _like_pattern, keyword_terms
from engine.memory.vector_index import NumpyIndex
from engine.storage import Database

log = logging.getLogger(__name__)

DEFAULT_COLLECTION = "default"
MAX_PAIRS = 32
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff]+")


_SUFFIXES = ("ations", "ation", "ments", "ment", "ness", "ings", "ing", "ions", "ion", "ers", "er", "ies",
             "ied", "ed", "es", "ly", "s")


def stem(term: str) -> str:
    """A Latin-script keyword cut to its stem ("descaling", "descaled" → "descal"): the trigram
    index matches substrings, so the stem finds every form. Other scripts stay as they are."""
    if not term.isascii() or not term.isalpha() or len(term) < 5:
        return term
    for suffix in _SUFFIXES:
        if term.endswith(suffix) and len(term) - len(suffix) >= 4:
            term = term[:-len(suffix)]
            break
    return term[:-1] if term.endswith("e") and len(term) > 4 else term


# A pair holding one of these characters is a particle or a question word, not a topic; and a
# few common pairs ask rather than say what about.
_FILLER_CHARS = frozenset("的了吗呢吧么哪啊呀是在和与或及把被给让请")
_FILLER_PAIRS = frozenset("什么 多少 怎么 如何 为什 应该 可以 需要 是否 一个 时候 多长 多久 要求 能否 有没 没有 一下".split())


def query_pairs(query: str) -> list[str]:
    """The pairs of a query worth looking up (see _FILLER_*), at most MAX_PAIRS."""
    pairs = [p for p in dict.fromkeys(cjk_pairs(query))
             if len(p) == 2 and p not in _FILLER_PAIRS and not (set(p) & _FILLER_CHARS)]
    return pairs[:MAX_PAIRS]


def cjk_pairs(text: str) -> list[str]:
    """Overlapping character pairs of the text's CJK runs (a lone character stands for itself)."""
    out: list[str] = []
    for run in _CJK_RUN.findall(text):
        out += [run] if len(run) == 1 else [run[i:i + 2] for i in range(len(run) - 1)]
    return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class ChunkRow:
    id: int
    file_id: int
    path: str
    collection: str
    idx: int
    text: str
    page: int | None
    heading: str | None
    line: int | None


_CHUNK_COLS = "c.id, c.file_id, f.path, r.collection, c.idx, c.text, c.page, c.heading, c.line"
_CHUNK_JOIN = "doc_chunks c JOIN doc_files f ON f.id = c.file_id JOIN doc_roots r ON r.id = f.root_id"


class DocStore:
    """Roots, files, chunks and vectors of the documents index, in `db`'s file.

    Args:
        db: the app's database (migrated to 0009_documents).
        model_id: the embedder whose vectors are searched (others are re-embedded).
        dim: its embedding dimension.
    """

    def __init__(self, db: Database, model_id: str, dim: int):
        self.db, self.model_id, self.dim = db, model_id, dim
        self.index = NumpyIndex(self, table="doc_vectors", id_column="chunk_id", dtype=np.float16)

    # what NumpyIndex needs of a store
    def read(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.db.read(sql, params)

    def data_version(self) -> int:
        return self.db.data_version()

    # ---- roots
    def add_root(self, path: str, collection: str) -> int:
        """The root's id; an existing root moves to `collection`."""
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO doc_roots (path, collection, added) VALUES (?, ?, ?)"
                         " ON CONFLICT(path) DO UPDATE SET collection = excluded.collection",
                         (path, collection, _now()))
            return conn.execute("SELECT id FROM doc_roots WHERE path = ?", (path,)).fetchone()[0]

    def roots(self, collection: str | None = None) -> list[dict]:
        sql = ("SELECT r.id, r.path, r.collection, r.added, r.scanned, r.stopped,"
               " (SELECT count(*) FROM doc_files f WHERE f.root_id = r.id),"
               " (SELECT coalesce(sum(chunks), 0) FROM doc_files f WHERE f.root_id = r.id)"
               " FROM doc_roots r")
        params: tuple = ()
        if collection is not None:
            sql += " WHERE r.collection = ?"
            params = (collection,)
        cols = ("id", "path", "collection", "added", "scanned", "stopped", "files", "chunks")
        return [dict(zip(cols, row)) for row in self.read(sql + " ORDER BY r.id", params)]

    def mark_scanned(self, root_id: int, when: str | None, stopped: bool = False) -> None:
        """`when` the last complete scan ended (None: the current one has not); `stopped`: the
        user cancelled it (the next start does not resume it; the next add or rescan does)."""
        with self.db.transaction() as conn:
            if when is None:
                conn.execute("UPDATE doc_roots SET stopped = ? WHERE id = ?", (int(stopped), root_id))
            else:
                conn.execute("UPDATE doc_roots SET scanned = ?, stopped = 0 WHERE id = ?", (when, root_id))

    def delete_root(self, root_id: int) -> int:
        """Remove a root with its files from the index; how many files it had."""
        ids = [r[0] for r in self.read("SELECT id FROM doc_files WHERE root_id = ?", (root_id,))]
        self.delete_files(ids)
        with self.db.transaction() as conn:
            conn.execute("DELETE FROM doc_roots WHERE id = ?", (root_id,))
        return len(ids)

    # ---- files
    def files(self, root_id: int | None = None, collection: str | None = None,
              path: str | None = None) -> list[dict]:
        where, params = [], []
        if root_id is not None:
            where.append("f.root_id = ?")
            params.append(root_id)
        if collection is not None:
            where.append("r.collection = ?")
            params.append(collection)
        if path is not None:
            where.append("f.path = ?")
            params.append(path)
        cols = ("id", "root_id", "path", "collection", "kind", "size", "mtime_ns", "sha256", "status",
                "reason", "detail", "pages", "chunks", "indexed")
        sql = ("SELECT f.id, f.root_id, f.path, r.collection, f.kind, f.size, f.mtime_ns, f.sha256, f.status,"
               " f.reason, f.detail, f.pages, f.chunks, f.indexed FROM doc_files f JOIN doc_roots r ON r.id = f.root_id"
               + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY f.path")
        return [dict(zip(cols, row)) for row in self.read(sql, tuple(params))]

    def write_file(self, root_id: int, path: str, *, kind: str | None, size: int, mtime_ns: int,
                   sha256: str | None, chunks: list[Chunk] = (), vecs: np.ndarray | None = None,
                   pages: int | None = None, reason: str | None = None, detail: str | None = None) -> int:
        """Replace everything the index holds for `path` with this version, in one transaction.

        With `reason` the file is recorded as skipped (and has no chunks). `vecs`, when given,
        holds one vector per chunk; without them the chunks wait for the embedder (`pending`).
        """
        if vecs is not None and len(vecs) != len(chunks):
            raise ValueError("need one vector per chunk")
        status = "skipped" if reason else "indexed"
        chunk_ids: list[int] = []
        removed: list[int] = []
        try:
            with self.db.transaction() as conn:
                row = conn.execute("SELECT id FROM doc_files WHERE path = ?", (path,)).fetchone()
                if row:
                    file_id = row[0]
                    removed = self._delete_chunks(conn, file_id)
                    conn.execute("UPDATE doc_files SET root_id = ?, kind = ?, size = ?, mtime_ns = ?, sha256 = ?,"
                                 " status = ?, reason = ?, detail = ?, pages = ?, chunks = ?, indexed = ? WHERE id = ?",
                                 (root_id, kind, size, mtime_ns, sha256, status, reason, detail, pages, len(chunks),
                                  _now(), file_id))
                else:
                    file_id = conn.execute(
                        "INSERT INTO doc_files (root_id, path, kind, size, mtime_ns, sha256, status, reason, detail,"
                        " pages, chunks, indexed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (root_id, path, kind, size, mtime_ns, sha256, status, reason, detail, pages, len(chunks),
                         _now())).lastrowid
                for c in chunks:
                    chunk_ids.append(conn.execute(
                        "INSERT INTO doc_chunks (file_id, idx, text, page, heading, line) VALUES (?, ?, ?, ?, ?, ?)",
                        (file_id, c.index, c.text, c.page, c.heading, c.line)).lastrowid)
                conn.executemany("INSERT INTO doc_chunks_fts (rowid, text) VALUES (?, ?)",
                                 [(i, c.text) for i, c in zip(chunk_ids, chunks)])
                conn.executemany("INSERT INTO doc_chunks_cjk (rowid, grams) VALUES (?, ?)",
                                 [(i, g) for i, c in zip(chunk_ids, chunks) if (g := " ".join(cjk_pairs(c.text)))])
                if vecs is not None and chunk_ids:
                    self._put_vectors(conn, chunk_ids, vecs)
        except BaseException:
            self.index.committed([], None, [])  # reload rather than guess
            raise
        if removed or (vecs is not None and chunk_ids):
            self.index.committed(chunk_ids if vecs is not None else [], vecs, removed)
        return file_id

    def touch_file(self, file_id: int, size: int, mtime_ns: int) -> None:
        """Same content, new size/mtime (copied, touched): nothing to re-read next time."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE doc_files SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, file_id))

    def delete_files(self, file_ids: list[int]) -> int:
        removed: list[int] = []
        try:
            for start in range(0, len(file_ids), 200):
                with self.db.transaction() as conn:
                    for file_id in file_ids[start:start + 200]:
                        removed += self._delete_chunks(conn, file_id)
                        conn.execute("DELETE FROM doc_files WHERE id = ?", (file_id,))
        except BaseException:
            self.index.committed([], None, [])
            raise
        if removed:
            self.index.committed([], None, removed)
        return len(file_ids)

    def _delete_chunks(self, conn, file_id: int) -> list[int]:
        rows = conn.execute("SELECT id, text FROM doc_chunks WHERE file_id = ?", (file_id,)).fetchall()
        if not rows:
            return []
        conn.executemany("INSERT INTO doc_chunks_fts (doc_chunks_fts, rowid, text) VALUES ('delete', ?, ?)", rows)
        conn.execute("DELETE FROM doc_chunks_cjk WHERE rowid IN (SELECT id FROM doc_chunks WHERE file_id = ?)",
                     (file_id,))
        conn.execute("DELETE FROM doc_vectors WHERE chunk_id IN (SELECT id FROM doc_chunks WHERE file_id = ?)",
                     (file_id,))
        conn.execute("DELETE FROM doc_chunks WHERE file_id = ?", (file_id,))
        return [r[0] for r in rows]

    # ---- chunks and vectors
    def chunks(self, ids: list[int]) -> dict[int, ChunkRow]:
        out: dict[int, ChunkRow] = {}
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            marks = ",".join("?" * len(part))
            for row in self.read(f"SELECT {_CHUNK_COLS} FROM {_CHUNK_JOIN} WHERE c.id IN ({marks})", tuple(part)):
                out[row[0]] = ChunkRow(*row)
        return out

    def file_chunks(self, file_id: int) -> list[ChunkRow]:
        return [ChunkRow(*r) for r in self.read(
            f"SELECT {_CHUNK_COLS} FROM {_CHUNK_JOIN} WHERE c.file_id = ? ORDER BY c.idx", (file_id,))]

    def counts(self) -> dict[str, int]:
        (files, indexed, skipped, chunks), = self.read(
            "SELECT count(*), coalesce(sum(status = 'indexed'), 0), coalesce(sum(status = 'skipped'), 0),"
            " coalesce(sum(chunks), 0) FROM doc_files")
        (vectors,), = self.read("SELECT count(*) FROM doc_vectors WHERE model = ?", (self.model_id,))
        return {"files": files, "indexed": indexed, "skipped": skipped, "chunks": chunks,
                "pending_vectors": max(0, chunks - vectors)}

    def pending(self, limit: int) -> list[tuple[int, str]]:
        """Chunks without a vector from this model (indexed while the embedder was unavailable)."""
        return self.read("SELECT c.id, c.text FROM doc_chunks c LEFT JOIN doc_vectors v ON v.chunk_id = c.id"
                         " WHERE v.chunk_id IS NULL OR v.model != ? ORDER BY c.id LIMIT ?", (self.model_id, limit))

    def set_vectors(self, ids: list[int], vecs: np.ndarray) -> list[int]:
        """Vectors for chunks that still exist (a file may be re-indexed meanwhile); the ids written."""
        written: list[int] = []
        try:
            with self.db.transaction() as conn:
                marks = ",".join("?" * len(ids))
                alive = {r[0] for r in conn.execute(f"SELECT id FROM doc_chunks WHERE id IN ({marks})", list(ids))}
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
        conn.executemany("INSERT OR REPLACE INTO doc_vectors (chunk_id, model, embedding) VALUES (?, ?, ?)",
                         [(i, self.model_id, v.tobytes()) for i, v in zip(ids, vecs)])

    def vectors(self, ids: list[int]) -> tuple[list[int], np.ndarray]:
        found: list[int] = []
        blobs: list[bytes] = []
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            marks = ",".join("?" * len(part))
            for chunk_id, blob in self.read(f"SELECT chunk_id, embedding FROM doc_vectors"
                                            f" WHERE model = ? AND chunk_id IN ({marks})", (self.model_id, *part)):
                found.append(chunk_id)
                blobs.append(blob)
        return found, np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(found), self.dim)

    def vector_search(self, query: np.ndarray, n: int) -> list[tuple[int, float]]:
        return self.index.search(np.ascontiguousarray(query, dtype=np.float32), n)

    def pair_search(self, query: str, n: int) -> list[int]:
        """Chunk ids holding the query's CJK character pairs, best BM25 first ([] for a query
        without CJK). Question words and particles ("哪里", "的人") are not looked for."""
        pairs = query_pairs(query)
        if not pairs:
            return []
        expr = " OR ".join(_fts_phrase(p) for p in pairs)
        return [r[0] for r in self.read("SELECT rowid FROM doc_chunks_cjk WHERE doc_chunks_cjk MATCH ?"
                                        " ORDER BY rank LIMIT ?", (expr, n))]

    def keyword_search(self, query: str, n: int) -> list[int]:
        """Chunk ids matching the query's keywords, best first: BM25 while at most KEYWORD_RANKED
        chunks match, else those chunks ranked by how many query terms they hold (see the memory's
        keyword_search: BM25 over a common word's matches costs tens of ms at 100 000 chunks).
        Terms under 3 characters (no trigram) are looked up with LIKE only when nothing longer is."""
        long_terms, short_terms = keyword_terms(query)
        long_terms = list(dict.fromkeys(map(stem, long_terms)))
        if long_terms:
            expr = " OR ".join(_fts_phrase(t) for t in long_terms)
            first = [r[0] for r in self.read("SELECT rowid FROM doc_chunks_fts WHERE doc_chunks_fts MATCH ?"
                                             " LIMIT ?", (expr, KEYWORD_RANKED + 1))]
            if len(first) <= KEYWORD_RANKED:
                return [r[0] for r in self.read("SELECT rowid FROM doc_chunks_fts WHERE doc_chunks_fts MATCH ?"
                                                " ORDER BY rank LIMIT ?", (expr, n))]
            marks = ",".join("?" * KEYWORD_RANKED)
            rows = self.read(f"SELECT id, text FROM doc_chunks WHERE id IN ({marks})", tuple(first[:KEYWORD_RANKED]))
            scored = sorted((-sum(t in text.casefold() for t in long_terms), chunk_id) for chunk_id, text in rows)
            return [chunk_id for _, chunk_id in scored[:n]]
        if short_terms:
            like = " OR ".join(["text LIKE ? ESCAPE '\\'"] * len(short_terms))
            return [r[0] for r in self.read(f"SELECT id FROM doc_chunks WHERE {like} LIMIT ?",
                                            (*map(_like_pattern, short_terms), n))]
        return []
