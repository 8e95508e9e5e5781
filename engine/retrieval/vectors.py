"""Nearest chunks by cosine similarity: sqlite-vec's vec0 or numpy, one algorithm, same results.

Both paths run the same two stages. Coarse: the `coarse` chunks whose sign bits (one bit per
dimension) differ least from the query's (Hamming distance). Exact: cosine similarity of those
candidates' float32 embeddings (the index's vectors table), best first. A store with at most
`coarse` vectors is searched exactly. Why not an exact scan: the sqlite-vec wheel has no SIMD, so a float
cosine scan of 100 000 vectors takes ~100 ms here; the bit scan plus rescoring fits the 30 ms
budget (docs/memory.md has the measurements, recall included).
"""

from __future__ import annotations

import logging
import threading
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

COARSE_CANDIDATES = 100
VEC_CHUNK_SIZE = 4096  # vec0 rows per chunk: fewer, larger chunks make its k-NN merge cheaper
_POPCOUNT8 = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)


def sign_bits(vecs: np.ndarray) -> np.ndarray:
    """(n, dim) float32 → (n, dim / 8) uint8: bit i is set when component i is positive."""
    return np.packbits(vecs > 0, axis=1)


def hamming(bits: np.ndarray, query_bits: np.ndarray) -> np.ndarray:
    """Differing bits between each row of `bits` and `query_bits`, as int32."""
    x = bits ^ query_bits
    if hasattr(np, "bitwise_count") and x.shape[1] % 8 == 0:  # numpy ≥ 2: a popcount instruction
        return np.bitwise_count(x.view(np.uint64)).sum(axis=1, dtype=np.int32)
    return _POPCOUNT8[x].sum(axis=1, dtype=np.int32)


def rescore(ids: np.ndarray, vecs: np.ndarray, query: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The `n` best (id, cosine) of the candidates, best first; ties by id."""
    if len(ids) == 0:
        return []
    sims = vecs.astype(np.float32, copy=False) @ query
    order = np.lexsort((ids, -sims))[:n]
    return [(int(ids[i]), float(sims[i])) for i in order]


class VectorIndex(Protocol):
    name: str  # "sqlite-vec" | "numpy"

    def add(self, conn, ids: list[int], vecs: np.ndarray) -> None:
        """Inside the store's write transaction: index these (replacing older vectors of the ids)."""

    def committed(self, added: list[int], vecs: np.ndarray | None, removed: list[int]) -> None:
        """After that transaction committed (or, with everything empty, after it failed)."""

    def remove(self, conn, ids: list[int]) -> None:
        """Inside the store's write transaction: drop these ids."""

    def search(self, query: np.ndarray, n: int) -> list[tuple[int, float]]:
        """The `n` nearest chunks to a unit-length query: (id, cosine), best first."""


class SqliteVecIndex:
    """Sign bits in a vec0 `bit[dim]` table; rescoring reads the candidates' floats from SQLite."""

    name = "sqlite-vec"

    def __init__(self, store, coarse: int = COARSE_CANDIDATES):
        self.store, self.coarse, self.tables = store, coarse, store.tables
        self.table = self.tables.vec0
        self.spec = f"{store.model_id}|bit[{store.dim}]|chunk_size={VEC_CHUNK_SIZE}"

    def ensure_table(self) -> bool:
        """Create (or re-create for another model/dimension) the vec0 table; True when it is new."""
        if self.store.meta("vec_index") == self.spec and self.store.table_exists(self.table):
            return False
        with self.store.transaction() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {self.table}")
            conn.execute(f"CREATE VIRTUAL TABLE {self.table} USING vec0(embedding bit[{self.store.dim}],"
                         f" chunk_size={VEC_CHUNK_SIZE})")
            self.store.set_meta(conn, "vec_index", self.spec)
        return True

    def add(self, conn, ids: list[int], vecs: np.ndarray) -> None:
        self.remove(conn, ids)
        bits = sign_bits(vecs)
        conn.executemany(f"INSERT INTO {self.table} (rowid, embedding) VALUES (?, vec_bit(?))",
                         [(i, b.tobytes()) for i, b in zip(ids, bits)])

    def remove(self, conn, ids: list[int]) -> None:
        conn.executemany(f"DELETE FROM {self.table} WHERE rowid = ?", [(i,) for i in ids])

    def committed(self, added, vecs, removed) -> None:
        pass  # nothing outside SQLite

    def search(self, query: np.ndarray, n: int) -> list[tuple[int, float]]:
        qbits = sign_bits(query[None, :])[0].tobytes()
        rows = self.store.read(
            f"SELECT v.{self.tables.vector_id}, v.embedding FROM (SELECT rowid FROM {self.table}"
            f" WHERE embedding MATCH vec_bit(?) AND k = ?) AS c"
            f" JOIN {self.tables.vectors} v ON v.{self.tables.vector_id} = c.rowid WHERE v.model = ?",
            (qbits, max(self.coarse, n), self.store.model_id))
        if not rows:
            return []
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), self.store.dim)
        return rescore(ids, vecs, query, n)

    def sync(self) -> tuple[int, int]:
        """Make vec0 hold exactly this model's vectors (another process may have written without
        sqlite-vec); returns (added, removed)."""
        have = {r[0] for r in self.store.read(f"SELECT rowid FROM {self.table}")}
        want = {r[0] for r in self.store.read(f"SELECT {self.tables.vector_id} FROM {self.tables.vectors}"
                                              " WHERE model = ?", (self.store.model_id,))}
        extra, missing = sorted(have - want), sorted(want - have)
        if extra:
            with self.store.transaction() as conn:
                self.remove(conn, extra)
        for start in range(0, len(missing), 2000):
            batch = missing[start:start + 2000]
            ids, vecs = self.store.vectors(batch)
            with self.store.transaction() as conn:
                self.add(conn, ids, vecs)
        if extra or missing:
            log.info("vec0 index synced: %d added, %d removed", len(missing), len(extra))
        return len(missing), len(extra)


