"""What the documents' indexing thread does: one `add`/`rescan` job at a time (walk, hash, parse,
chunk, embed, write), and, while idle, vectors for chunks written without them.

It yields to chat turns between files and between embedding batches (`turn()`); every file is
written whole in one transaction, so a killed indexer leaves no half-indexed file, and a root
whose scan never finished is scanned again at the next start.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from engine.docs.chunks import chunks as cut
from engine.docs.parse import READ_ERROR, UNREADABLE, VANISHED, Skip, parse
from engine.docs.scan import Found, sha256_of, walk
from engine.docs.store import DocStore
from engine.memory.embedder import INDEXING, EmbedInterrupted, Embedder
from engine.storage import now

log = logging.getLogger(__name__)

CHUNK_CHARS = 500      # MiniLM reads ~256 word pieces: ~500 Latin characters (a CJK one counts 2)
CHUNK_OVERLAP = 80
EMBED_BATCH = 16       # at most; the batch shrinks to last ~EMBED_BATCH_S (see _tune_batch)
EMBED_BATCH_S = 0.15
TURN_WAIT_S = 0.05     # how often a paused indexer looks whether the turn has finished
# Skips worth another try with the same size and mtime: permissions change without touching mtime.
RETRY = frozenset({UNREADABLE, VANISHED, READ_ERROR})


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
class Job:
    paths: list[str]
    collection: str | None  # None: a rescan keeps each root's collection
    future: Future
    cancel: threading.Event


def under(path: str, root: str) -> bool:
    """`path` is `root` or inside it."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class Indexer:
    """Runs the documents' jobs (on the `docs-indexer` thread, or inline without one).

    Args:
        store: the documents' index.
        embedder: shared with the memory; batches are sent at indexing priority and stop when a
            chat turn begins.
        code, max_file_bytes: what is indexed (`DocumentService`'s settings).
        roots_changed: called after a job added a root (the folder watcher follows it).
    """

    def __init__(self, store: DocStore, embedder: Embedder, *, code: bool, max_file_bytes: int,
                 roots_changed: Callable[[], None]):
        self.store, self.embedder, self.code, self.max_file_bytes = store, embedder, code, max_file_bytes
        self.roots_changed = roots_changed
        self._turns = 0                 # chat turns running: the indexer waits for them
        self._batch = 4                 # chunks per embedding request, tuned as they are timed
        self._waiting: list[Job] = []   # jobs queued or running (cancel reaches every one)
        self._current: Job | None = None
        self._lock = threading.Lock()
        self._progress = {"state": "idle", "files_done": 0, "files_total": 0, "chunks": 0,
                          "rate_chunks_s": 0.0, "current": None, "queued": 0}

    # ---- what the service asks (any thread)
    @contextmanager
    def turn(self):
        """Held while a chat turn runs: see `DocumentService.turn`."""
        with self._lock:
            self._turns += 1
        self.embedder.interrupt()
        try:
            yield
        finally:
            with self._lock:
                self._turns -= 1

    def accept(self, job: Job) -> None:
        """A job queued: counted in the progress, reached by `cancel`."""
        with self._lock:
            self._progress["queued"] += 1
            self._waiting.append(job)

    def cancel(self, running_only: bool = False) -> None:
        """Stop the running job after the file it is writing, and (unless `running_only`) every
        queued one: each is answered at once when its turn comes, cancelled before it began."""
        with self._lock:
            jobs = [self._current] if running_only else list(self._waiting)
        for job in jobs:
            if job is not None:
                job.cancel.set()

    def progress(self) -> dict:
        with self._lock:
            return dict(self._progress)

    def _set(self, **fields) -> None:
        with self._lock:
            self._progress.update(fields)

    # ---- on the indexing thread
    def run(self, job: Job) -> None:
        """One job, its report (or error) in its future."""
        if job.future.done():
            return
        self._current = job
        try:
            job.future.set_result(self._index(job))
        except BaseException as exc:  # noqa: BLE001 - the caller gets it through the future
            log.exception("indexing %s failed", job.paths)
            job.future.set_exception(exc)
        finally:
            self._current = None
            with self._lock:
                if job in self._waiting:
                    self._waiting.remove(job)
                self._progress.update(state="idle", current=None, queued=max(0, self._progress["queued"] - 1))

    def _index(self, job: Job) -> AddReport:
        started = time.monotonic()
        report = AddReport()
        if job.cancel.is_set():  # cancelled while queued: nothing added, nothing scanned
            report.cancelled = True
            return report
        self._set(state="scanning", files_done=0, files_total=0, chunks=0, rate_chunks_s=0.0, current=None)
        plan, scans = self._scan(job, report)
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
            self.store.mark_scanned(root_id, None if report.cancelled else now(), stopped=report.cancelled)
        self._set(files_done=len(plan) if not report.cancelled else self._progress["files_done"])
        report.seconds = time.monotonic() - started
        return report

    def _scan(self, job: Job, report: AddReport) -> tuple[list[tuple[int, Found]], list[tuple[int, dict, set[str]]]]:
        """Walk the job's paths (adding the new roots): ([(root id, file found)], [(root id,
        {path: stored file}, paths found)])."""
        plan: list[tuple[int, Found]] = []
        scans: list[tuple[int, dict, set[str]]] = []
        known = {r["path"]: r for r in self.store.roots()}
        for path in job.paths:
            if job.cancel.is_set():
                report.cancelled = True
                break
            root = known.get(path) or next((r for r in known.values() if under(path, r["path"])), None)
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
                self.roots_changed()
                known = {r["path"]: r for r in self.store.roots()}
                root = known[path]
            found, problems = walk(Path(path), code=self.code, within=Path(root["path"]))
            report.skipped += [{"path": p, "reason": why} for p, why in problems if p != path or os.path.lexists(p)]
            stored = {f["path"]: f for f in self.store.files(root_id=root["id"])}
            if root["path"] != path:  # a file or sub-folder of an added root: only that part
                stored = {p: f for p, f in stored.items() if under(p, path)}
            plan += [(root["id"], f) for f in found]
            scans.append((root["id"], stored, {f.path for f in found}))
        return plan, scans

    def _adopt_children(self, root_id: int, path: str) -> None:
        """A folder added above earlier roots takes their files over (and they stop being roots)."""
        for r in self.store.roots():
            if r["id"] != root_id and under(r["path"], path):
                with self.store.transaction() as conn:
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

    def embed_pending(self, job_waiting: Callable[[], bool]) -> bool:
        """While idle: vectors for chunks written without them; True when none is left."""
        while not job_waiting():
            batch = self.store.pending(self._batch)
            if not batch:
                return True
            if not self.embedder.ready:
                return False
            self._wait_for_turns()
            try:
                vecs = self.embedder.embed([t for _, t in batch], INDEXING, interruptible=True)
            except EmbedInterrupted:
                continue
            except Exception:  # noqa: BLE001
                log.exception("embedding pending document chunks failed")
                return False
            self.store.set_vectors([i for i, _ in batch], vecs)
        return False

    def _wait_for_turns(self) -> None:
        if not self._turns:
            return
        previous = self._progress["state"]
        self._set(state="paused")
        while self._turns and (self._current is None or not self._current.cancel.is_set()):
            time.sleep(TURN_WAIT_S)
        self._set(state=previous)
