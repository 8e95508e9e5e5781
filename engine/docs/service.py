"""The documents a chat can use: folders and files the user added, indexed in the background.

One thread owns indexing (`docs-indexer`, an IndexWorker running engine/docs/indexer.py's jobs);
it yields to chat turns between files and between embedding batches (`turn()`), and the shared
embedder serves queries ahead of indexing batches. Searches rank on the shared hybrid index
(engine/retrieval) with the documents' rules (engine/docs/search.py).
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future
from pathlib import Path

from engine.docs.indexer import AddReport, Indexer, Job, under
from engine.docs.search import rank, wants_list
from engine.docs.store import DEFAULT_COLLECTION, DocStore
from engine.memory.embedder import Embedder
from engine.retrieval import Hits, IndexWorker
from engine.retrieval.terms import is_mostly_cjk
from engine.storage import Database

log = logging.getLogger(__name__)

MIN_POOL = 40          # candidates from each of the vector and keyword lists
MAX_QUERY_CHARS = 2_000
CJK_VECTOR_WEIGHT = 0.5  # an English-only embedder's rank for a Chinese query counts half (bench/docs.py)
__all__ = ["AddReport", "DocumentService", "DocumentsError"]


class DocumentsError(ValueError):
    """A request the documents index refuses (bad path, unknown collection); says why."""


class DocumentService:
    """Index folders and files; search them by meaning and keyword.

    Args:
        db: the app's database.
        embedder: the sentence embedder (shared with the memory: one thread owns the model).
        code: also index source code files (by extension).
        max_file_bytes: larger files are skipped ("too large").
    """

    def __init__(self, db: Database, embedder: Embedder, *, code: bool = False,
                 max_file_bytes: int = 64 * 1024 * 1024, k: int = 4):
        self.db, self.embedder, self.code, self.max_file_bytes, self.k = db, embedder, code, max_file_bytes, k
        self.store = DocStore(db, embedder.model_id, embedder.dim)
        self.indexer = Indexer(self.store, embedder, code=code, max_file_bytes=max_file_bytes,
                               roots_changed=self._roots_changed)
        self._worker = IndexWorker("docs-indexer", self.indexer.run, self._embed_pending, idle_s=0.5)
        self.watcher = None

    @classmethod
    def from_settings(cls, db: Database, settings, embedder: Embedder) -> "DocumentService":
        return cls(db, embedder, code=settings.get("docs.code"),
                   max_file_bytes=int(settings.get("docs.max_file_mb") * 1024 * 1024), k=settings.get("docs.k"))

    # ---- lifecycle
    def start(self, resume: bool = True) -> "DocumentService":
        """Start the indexing thread; with `resume`, roots whose last scan did not finish (a crash,
        a quit mid-way) are scanned again first. The embedder is started by its owner."""
        if not self._worker.running:
            self._worker.start()
            if self.store.roots():
                self.embedder.start()  # documents to search: load it now, off the start path
            if resume:
                unfinished = [r["path"] for r in self.store.roots() if r["scanned"] is None and not r["stopped"]]
                if unfinished:
                    log.info("resuming the indexing of %d folders", len(unfinished))
                    self._enqueue(unfinished, None)
        return self

    def close(self, timeout: float = 10.0) -> None:
        """Stop the watcher and the indexer (the file being written is finished or not begun)."""
        if self.watcher is not None:
            self.watcher.close()
            self.watcher = None
        self.indexer.cancel(running_only=True)
        self._worker.stop(timeout)
        self.store.close()

    def watch(self) -> None:
        """Re-index added folders when their files change (engine/docs/watch.py)."""
        if self.watcher is None:
            from engine.docs.watch import FolderWatcher
            self.watcher = FolderWatcher(self)
            self.watcher.start()

    def _roots_changed(self) -> None:
        if self.watcher is not None:
            self.watcher.refresh()

    def turn(self):
        """Held while a chat turn runs (a context manager): the indexer pauses at its next file
        or batch, and the embedding batch running now stops at once (on one core it would slow
        the turn's prompt by ~1.5x: measured with bench/docs.py --only ttft); it is sent again
        after the turn."""
        return self.indexer.turn()

    # ---- writes (queued on the indexing thread)
    def add(self, paths: list[str | os.PathLike], collection: str = DEFAULT_COLLECTION,
            cancel: threading.Event | None = None) -> Future:
        """Add folders/files to `collection` and index what is new or changed; a Future of the
        `AddReport`. Paths already added are rescanned (only changed files are read again).

        Raises:
            DocumentsError: no paths, or an empty collection name.
        """
        if not paths:
            raise DocumentsError("no files or folders given")
        collection = (collection or "").strip()
        if not collection:
            raise DocumentsError("the collection name is empty")
        return self._enqueue([str(Path(os.path.abspath(os.fspath(p)))) for p in paths], collection, cancel)

    def rescan(self, paths: list[str] | None = None) -> Future:
        """Scan added roots again (all, or those holding `paths`); a Future of the AddReport."""
        roots = [r["path"] for r in self.store.roots()]
        if paths is not None:
            roots = [r for r in roots if any(under(p, r) or under(r, p) for p in paths)]
        return self._enqueue(roots, None)

    def _enqueue(self, paths: list[str], collection: str | None, cancel: threading.Event | None = None) -> Future:
        self.embedder.start()  # no-op once started: a first add loads the embedder
        job = Job(paths, collection, Future(), cancel or threading.Event())
        self.indexer.accept(job)
        if self._worker.running:
            self._worker.put(job)
        else:  # not started (a one-shot CLI, tests): run here
            self.indexer.run(job)
        return job.future

    def cancel(self) -> None:
        """Stop the running indexing job after the file it is writing, and every queued one.
        Their folders stay added, indexed as far as they got; the next start does not resume
        them (an add or rescan does)."""
        self.indexer.cancel()

    def remove(self, path: str | None = None, collection: str | None = None) -> dict:
        """Take an added root (or a single indexed file, or a whole collection) out of the index.

        Returns: {"roots": n, "files": n}.
        Raises:
            DocumentsError: nothing added matches.
        """
        if (path is None) == (collection is None):
            raise DocumentsError("give a path or a collection")
        roots = files = 0
        if collection is not None:
            targets = self.store.roots(collection)
            if not targets:
                raise DocumentsError(f"no collection named {collection!r}")
        else:
            path = str(Path(os.path.abspath(path)))
            targets = [r for r in self.store.roots() if under(r["path"], path)]
            if not targets:
                row = self.store.files(path=path)
                if not row:
                    raise DocumentsError(f"{path} is not in the documents index")
                return {"roots": 0, "files": self.store.delete_files([row[0]["id"]])}
        for r in targets:
            files += self.store.delete_root(r["id"])
            roots += 1
        if self.watcher is not None:
            self.watcher.refresh()
        return {"roots": roots, "files": files}

    # ---- reads (any thread)
    def roots(self, collection: str | None = None) -> list[dict]:
        return self.store.roots(collection)

    def files(self, collection: str | None = None) -> list[dict]:
        return self.store.files(collection=collection)

    def collections(self) -> list[dict]:
        out: dict[str, dict] = {}
        for r in self.store.roots():
            c = out.setdefault(r["collection"], {"name": r["collection"], "roots": 0, "files": 0, "chunks": 0})
            c["roots"] += 1
            c["files"] += r["files"]
            c["chunks"] += r["chunks"]
        return list(out.values())

    def progress(self) -> dict:
        """{"state": idle|scanning|indexing|paused, "files_done", "files_total", "chunks",
        "rate_chunks_s", "current", "queued"} of the running job; never blocks."""
        return self.indexer.progress()

    def status(self) -> dict:
        """Progress, the embedder's state and counts: files, indexed, skipped, chunks, and
        pending_vectors (chunks that wait for the embedder, keyword-searchable meanwhile)."""
        return {"progress": self.progress(), "embedder": self.embedder.state, **self.store.counts()}

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queued jobs are done and every chunk has a vector (when the embedder
        can make them); False on timeout."""
        w = self._worker
        if not w.running:  # jobs ran inline
            return not self.store.pending(1) or self.embedder.error is not None
        return w.wait_for(lambda: w.outstanding == 0 and (not w.dirty or self.embedder.error is not None), timeout)

    def search(self, query: str, k: int | None = None, collection: str | None = None) -> Hits:
        """The excerpts most relevant to `query`: vector and keyword ranks fused, exact phrases
        boosted, at most 2 per file unless the question asks for a list (then up to 3k).

        Without a ready embedder only keywords rank (status says so)."""
        query = (query or "").replace("\x00", "").strip()[:MAX_QUERY_CHARS]
        k = self.k if k is None else k
        if not query:
            return Hits(status="skipped: empty query")
        if k <= 0:
            return Hits()
        pool = max(MIN_POOL, 8 * k) * (3 if wants_list(query) else 1)
        if collection is not None:
            pool *= 4  # others' chunks are filtered out after ranking
        self.embedder.start()  # loads in the background when nothing needed it before
        found = self.store.candidates(query, pool, self._embed_query)
        rows = self.store.chunks(found.ids())
        if collection is not None:
            rows = {i: r for i, r in rows.items() if r.collection == collection}
        model = self.embedder.model
        weight = CJK_VECTOR_WEIGHT if model is not None and model.english_only and is_mostly_cjk(query) else 1.0
        status = "ok" if found.embedded else f"keywords only: embedder {self.embedder.state}"
        return Hits(rank(query, found, rows, k, self._floors(query), weight), status)

    def _embed_query(self, query: str):
        return self.embedder.embed([query])[0] if self.embedder.ready else None

    def _floors(self, query: str):
        """chunk text -> (cosine floor, cosine floor with a keyword match). The model's CJK floors
        apply when query and chunk are both mostly CJK (an English model scores any two Chinese
        texts 0.4-0.7); a Chinese question naming an English term ("Zephyr 水壶…") against an
        English chunk is judged like English."""
        m = self.embedder.model
        if m is None:
            return lambda text: (0.0, 0.0)
        if not is_mostly_cjk(query):
            return lambda text: (m.min_score, m.keyword_min_score)
        return lambda text: ((m.min_score_cjk, m.keyword_min_score_cjk) if is_mostly_cjk(text)
                             else (m.min_score, m.keyword_min_score))

    def _embed_pending(self) -> bool:
        return self.indexer.embed_pending(self._worker.waiting)
