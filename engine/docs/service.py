"""The documents a chat can use: folders and files the user added, indexed in the background.

One thread owns indexing (walk, hash, parse, chunk, embed, write); it yields to chat turns between
files and between embedding batches (`turn()`), and the shared embedder serves queries ahead of
indexing batches. Every file is written whole in one transaction, so a killed indexer leaves no
half-indexed file, and a root whose scan never finished is scanned again at the next start.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.docs.chunks import chunks as cut
from engine.docs.parse import READ_ERROR, UNREADABLE, VANISHED, Skip, parse
from engine.docs.scan import Found, sha256_of, walk
from engine.docs.search import DocHits, fuse, wants_list
from engine.docs.store import DEFAULT_COLLECTION, DocStore, _now
from engine.memory.embedder import INDEXING, EmbedInterrupted, Embedder
from engine.memory.store import is_mostly_cjk
from engine.storage import Database

log = logging.getLogger(__name__)

CHUNK_CHARS = 500      # MiniLM reads ~256 word pieces: ~500 Latin characters (a CJK one counts 2)
CHUNK_OVERLAP = 80
EMBED_BATCH = 16       # at most; the batch shrinks to last ~EMBED_BATCH_S (see _tune_batch)
EMBED_BATCH_S = 0.15
MIN_POOL = 40          # candidates from each of the vector and keyword lists
MAX_QUERY_CHARS = 2_000
CJK_VECTOR_WEIGHT = 0.5  # an English-only embedder's rank for a Chinese query counts half (bench/docs.py)
TURN_WAIT_S = 0.05     # how often a paused indexer looks whether the turn has finished
_STOP = object()
# Skips worth another try with the same size and mtime: permissions change without touching mtime.
RETRY = frozenset({UNREADABLE, VANISHED, READ_ERROR})


class DocumentsError(ValueError):
    """A request the documents index refuses (bad path, unknown collection); says why."""


@dataclass
class AddReport:
    """What one `add` run did (the CLI's JSON shape)."""

    indexed: int = 0     # files (re)indexed in this run
    unchanged: int = 0
    removed: int = 0     # files gone from disk since the last run
    chunks: int = 0      # chunks written in this run
    seconds: float = 0.0
    skipped: list[dict] = field(default_factory=list)  # {"path", "reason"}
    cancelled: bool = False

    def to_dict(self) -> dict:
        return {"indexed": self.indexed, "unchanged": self.unchanged, "removed": self.removed,
                "chunks": self.chunks, "seconds": round(self.seconds, 3), "skipped": list(self.skipped)}


@dataclass
class _Job:
    paths: list[str]
    collection: str | None  # None: a rescan keeps each root's collection
    future: Future
    cancel: threading.Event


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
        self._jobs: queue.Queue = queue.Queue()
        self._worker: threading.Thread | None = None
        self._turns = 0                 # chat turns running: the indexer waits for them
        self._batch = 4                 # chunks per embedding request, tuned as they are timed
        self._waiting: list[_Job] = []  # jobs queued or running (cancel reaches every one)
        self._lock = threading.Lock()
        self._progress = {"state": "idle", "files_done": 0, "files_total": 0, "chunks": 0,
                          "rate_chunks_s": 0.0, "current": None, "queued": 0}
        self._current: _Job | None = None
        self._keyword_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="docs-keywords")
        self.watcher = None

    @classmethod
    def from_settings(cls, db: Database, settings, embedder: Embedder) -> "DocumentService":
        return cls(db, embedder, code=settings.get("docs.code"),
                   max_file_bytes=int(settings.get("docs.max_file_mb") * 1024 * 1024), k=settings.get("docs.k"))

    # ---- lifecycle
    def start(self, resume: bool = True) -> "DocumentService":
        """Start the indexing thread; with `resume`, roots whose last scan did not finish (a crash,
        a quit mid-way) are scanned again first. The embedder is started by its owner."""
        if self._worker is None:
            self._worker = threading.Thread(target=self._run, name="docs-indexer", daemon=True)
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
        if self._current is not None:
            self._current.cancel.set()
        if self._worker is not None:
            self._jobs.put(_STOP)
            self._worker.join(timeout)
            self._worker = None
        self._keyword_pool.shutdown(wait=True)

    def watch(self) -> None:
        """Re-index added folders when their files change (engine/docs/watch.py)."""
        if self.watcher is None:
            from engine.docs.watch import FolderWatcher
            self.watcher = FolderWatcher(self)
            self.watcher.start()

    @contextmanager
    def turn(self):
        """Held while a chat turn runs: the indexer pauses at its next file or batch, and the
        embedding batch running now stops at once (on one core it would slow the turn's prompt
        by ~1.5x: measured with bench/docs.py --only ttft); it is sent again after the turn."""
        with self._lock:
            self._turns += 1
        self.embedder.interrupt()
        try:
            yield
        finally:
            with self._lock:
                self._turns -= 1

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
            roots = [r for r in roots if any(_under(p, r) or _under(r, p) for p in paths)]
        return self._enqueue(roots, None)

    def _enqueue(self, paths: list[str], collection: str | None, cancel: threading.Event | None = None) -> Future:
        self.embedder.start()  # no-op once started: a first add loads the embedder
        job = _Job(paths, collection, Future(), cancel or threading.Event())
        with self._lock:
            self._progress["queued"] += 1
            self._waiting.append(job)
        if self._worker is None:  # not started (a one-shot CLI, tests): run here
            self._do(job)
        else:
            self._jobs.put(job)
        return job.future

    def cancel(self) -> None:
        """Stop the running indexing job after the file it is writing, and every queued one.
        Their folders stay added, indexed as far as they got; the next start does not resume
        them (an add or rescan does)."""
        with self._lock:
            waiting = list(self._waiting)
        for job in waiting:  # the indexing thread answers each at once: cancelled before it began
            job.cancel.set()

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
            targets = [r for r in self.store.roots() if _under(r["path"], path)]
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
        with self._lock:
            return dict(self._progress)

    def status(self) -> dict:
        """Progress, the embedder's state and counts: files, indexed, skipped, chunks, and
        pending_vectors (chunks that wait for the embedder, keyword-searchable meanwhile)."""
        return {"progress": self.progress(), "embedder": self.embedder.state, **self.store.counts()}

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the queued jobs are done and every chunk has a vector (when the embedder
        can make them); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            idle = self._jobs.empty() and self.progress()["state"] == "idle"
            if idle and (not self.store.pending(1) or self.embedder.error is not None):
                return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def search(self, query: str, k: int | None = None, collection: str | None = None) -> DocHits:
        """The excerpts most relevant to `query`: vector and keyword ranks fused, exact phrases
        boosted, at most 2 per file unless the question asks for a list (then up to 3k).

        Without a ready embedder only keywords rank (status says so)."""
        query = (query or "").replace("\x00", "").strip()[:MAX_QUERY_CHARS]
        k = self.k if k is None else k
        if not query:
            return DocHits(status="skipped: empty query")
        if k <= 0:
            return DocHits()
        pool = max(MIN_POOL, 8 * k) * (3 if wants_list(query) else 1)
        if collection is not None:
            pool *= 4  # others' chunks are filtered out after ranking
        # Keywords need no embedding: looked up on the other core while the query is embedded.
        keywords = self._keyword_pool.submit(lambda: (self.store.keyword_search(query, pool),
                                                      self.store.pair_search(query, pool)))
        status = "ok"
        vec_ranked: list[tuple[int, float]] = []
        qvec = None
        self.embedder.start()  # loads in the background when nothing needed it before
        if self.embedder.ready:
            qvec = self.embedder.embed([query])[0]
            vec_ranked = self.store.vector_search(qvec, pool)
        else:
            status = f"keywords only: embedder {self.embedder.state}"
        kw_ranked, paired = keywords.result()
        cosine = dict(vec_ranked)
        missing = [i for i in dict.fromkeys([*kw_ranked, *paired]) if i not in cosine]  # keyword-only hits
        if missing and qvec is not None:
            ids, vecs = self.store.vectors(missing)
            cosine.update(zip(ids, (vecs @ qvec).tolist()))
        rows = self.store.chunks(list(set(cosine) | set(kw_ranked) | set(paired)))
        if collection is not None:
            rows = {i: r for i, r in rows.items() if r.collection == collection}
        model = self.embedder.model
        weight = CJK_VECTOR_WEIGHT if model is not None and model.english_only and is_mostly_cjk(query) else 1.0
        return DocHits(fuse(query, vec_ranked, kw_ranked, paired, cosine, rows, k, self._floors(query), weight),
                       status)

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

    # ---- the indexing thread
    def _run(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=0.5)
            except queue.Empty:
                self._embed_pending()
                continue
            if job is _STOP:
                break
            self._do(job)

    def _do(self, job: _Job) -> None:
        if job.future.done():
            return
        self._current = job
        try:
            report = self._index(job)
            job.future.set_result(report)
        except BaseException as exc:  # noqa: BLE001 - the caller gets it through the future
            log.exception("indexing %s failed", job.paths)
            job.future.set_exception(exc)
        finally:
            self._current = None
            with self._lock:
                if job in self._waiting:
                    self._waiting.remove(job)
                self._progress.update(state="idle", current=None, queued=max(0, self._progress["queued"] - 1))

    def _index(self, job: _Job) -> AddReport:
        started = time.monotonic()
        report = AddReport()
        if job.cancel.is_set():  # cancelled while queued: nothing added, nothing scanned
            report.cancelled = True
            return report
        self._set(state="scanning", files_done=0, files_total=0, chunks=0, rate_chunks_s=0.0, current=None)
        plan: list[tuple[int, Found]] = []
        scans: list[tuple[int, dict, set[str]]] = []
        known = {r["path"]: r for r in self.store.roots()}
        for path in job.paths:
            if job.cancel.is_set():
                report.cancelled = True
                break
            root = known.get(path) or next((r for r in known.values() if _under(path, r["path"])), None)
            if root is None and job.collection is None:
                continue  # removed meanwhile
            if not os.path.lexists(path):
                report.skipped.append({"path": path, "reason": "not found"})
                if root is None:
                    continue
            if root is None or (job.collection is not None and root["path"] == path
                                and root["collection"] != job.collection):
                root_id = self.store.add_root(path, job.collection)
                self._adopt_children(root_id, path)
                if self.watcher is not None:
                    self.watcher.refresh()
                known = {r["path"]: r for r in self.store.roots()}
                root = known[path]
            found, problems = walk(Path(path), code=self.code, within=Path(root["path"]))
            report.skipped += [{"path": p, "reason": why} for p, why in problems if p != path or os.path.lexists(p)]
            stored = {f["path"]: f for f in self.store.files(root_id=root["id"])}
            if root["path"] != path:  # a file or sub-folder of an added root: only that part
                stored = {p: f for p, f in stored.items() if _under(p, path)}
            plan += [(root["id"], f) for f in found]
            scans.append((root["id"], stored, {f.path for f in found}))
        gone = [f["id"] for _, stored, seen in scans for p, f in stored.items() if p not in seen]
        if gone:
            report.removed = self.store.delete_files(gone)
        stored_all = {p: f for _, stored, _ in scans for p, f in stored.items()}
        self._set(state="indexing", files_total=len(plan))
        for n, (root_id, found) in enumerate(plan):
            if job.cancel.is_set() or report.cancelled:
                break
            self._wait_for_turns()
            self._set(current=found.path, files_done=n)
            self._index_file(root_id, found, stored_all.get(found.path), report, job.cancel)
            elapsed = time.monotonic() - started
            self._set(chunks=report.chunks, rate_chunks_s=round(report.chunks / elapsed, 1) if elapsed else 0.0)
        report.cancelled = report.cancelled or job.cancel.is_set()
        for root_id, _, _ in scans:  # stopped by the user: not resumed at the next start
            self.store.mark_scanned(root_id, None if report.cancelled else _now(), stopped=report.cancelled)
        self._set(files_done=len(plan) if not report.cancelled else self._progress["files_done"])
        report.seconds = time.monotonic() - started
        return report

    def _adopt_children(self, root_id: int, path: str) -> None:
        """A folder added above earlier roots takes their files over (and they stop being roots)."""
        for r in self.store.roots():
            if r["id"] != root_id and _under(r["path"], path):
                with self.db.transaction() as conn:
                    conn.execute("UPDATE doc_files SET root_id = ? WHERE root_id = ?", (root_id, r["id"]))
                    conn.execute("DELETE FROM doc_roots WHERE id = ?", (r["id"],))

    def _index_file(self, root_id: int, found: Found, stored: dict | None, report: AddReport,
                    cancel: threading.Event) -> None:
        path = found.path
        if stored and (stored["size"], stored["mtime_ns"]) == (found.size, found.mtime_ns):
            if stored["status"] == "indexed":
                report.unchanged += 1
                return
            if stored["reason"] not in RETRY:  # the same bytes would be skipped again
                report.unchanged += 1
                report.skipped.append({"path": path, "reason": stored["reason"]})
                return
        if found.kind is None:
            self._skip(root_id, found, "unsupported file type", None, report)
            return
        if found.size > self.max_file_bytes:
            self._skip(root_id, found, "too large", f"{found.size / 1e6:.0f} MB; the limit is "
                       f"{self.max_file_bytes / 1e6:.0f} MB (setting docs.max_file_mb)", report)
            return
        try:
            digest = sha256_of(path)
        except OSError:
            digest = None  # parse says why in its own words
        if stored and digest is not None and stored["sha256"] == digest and stored["status"] == "indexed":
            self.store.touch_file(stored["id"], found.size, found.mtime_ns)
            report.unchanged += 1
            return
        try:
            parsed = parse(Path(path), max_bytes=self.max_file_bytes, code=self.code)
        except Skip as skip:
            self._skip(root_id, found, skip.reason, skip.detail, report)
            return
        except Exception as exc:  # noqa: BLE001 - one file must never stop the indexer
            log.exception("parsing %s failed", path)
            self._skip(root_id, found, READ_ERROR, type(exc).__name__, report)
            return
        pieces = cut(parsed, CHUNK_CHARS, CHUNK_OVERLAP)
        vecs = self._embed([c.text for c in pieces], cancel)
        if cancel.is_set() and vecs is None and pieces:
            report.cancelled = True
            return  # not written: the next run reads it again
        pages = max((b.page for b in parsed.blocks if b.page), default=None)
        self.store.write_file(root_id, path, kind=parsed.kind, size=found.size, mtime_ns=found.mtime_ns,
                              sha256=digest, chunks=pieces, vecs=vecs, pages=pages)
        report.indexed += 1
        report.chunks += len(pieces)

    def _skip(self, root_id: int, found: Found, reason: str, detail: str | None, report: AddReport) -> None:
        report.skipped.append({"path": found.path, "reason": reason})
        try:
            self.store.write_file(root_id, found.path, kind=found.kind, size=found.size, mtime_ns=found.mtime_ns,
                                  sha256=None, reason=reason, detail=detail)
        except Exception:  # noqa: BLE001 - a skipped file's record is a courtesy
            log.exception("recording the skipped file %s failed", found.path)

    def _embed(self, texts: list[str], cancel: threading.Event) -> np.ndarray | None:
        """Vectors for a file's chunks, in batches that give way to chat turns; None when the
        embedder cannot make them now (the chunks are embedded later) or the job was cancelled."""
        if not texts:
            return np.zeros((0, self.store.dim), dtype=np.float32)
        if not self.embedder.ready and self.embedder.state == "loading":
            self.embedder.wait(120)
        if not self.embedder.ready:
            return None
        out = []
        start = 0
        while start < len(texts):
            if cancel.is_set():
                return None
            self._wait_for_turns()
            batch = texts[start:start + self._batch]
            t0 = time.perf_counter()
            try:
                out.append(self.embedder.embed(batch, INDEXING, interruptible=True))
            except EmbedInterrupted:
                continue  # a turn began: wait for it, then the same batch again
            except Exception:  # noqa: BLE001 - the chunks stay keyword-searchable; embedded later
                log.exception("embedding failed; the file's chunks get vectors later")
                return None
            start += len(batch)
            self._tune_batch(len(batch), time.perf_counter() - t0)
        return np.concatenate(out)

    def _tune_batch(self, size: int, seconds: float) -> None:
        """Batches that last about EMBED_BATCH_S: a chat turn starting meanwhile shares the CPU
        with one short batch at most (a batch of 16 Chinese chunks took ~2 s on one core)."""
        per_chunk = seconds / max(1, size)
        self._batch = max(1, min(EMBED_BATCH, int(EMBED_BATCH_S / per_chunk) if per_chunk else EMBED_BATCH))

    def _embed_pending(self) -> None:
        """While idle: vectors for chunks written without them."""
        if not self.embedder.ready:
            return
        while self._jobs.empty():
            batch = self.store.pending(self._batch)
            if not batch:
                return
            self._wait_for_turns()
            try:
                vecs = self.embedder.embed([t for _, t in batch], INDEXING, interruptible=True)
            except EmbedInterrupted:
                continue
            except Exception:  # noqa: BLE001
                log.exception("embedding pending document chunks failed")
                return
            self.store.set_vectors([i for i, _ in batch], vecs)

    def _wait_for_turns(self) -> None:
        if not self._turns:
            return
        previous = self._progress["state"]
        self._set(state="paused")
        while self._turns and (self._current is None or not self._current.cancel.is_set()):
            time.sleep(TURN_WAIT_S)
        self._set(state=previous)

    def _set(self, **fields) -> None:
        with self._lock:
            self._progress.update(fields)


def _under(path: str, root: str) -> bool:
    """`path` is `root` or inside it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

