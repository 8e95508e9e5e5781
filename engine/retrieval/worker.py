"""The indexing thread of an index: queued jobs in order, and the idle work between them.

The memory (`memory-indexer`: store a finished message's chunks) and the documents
(`docs-indexer`: scan, parse and write folders) each run one. Both embed, while no job waits,
the chunks that were written without a vector (the embedder was loading or failed).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)

_STOP = object()


class IndexWorker:
    """One daemon thread running `run_job(job)` for each job `put`, in order.

    After every job, and every `idle_s` while none comes, it calls `idle()` when the index may
    hold chunks without a vector (`dirty`: at start, and after every job); `idle` returns True
    when none is left. `stop` queues its stop behind the jobs already queued, so they run first.

    Args:
        name: the thread's name.
        run_job: runs one job (its exceptions are logged; the thread goes on).
        idle: embeds what waits for a vector; True when nothing does (or may: it is called again).
        idle_s: how long the thread waits for a job before it calls `idle` again.
        startup: run once on the thread before the first job (housekeeping off the start path).
    """

    def __init__(self, name: str, run_job: Callable[[Any], None], idle: Callable[[], bool], *,
                 idle_s: float, startup: Callable[[], None] | None = None):
        self.name, self.idle_s = name, idle_s
        self._run_job, self._idle, self._startup = run_job, idle, startup
        self._jobs: queue.Queue = queue.Queue()
        self.cond = threading.Condition()  # guards outstanding and dirty; notified after every round
        self.outstanding = 0  # jobs put and not yet finished
        self.dirty = True     # there may be chunks without a vector (also from earlier runs)
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def put(self, job) -> None:
        with self.cond:
            self.outstanding += 1
            self.dirty = True
        self._jobs.put(job)

    def waiting(self) -> bool:
        """A job is queued: idle work should give way to it."""
        return not self._jobs.empty()

    def stop(self, timeout: float) -> None:
        """Run the jobs queued so far, then end the thread (waiting at most `timeout` s)."""
        if self._thread is not None:
            self._jobs.put(_STOP)
            self._thread.join(timeout)
            self._thread = None

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until `predicate()` (called under `cond`) holds; its last value."""
        with self.cond:
            return self.cond.wait_for(predicate, timeout)

    def _run(self) -> None:
        if self._startup is not None:
            self._startup()
        while True:
            try:
                job = self._jobs.get(timeout=self.idle_s)
            except queue.Empty:
                job = None
            if job is _STOP:
                break
            try:
                if job is not None:
                    with self.cond:
                        self.dirty = True  # again: the last idle round may have run before this job
                    self._run_job(job)
                if self.dirty and self._idle():
                    with self.cond:
                        self.dirty = False  # a job put meanwhile sets it again when it is taken
            except Exception:  # noqa: BLE001 - the thread must outlive one bad job
                log.exception("%s: a job failed", self.name)
            finally:
                with self.cond:
                    if job is not None:
                        self.outstanding -= 1
                    self.cond.notify_all()