class NumpyIndex:
    """Every vector of the model in RAM (float32 + sign bits), loaded on first use.

    Another connection's commit (another process) changes SQLite's data_version: the next search
    reloads everything, so results never go stale.
    """

    name = "numpy"

    def __init__(self, store, coarse: int = COARSE_CANDIDATES, dtype=np.float32):
        self.store, self.coarse = store, coarse
        self.table, self.id_column = store.tables.vectors, store.tables.vector_id
        # float16 halves the RAM of a large index (documents); only the coarse candidates are
        # rescored, in float32, so the ranking moves by ~1e-3 of a cosine at most.
        self._lock = threading.Lock()  # never taken while holding the database lock
        self._loaded_version: int | None = None
        self._n = 0
        self._ids = np.zeros(0, dtype=np.int64)
        self._vecs = np.zeros((0, store.dim), dtype=dtype)
        self._bits = np.zeros((0, store.dim // 8), dtype=np.uint8)
        self._pos: dict[int, int] = {}

    def __len__(self) -> int:
        return self._n

    def add(self, conn, ids, vecs) -> None:
        pass  # RAM changes only once the transaction has committed

    def remove(self, conn, ids) -> None:
        pass

    def committed(self, added, vecs, removed) -> None:
        with self._lock:
            if self._loaded_version is None:
                return  # not loaded yet: the load will read the committed rows
            if not added and not removed:
                self._loaded_version = None  # a failed write: reload rather than guess
                return
            for i in removed:
                self._drop(i)
            if added:
                self._put(added, vecs)

    def search(self, query: np.ndarray, n: int, exact: bool = False) -> list[tuple[int, float]]:
        with self._lock:
            self._ensure_loaded()
            if self._n == 0:
                return []
            ids, vecs, bits = self._ids[:self._n], self._vecs[:self._n], self._bits[:self._n]
            coarse = max(self.coarse, n)
            if exact or self._n <= coarse:
                return rescore(ids, vecs, query, n)
            dist = hamming(bits, sign_bits(query[None, :])[0])
            cand = np.argpartition(dist, coarse - 1)[:coarse]
            return rescore(ids[cand], vecs[cand], query, n)

    def load(self) -> None:
        """Read every vector of the model now (the service warms the index in the background)."""
        with self._lock:
            self._ensure_loaded()

    def _ensure_loaded(self) -> None:
        version = self.store.data_version()
        if self._loaded_version == version:
            return
        self._n, self._pos = 0, {}
        last = 0
        while True:  # in slices, so other threads' statements interleave
            rows = self.store.read(f"SELECT {self.id_column}, embedding FROM {self.table} WHERE model = ?"
                                   f" AND {self.id_column} > ? ORDER BY {self.id_column} LIMIT 20000",
                                   (self.store.model_id, last))
            if not rows:
                break
            last = rows[-1][0]
            vecs = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4").reshape(len(rows), self.store.dim)
            self._put([r[0] for r in rows], vecs)
        self._loaded_version = version
        log.debug("numpy vector index loaded: %d vectors", self._n)

    def _put(self, ids: list[int], vecs: np.ndarray) -> None:
        bits = sign_bits(vecs)
        fresh = sum(1 for i in ids if i not in self._pos)
        self._reserve(self._n + fresh)
        if fresh == len(ids):  # the common case (loading, new memories): one slice assignment
            end = self._n + fresh
            self._ids[self._n:end], self._vecs[self._n:end], self._bits[self._n:end] = ids, vecs, bits
            self._pos.update(zip(ids, range(self._n, end)))
            self._n = end
            return
        for k, i in enumerate(ids):
            row = self._pos.get(i)
            if row is None:
                row = self._pos[i] = self._n
                self._n += 1
                self._ids[row] = i
            self._vecs[row], self._bits[row] = vecs[k], bits[k]

    def _drop(self, chunk_id: int) -> None:
        row = self._pos.pop(chunk_id, None)
        if row is None:
            return
        last = self._n - 1
        if row != last:  # move the last row into the hole: arrays stay dense
            moved = int(self._ids[last])
            self._ids[row], self._vecs[row], self._bits[row] = moved, self._vecs[last], self._bits[last]
            self._pos[moved] = row
        self._n = last

    def _reserve(self, size: int) -> None:
        if size <= len(self._ids):
            return
        cap = max(size, 2 * len(self._ids), 1024)
        for name in ("_ids", "_vecs", "_bits"):
            old = getattr(self, name)
            grown = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            grown[:self._n] = old[:self._n]
            setattr(self, name, grown)
