"""Documents in the app's one SQLite file: roots and files, their chunks on a hybrid index
(engine/retrieval: trigram and CJK-pair keyword tables, vectors).

Tables come from migration 0009_documents. A file is written whole in one transaction (its row,
chunks, keyword entries and vectors, replacing what it had), so a crash leaves either the old
version of a file or the new one, never half of it. Vectors are searched in RAM (float16: half
the memory of a large index; candidates are rescored in float32).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from engine.docs.chunks import Chunk
from engine.retrieval.index import HybridIndex, Tables
from engine.storage import Database, now

log = logging.getLogger(__name__)

DEFAULT_COLLECTION = "default"
TABLES = Tables(chunks="doc_chunks", fts="doc_chunks_fts", vectors="doc_vectors", vector_id="chunk_id",
                pairs="doc_chunks_cjk")


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


class DocStore(HybridIndex):
    """Roots, files, chunks and vectors of the documents index, in `db`'s file.

    Args:
        db: the app's database (migrated to 0009_documents).
        model_id: the embedder whose vectors are searched (others are re-embedded).
        dim: its embedding dimension.
    """

    def __init__(self, db: Database, model_id: str, dim: int):
        super().__init__(db, model_id, dim, TABLES, vector_backend="numpy", dtype=np.float16, stemmed=True,
                         name="docs")

    # ---- roots
    def add_root(self, path: str, collection: str) -> int:
        """The root's id; an existing root moves to `collection`."""
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO doc_roots (path, collection, added) VALUES (?, ?, ?)"
                         " ON CONFLICT(path) DO UPDATE SET collection = excluded.collection",
                         (path, collection, now()))
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
        with self.writing() as write:
            row = write.execute("SELECT id FROM doc_files WHERE path = ?", (path,)).fetchone()
            fields = (root_id, kind, size, mtime_ns, sha256, status, reason, detail, pages, len(chunks), now())
            if row:
                file_id = row[0]
                self._drop_chunks(write, file_id)
                write.execute("UPDATE doc_files SET root_id = ?, kind = ?, size = ?, mtime_ns = ?, sha256 = ?,"
                              " status = ?, reason = ?, detail = ?, pages = ?, chunks = ?, indexed = ? WHERE id = ?",
                              (*fields, file_id))
            else:
                file_id = write.execute(
                    "INSERT INTO doc_files (root_id, kind, size, mtime_ns, sha256, status, reason, detail, pages,"
                    " chunks, indexed, path) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (*fields, path)).lastrowid
            chunk_ids = [write.execute(
                "INSERT INTO doc_chunks (file_id, idx, text, page, heading, line) VALUES (?, ?, ?, ?, ?, ?)",
                (file_id, c.index, c.text, c.page, c.heading, c.line)).lastrowid for c in chunks]
            self.index_texts(write, chunk_ids, [c.text for c in chunks])
            if vecs is not None and chunk_ids:
                self._put_vectors(write, chunk_ids, vecs)
        return file_id

    def touch_file(self, file_id: int, size: int, mtime_ns: int) -> None:
        """Same content, new size/mtime (copied, touched): nothing to re-read next time."""
        with self.db.transaction() as conn:
            conn.execute("UPDATE doc_files SET size = ?, mtime_ns = ? WHERE id = ?", (size, mtime_ns, file_id))

    def delete_files(self, file_ids: list[int]) -> int:
        for start in range(0, len(file_ids), 200):
            with self.writing() as write:
                for file_id in file_ids[start:start + 200]:
                    self._drop_chunks(write, file_id)
                    write.execute("DELETE FROM doc_files WHERE id = ?", (file_id,))
        return len(file_ids)

    def _drop_chunks(self, write, file_id: int) -> list[int]:
        return self.drop(write, [r[0] for r in write.execute("SELECT id FROM doc_chunks WHERE file_id = ?",
                                                             (file_id,))])

    # ---- chunks and vectors
    def chunks(self, ids: list[int]) -> dict[int, ChunkRow]:
        out: dict[int, ChunkRow] = {}
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            marks = ",".join("?" * len(part))
            for row in self.read(f"SELECT {_CHUNK_COLS} FROM {_CHUNK_JOIN} WHERE c.id IN ({marks})", tuple(part)):
                out[row[0]] = ChunkRow(*row)
        return out

    def counts(self) -> dict[str, int]:
        (files, indexed, skipped, chunks), = self.read(
            "SELECT count(*), coalesce(sum(status = 'indexed'), 0), coalesce(sum(status = 'skipped'), 0),"
            " coalesce(sum(chunks), 0) FROM doc_files")
        (vectors,), = self.read("SELECT count(*) FROM doc_vectors WHERE model = ?", (self.model_id,))
        return {"files": files, "indexed": indexed, "skipped": skipped, "chunks": chunks,
                "pending_vectors": max(0, chunks - vectors)}
