"""Loaded models, one inference thread each, a priority queue per model, LRU eviction.

A job is a function run on the model's own thread with exclusive use of its `Backend`; it
streams results back through the job's queue. Foreground (chat) jobs jump ahead of queued
background jobs and ask a running background job to yield (`job.preempt`).
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from engine.inference.backend import Backend, LoadParams
from engine.inference.draft_model import DraftModel
from engine.inference.errors import ModelLoadError
from engine.inference.speculation import Speculation
from engine.models.catalog import ResolvedModel
from engine.inference.templates import ChatTemplate, ChatTemplateError, template_for
from engine.config import threads
from engine.config.ownership import hand_over

log = logging.getLogger(__name__)

FOREGROUND, BACKGROUND = 0, 10
_END = object()
# Builds a model's backend: (path, params, debug=...) -> a Backend or an object with its surface.
BackendFactory = Callable[..., Backend]
# Prompt pieces: Stop, pre-emption and quitting wait at most about one piece.
PIECE_S = 0.15  # seconds of prompt evaluation per piece, at the model's measured speed
MIN_PIECE = 32  # smaller pieces waste more than they save
DEFAULT_PIECE = 128  # before the model's prompt speed is measured
MODEL_NICE = 5  # how much lower than the app's other threads a model thread runs (Linux)


def _smoothed(old: float | None, new: float) -> float:
    """An exponential moving average of a measured speed or cost (the newest reading weighs 0.3)."""
    return new if old is None else 0.7 * old + 0.3 * new


class ModelUnloaded(RuntimeError):
    """The model was closed before this job could run."""


def _yield_cpu_to_the_ui() -> None:
    """Lower this thread's scheduling priority a little (Linux: per-thread nice, inherited by the
    compute threads ggml starts from it). On a laptop's few cores the model's threads otherwise
    take a whole time slice from the window now and then; idle cores make this cost nothing."""
    if not hasattr(os, "setpriority") or not sys.platform.startswith("linux"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + MODEL_NICE))
    except OSError as exc:
        log.debug("model thread keeps its priority: %s", exc)


def _on_a_yielding_thread(fn: Callable[[], Any], name: str) -> Any:
    """fn() on a thread of lower priority, waited for: loading a model (reading, repacking weights
    on every core) then yields the CPU to the window as the model's own thread does."""

    def run() -> Any:
        _yield_cpu_to_the_ui()
        return fn()

    return threads.run(run, name)


class CancelFlag:
    """A job's own stop flag, also raised by the caller's event it was chained to.

    Each job owns its flag: a reader that leaves early stops its job only, never the caller's event
    (a cascade's L2 re-ask shares that event and must not start out cancelled)."""

    def __init__(self, parent: threading.Event | None = None):
        self._own = threading.Event()
        self._parent = parent

    def set(self) -> None:
        self._own.set()

    def is_set(self) -> bool:
        return self._own.is_set() or (self._parent is not None and self._parent.is_set())


class Job:
    """A unit of work for one model's thread; iterate it to receive what it emits."""

    def __init__(self, fn: Callable[["Worker", "Job"], None], priority: int, cancel: threading.Event | None):
        self.fn = fn
        self.priority = priority
        self.cancel = CancelFlag(cancel)
        self.preempt = threading.Event()  # set when a foreground job is waiting behind this one
        self.done = threading.Event()  # set when the job has finished (or failed)
        self.error: BaseException | None = None
        self._out: queue.Queue = queue.Queue()
        self._callbacks: list[Callable[["Job"], None]] = []
        self._callback_lock = threading.Lock()  # a callback added as the job ends runs exactly once

    def emit(self, item: Any) -> None:
        self._out.put(item)

    def add_done_callback(self, fn: Callable[["Job"], None]) -> None:
        """Call `fn(job)` once the job has finished, failed or was dropped unrun (on the thread that
        finished it), or now if it already has."""
        with self._callback_lock:
            if not self.done.is_set():
                self._callbacks.append(fn)
                return
        self._call(fn)

    def _finish(self, error: BaseException | None = None) -> None:
        self.error = error
        if error is not None:
            self._out.put(error)
        self._out.put(_END)
        with self._callback_lock:
            self.done.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._call(fn)

    def _call(self, fn: Callable[["Job"], None]) -> None:
        try:
            fn(self)
        except Exception:  # noqa: BLE001 - a callback must not stop the model's thread
            log.exception("job callback failed")

    def __iter__(self) -> Iterator[Any]:
        try:
            while True:
                item = self._out.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not self.done.is_set():
                # The reader left early (an error on its side, a closed generator): nobody will
                # read what the model writes next, so stop it rather than decode to max_tokens
                # while the next turn waits behind it.
                self.cancel.set()


