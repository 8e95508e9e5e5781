"""The app's one way to run work off the GUI thread: a `Runner` is a named QThread that runs
callables one at a time, in the order they were given; `on_done` / `on_error` come back on the GUI
thread. The engine is one Runner (it owns the Assistant), the model manager's searches and
downloads run on another, the local API server's control on a third, and the API server's `post` is
the engine Runner's `run`. (Anki's `run_in_background(op, on_done)`; docs/architecture.md, threads.)

Only an int ticket crosses threads in a signal; the Python objects wait in a dict the GUI side
pops. shiboken's conversion of Python containers in queued signals crashed the interpreter at exit
now and then (a refcount error on a bool, `bool_dealloc`); an int needs no such conversion.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable, TypeVar

from PySide6.QtCore import QCoreApplication, QObject, Qt, QThread, Signal, Slot

log = logging.getLogger(__name__)
T = TypeVar("T")
_RUNNING: set[QThread] = set()  # threads of Runners not closed yet: ended at exit, never destroyed running


@atexit.register
def _end_forgotten() -> None:
    """A QThread destroyed while it runs aborts the process: end those a Runner left open (a bug)."""
    for thread in list(_RUNNING):
        log.error("the %r thread was still running at exit", thread.objectName())
        thread.quit()
        thread.wait()


class _Executor(QObject):
    """Lives on the Runner's thread: each `sig_posted` runs the oldest waiting job."""

    sig_posted = Signal()

    def __init__(self, jobs: deque):
        super().__init__()
        self._jobs = jobs
        self.sig_posted.connect(self._run_one, Qt.QueuedConnection)

    @Slot()
    def _run_one(self) -> None:
        self._jobs.popleft()()


class Runner(QObject):
    """A named thread that runs jobs in order; made, used and closed on the GUI thread (`run` and
    `to_gui` from any thread).

    Args:
        name: the thread's name (QThread objectName and Python thread name: logs and ownership
            errors say it).
    """

    _sig_back = Signal(int)  # a ticket: its callback waits in `_back`

    def __init__(self, name: str, parent: QObject | None = None):
        super().__init__(parent)
        self.name = name
        self._jobs: deque[Callable[[], None]] = deque()
        self._back: dict[int, tuple[Callable[..., None], tuple]] = {}
        self._tickets = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = QThread()
        self._thread.setObjectName(name)
        self._executor = _Executor(self._jobs)
        self._executor.moveToThread(self._thread)
        self._sig_back.connect(self._deliver, Qt.QueuedConnection)
        self._thread.start()
        _RUNNING.add(self._thread)
        self.run(self._name_thread)

    @property
    def closed(self) -> bool:
        return self._closed

    def run(self, op: Callable[[], T], on_done: Callable[[T], None] | None = None,
            on_error: Callable[[BaseException], None] | None = None) -> Future:
        """Run `op()` on this thread after what is queued there; returns at once (any thread).
        `on_done(result)` or `on_error(exception)` then runs on the GUI thread; an exception with no
        `on_error` is logged. The Future ends on this thread (for a thread that waits, never the GUI).

        Raises:
            RuntimeError: the Runner has closed.
        """
        future: Future = Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = op()
            except BaseException as exc:  # noqa: BLE001 - handed to on_error / the Future / the log
                future.set_exception(exc)
                if on_error is not None:
                    self.to_gui(on_error, exc)
                else:
                    log.error("job on thread %r failed", self.name, exc_info=exc)
                return
            future.set_result(result)
            if on_done is not None:
                self.to_gui(on_done, result)

        with self._lock:
            if self._closed:
                raise RuntimeError(f"the {self.name!r} thread has closed")
            self._jobs.append(job)
            self._executor.sig_posted.emit()
        return future

    def to_gui(self, fn: Callable[..., None], *args: Any) -> None:
        """Call `fn(*args)` on the GUI thread, after what is already on its way there (any thread)."""
        ticket = next(self._tickets)
        self._back[ticket] = (fn, args)
        try:
            self._sig_back.emit(ticket)
        except RuntimeError:  # the window (and this Runner with it) is gone: nobody to tell
            self._back.pop(ticket, None)

    @Slot(int)
    def _deliver(self, ticket: int) -> None:
        fn, args = self._back.pop(ticket)
        fn(*args)

    def close(self, last: Callable[[], None] | None = None) -> None:
        """Run what is queued, then `last`, and end the thread; waits for it (GUI thread, at exit).
        `run` refuses from here on."""
        if self._closed:
            return
        done = self.run(lambda: self._end(last))
        with self._lock:
            self._closed = True
        done.exception()  # waits; a failure of `last` is in the log
        self._thread.quit()
        self._thread.wait()
        _RUNNING.discard(self._thread)

    def _end(self, last: Callable[[], None] | None) -> None:
        try:
            if last is not None:
                last()
        finally:
            # Back to the GUI thread: deleting a QObject whose thread has finished crashed the
            # interpreter at exit now and then.
            self._executor.moveToThread(QCoreApplication.instance().thread())

    def _name_thread(self) -> None:
        threading.current_thread().name = self.name