@dataclass(frozen=True)
class ContextView:
    """What a model's context holds, published by its own thread after each job: others read
    this, never the context itself (it may be closing)."""

    identity: str
    n_ctx: int
    kv_tokens: tuple[int, ...]
    conversation_id: int | None = None


@dataclass
class Worker:
    """One loaded model: its backend, chat template and inference thread.

    The backend belongs to the model's thread (engine/config/ownership.py): only jobs touch it. Other
    threads read `view` (what the context holds, published after each job), the backend's plain
    facts (identity, n_ctx, params), and tokenize with `vocab`, the vocabulary alone."""

    model: ResolvedModel
    backend: Backend
    template: ChatTemplate

    def __post_init__(self):
        self._queue: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self.current: Job | None = None
        self.pending = 0
        self.pending_foreground = 0  # of `pending`: chat jobs
        self.last_used = time.monotonic()
        self.prompt_tps: float | None = None  # measured, smoothed: prices a cache miss for the router
        self.call_s: float | None = None  # fixed cost of one decode call (a decode step), smoothed
        self.token_s: float | None = None  # prompt cost per token beyond that, smoothed
        self._closed = False
        self.plan = None  # the planner's Plan this model was loaded with, when planned
        self.plan_error: dict = {}  # plan vs llama.cpp's allocation, relative, by kind
        self.load_note: str | None = None  # why this load did not get the GPU it asked for
        # Run on the model's own thread after the last job, before the backend is freed (the KV
        # tiers keep the context's conversation state).
        self.before_close: Callable[["Worker"], None] | None = None
        self.view = ContextView(self.backend.identity, self.backend.n_ctx, ())
        # Speculative decoding's measured costs and per-chat tuners (engine/inference/speculation.py),
        # and a draft model where the catalog pairs one (its backend is this thread's too).
        self.speculation = Speculation()
        self.draft: DraftModel | None = None
        self.draft_note = "no draft model is paired with this model"  # why `draft` is None
        self.vocab = self.backend.vocab  # any thread: a tokenizer of its own, not the context's
        self._thread = threading.Thread(target=self._run, name=f"model:{self.model.id}", daemon=True)
        hand_over(self.backend, self._thread)  # from here on only jobs touch it
        threads.start(self._thread)  # it parses grammars: a stack of known size (engine/config/threads.py)

    @classmethod
    def load(cls, model: ResolvedModel, params: LoadParams, debug: bool = False,
             backend_factory: BackendFactory | None = None) -> "Worker":
        """Load `model` with `params` and start its thread.

        Args:
            backend_factory: builds the backend instead of `Backend(path, params, debug=debug)`
                (tests: a scripted pure-Python backend with the same surface).

        Raises:
            ModelLoadError: the file or its chat template cannot be used.
        """
        caller = threading.current_thread()

        def build() -> Backend:
            backend = (backend_factory or Backend)(model.path, params, debug=debug)
            if model.projector is not None:
                try:  # a projector that does not fit leaves the model its words, and says why in the log
                    backend.load_projector(model.projector)
                except ModelLoadError as exc:
                    log.warning("%s", exc)
            hand_over(backend, caller)  # the loader is done with it; the caller reads its template
            return backend

        backend = _on_a_yielding_thread(build, f"load:{model.id}")
        hint = model.entry.chat_template if model.entry else "gguf"
        try:
            template = template_for(backend, hint, model.entry.reasoning if model.entry else None)
            # The GGUF's template is untrusted input: one that cannot render a plain exchange makes
            # the model unusable, said once at load (the turn falls back to another tier) rather than
            # on every turn.
            template.render(["user", "assistant", "user"], add_generation_prompt=True)
        except ChatTemplateError as exc:
            backend.close()
            raise ModelLoadError(f"{model.path.name} cannot be used: {exc}") from exc
        return cls(model, backend, template)

    @property
    def busy(self) -> bool:
        """Any job runs or waits here, background work included."""
        return self.current is not None or self.pending > 0

    @property
    def serving(self) -> bool:
        """A chat job runs or waits here. Background work alone (a KV checkpoint, a summary) does
        not keep a model loaded when another must take its memory: unloading parks the chat's state
        in the warm tier anyway, and a dropped summary is asked for again by a later turn."""
        running = self.current
        return (running is not None and running.priority <= FOREGROUND) or self.pending_foreground > 0

    def submit(self, fn: Callable[["Worker", Job], None], priority: int = FOREGROUND,
               cancel: threading.Event | None = None) -> Job:
        job = Job(fn, priority, cancel)
        with self._lock:
            if self._closed:
                raise ModelUnloaded(f"model {self.model.id} is unloaded")
            running = self.current
            if priority == FOREGROUND and running is not None and running.priority > FOREGROUND:
                running.preempt.set()
            self.pending += 1
            self.pending_foreground += priority <= FOREGROUND
            self._queue.put((priority, next(self._seq), job))
        self.last_used = time.monotonic()
        return job

    def prefill_piece(self) -> int:
        """Prompt tokens per decode call: as many as take about PIECE_S (Stop and pre-emption act
        between pieces), at least MIN_PIECE, at most n_batch.

        A call costs a fixed part (one decode step: launching a GPU's kernels, syncing) plus a part
        per token. Where the fixed part alone is near PIECE_S (a software or small integrated GPU),
        small pieces would only multiply it: a piece may then take twice the fixed part, since no
        Stop can be quicker than one call anyway.

        Where the backend can abort a decode midway (llama.cpp's CPU backend), Stop needs no small
        pieces: a prompt goes in n_batch at a time, as bare llama.cpp reads it. Pieces sized by
        time cost a fixed part per call, which at 1.5B on two cores took a re-evaluation from 134
        to 93 tok/s (issue 25)."""
        n_batch = self.backend.params.n_batch
        if getattr(self.backend, "abortable", False):
            return n_batch
        if self.prompt_tps is None:
            return min(n_batch, DEFAULT_PIECE)
        if self.call_s is None or self.token_s is None:
            return max(MIN_PIECE, min(n_batch, int(self.prompt_tps * PIECE_S)))
        target = max(PIECE_S, 2 * self.call_s)
        return max(MIN_PIECE, min(n_batch, int((target - self.call_s) / self.token_s)))

    def note_prompt_speed(self, tokens: int, seconds: float, piece: int | None = None,
                          decode_tps: float | None = None) -> None:
        """Record a turn's prompt evaluation (`tokens` in `seconds`, in pieces of `piece`) and its
        decoding speed, which gives the fixed cost of one call."""
        if decode_tps and decode_tps > 0:
            self.call_s = _smoothed(self.call_s, 1 / decode_tps)
        if tokens >= 16 and seconds > 0:  # tiny batches say little about prompt throughput
            self.prompt_tps = _smoothed(self.prompt_tps, tokens / seconds)
            if piece and self.call_s is not None:
                calls = -(-tokens // piece)
                self.token_s = _smoothed(self.token_s, max(seconds - calls * self.call_s, 0.1 * seconds) / tokens)

    @property
    def offload(self) -> dict:
        """Where this model's layers are (the backend's report) and why not where the plan put
        them (`note`): done.stats.offload and the status's per-model entry."""
        return dict(getattr(self.backend, "offload", None) or {}) | {"note": self.load_note}

    def _run(self) -> None:
        _yield_cpu_to_the_ui()
        while True:
            _, _, job = self._queue.get()
            if job is None:
                if self.before_close is not None:
                    try:
                        self.before_close(self)
                    except Exception:  # noqa: BLE001 - unloading must go on
                        log.exception("before-close hook of %s failed", self.model.id)
                if self.draft is not None:
                    try:
                        self.draft.close()  # beside its target, on the same thread
                    except Exception:  # noqa: BLE001 - the target is closed either way
                        log.exception("closing the draft model of %s failed", self.model.id)
                try:
                    self.backend.close()  # freed by its owner, after its last job
                except Exception:  # noqa: BLE001 - the thread ends either way
                    log.exception("closing %s failed", self.model.id)
                return
            with self._lock:
                self.pending -= 1
                self.pending_foreground -= job.priority <= FOREGROUND
                self.current = job
            try:
                job.fn(self, job)
                job._finish()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller, who reports it
                log.debug("job on %s failed: %s", self.model.id, exc)
                job._finish(exc)
            finally:
                self.publish()
                with self._lock:
                    self.current = None
                self.last_used = time.monotonic()

    def publish(self, conversation_id: int | None = None) -> None:
        """Publish what the context holds now (model thread only); `conversation_id` names whose
        tokens they are, when the caller knows (else the last one named)."""
        b = self.backend
        cid = conversation_id if conversation_id is not None else self.view.conversation_id
        self.view = ContextView(b.identity, b.n_ctx, tuple(b.kv_tokens), cid)

    def close(self) -> None:
        """Stop the running job within one prompt piece or token; pending jobs fail with
        ModelUnloaded; returns once the model's thread has freed the model and ended."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.current is not None:
                self.current.cancel.set()
            drained = []
            while True:
                try:
                    drained.append(self._queue.get_nowait()[2])
                except queue.Empty:
                    break
            self.pending = self.pending_foreground = 0
            self._queue.put((-1, -1, None))
        for job in drained:
            if job is not None:
                job._finish(ModelUnloaded(f"model {self.model.id} was unloaded"))
        self._thread.join()
        log.info("unloaded %s", self.model.id)
