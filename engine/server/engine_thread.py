"""The server's engine thread: the one front-end thread that calls the Assistant, one job at a time,
taking jobs from the fair queue (engine/server/fair_queue.py).

Which thread that is, is pluggable. `assistant serve` has none of its own: jobs run on a thread
named "api-engine". A front-end that already drives the Assistant from a thread of its own (the
window's engine QThread) passes `post`, a function that runs a callable on that thread after what
is queued there and returns at once; then an "api-dispatch" thread takes one job at a time from the
fair queue, posts it and waits for it to end before taking the next. Two threads never drive the
Assistant at once, and the front-end's own work and API jobs take turns. The thread that runs the
jobs owns the Assistant while the server runs (engine/config/ownership.py): "api-engine" takes it over from
the thread that started the server and hands it back at the end; with `post`, the front-end's thread
is its owner. The HTTP side reads only what the Assistant publishes for any thread.

A job's events (Chunk …, TurnDone, or the exception that ended it, then END) cross to the HTTP
event loop with `call_soon_threadsafe`: the loop never waits on the engine and the engine never
waits on a slow reader. A job's `cancel` is the `threading.Event` passed to `Assistant.send`: the
model's thread looks at it between prompt pieces and between tokens.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextlib import closing
from typing import TYPE_CHECKING, Callable, Hashable

import numpy as np

from engine.api import TurnFold, adopt, hand_over, owner_of
from engine.server.errors import EXPECTED
from engine.server.fair_queue import FairQueue, QueueClosed
from engine.server.history import ApiConversations
from engine.server.schema import RequestError, Turn

if TYPE_CHECKING:
    from engine.api import Assistant

log = logging.getLogger(__name__)

END = object()  # a job's last event
JOIN_S = 30.0  # longest close() waits for the running turn to notice its cancel


class Job:
    """One request's work for the engine thread.

    Args:
        client: the fairness key (engine/server/fair_queue.py).
        work: runs on the engine thread: work(assistant, job), emitting events with job.emit; True
            when it is not finished: it goes back to the queue and runs again in its next turn.
        loop: the event loop of the request waiting for the events.
    """

    def __init__(self, client: Hashable, work: Callable[["Assistant", "Job"], bool | None], loop: asyncio.AbstractEventLoop):
        self.client, self.work, self._loop = client, work, loop
        self.cancel = threading.Event()
        self.why: str | None = None  # why it was cancelled: "disconnected" | "timeout" | "shutdown"
        self.started = False  # on the engine thread (False: still in the queue or waiting for `post`'s thread)
        self.events: asyncio.Queue = asyncio.Queue()

    def emit(self, item: object) -> None:
        """Hand an event to the request (any thread)."""
        try:
            self._loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:
            pass  # the loop is gone (server stopped): nobody is listening

    def stop(self, why: str) -> None:
        if self.why is None:
            self.why = why
        self.cancel.set()


def turn_work(turn: Turn, conversations: ApiConversations) -> Callable[["Assistant", Job], None]:
    """A chat/completion job: find or make the conversation the history continues, send the new
    message on it, and note the answered history for the client's next request."""

    def work(assistant: "Assistant", job: Job) -> None:
        cid = conversations.open(assistant, turn.history, turn.domain)
        fold = TurnFold()
        try:
            # A streamed answer cannot be taken back: no cascade re-ask for streams. The memory
            # stays out unless asked (x_memory): an API answer depends on the messages sent, the
            # user's memories do not reach a client unasked, and a client's turns are not kept.
            options = dict(cancel=job.cancel, route=turn.route, cascade=not turn.stream, memory=turn.memory,
                           read_ahead=turn.keep,  # a chat client comes back with this history
                           domain=turn.domain)  # other clients' cached prefixes never serve it
            if turn.history.tool_turn:  # results of the calls it made: the model goes on from them
                items = assistant.send_tool_results(cid, turn.history.results, turn.params, **options)
            else:
                images = [{"digest": assistant.add_image(image.data)["digest"], "at": at}
                          for image, at in turn.history.new_images]
                items = assistant.send(cid, turn.history.text, turn.params, docs=turn.docs, images=images, **options)
            with closing(items):  # an error here stops the model now, not at garbage collection
                for item in items:
                    job.emit(fold.take(item))
        finally:
            final = fold.final
            if (turn.keep and final is not None and not job.cancel.is_set()
                    and final.stats.finish_reason != "cancelled"):
                conversations.answered(assistant, cid, turn.history, final.text, final.message_id, turn.domain,
                                       final.tool_calls)
            else:
                conversations.failed(assistant, cid)

    return work


EMBED_SLICE = 16  # texts embedded per turn on the engine: a few seconds at 256 tokens each on one core
COUNT_SLICE = 256  # texts counted per turn (the tokenizer only: ~1 s of 3 900-character texts)


def embed_work(texts: list[str], max_tokens: int) -> Callable[["Assistant", Job], bool]:
    """An embeddings job in turns: first it counts the tokens the model will read, `COUNT_SLICE`
    texts a turn, and refuses the request once they pass `max_tokens`; then it embeds
    `EMBED_SLICE` texts a turn. Between turns it waits behind the other clients' requests, and
    stops there if its client left or its time ran out; the last turn emits every text's vector,
    one float32 array."""
    counted, tokens = 0, 0
    done: list[np.ndarray] = []

    def work(assistant: "Assistant", job: Job) -> bool:
        nonlocal counted, tokens
        if counted < len(texts):
            tokens += sum(assistant.embedding_tokens(texts[counted:counted + COUNT_SLICE]))
            counted += COUNT_SLICE
            if tokens > max_tokens:
                raise RequestError(f"these inputs come to at least {tokens} tokens (each counted up to the embedding "
                                   f"model's limit); one request may cost at most {max_tokens}: send fewer or shorter "
                                   "inputs per request", "input", code="too_many_tokens")
            return True
        start = EMBED_SLICE * len(done)
        done.append(assistant.embed(texts[start:start + EMBED_SLICE]))
        if start + EMBED_SLICE < len(texts):
            return True
        job.emit(np.concatenate(done))
        return False

    return work


Post = Callable[[Callable[[], None]], None]
"""Runs a callable on a front-end's engine thread, after what is queued there; returns at once.
Raises RuntimeError once that thread no longer takes work."""


class EngineThread:
    """Runs queued jobs on the Assistant, one at a time: on a thread named "api-engine", or with
    `post` on the front-end's engine thread (the module docstring says how).

    Args:
        assistant: the engine the jobs call.
        queue: where requests wait (round-robin across clients).
        conversations: the stateless clients' conversations (touched on the engine thread only).
        post: run a callable on the front-end's engine thread (None: the server's own thread).
    """

    def __init__(self, assistant: "Assistant", queue: FairQueue[Job], conversations: ApiConversations,
                 post: Post | None = None):
        self.assistant, self.queue, self.conversations = assistant, queue, conversations
        self._post = post
        self._previous = None  # the Assistant's owner before the server started
        self.running: Job | None = None  # taken from the queue and not finished (waiting for `post`'s thread too)
        self.jobs_done = 0
        name = "api-engine" if post is None else "api-dispatch"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> "EngineThread":
        """Start taking jobs (on the thread that owns the Assistant, which hands it over to
        "api-engine" until the server ends; with `post` it stays the front-end's)."""
        self._previous = owner_of(self.assistant)
        if self._post is None:
            hand_over(self.assistant, self._thread)
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _on_engine(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the engine thread and wait for it to end."""
        if self._post is None:
            fn()
            return
        finished = threading.Event()

        def call() -> None:
            try:
                fn()
            finally:
                finished.set()

        self._post(call)
        finished.wait()

    def _run(self) -> None:
        try:
            self._on_engine(self._adopt_and_recover)
        except RuntimeError:
            log.exception("the front-end's engine thread refused the API server's start")
        while True:
            job = self.queue.get()
            if job is None:
                break
            self.running = job
            try:
                self._on_engine(lambda: self._execute(job))  # noqa: B023 - called before the next job
            except RuntimeError as exc:  # `post` refused: the front-end's engine has closed
                log.error("API job not run: %s", exc)
                job.emit(QueueClosed(str(exc)))
                job.emit(END)
            finally:
                self.running = None
        try:
            self._on_engine(self._close_conversations)
        except RuntimeError:
            log.error("the API conversations could not be deleted: the front-end's engine has closed")
        if self._post is None:
            hand_over(self.assistant, self._previous)  # its last job is done: back to who started the server

    def _adopt_and_recover(self) -> None:
        if self._post is not None:
            adopt(self.assistant)  # `post` runs on the front-end's engine thread: the one that drives it
        self._recover()

    def _recover(self) -> None:
        try:
            gone = self.conversations.recover(self.assistant)
            if gone:
                log.info("deleted %d API conversations a previous run left behind", gone)
        except Exception:  # noqa: BLE001 - serving matters more than tidying
            log.exception("could not delete leftover API conversations")

    def _execute(self, job: Job) -> None:
        t0 = time.monotonic()
        job.started = True  # before looking at cancel: `shutdown` sets cancel before it reads this
        again = False
        try:
            if job.cancel.is_set():
                return  # its client left (or the server is stopping) while it waited
            again = bool(job.work(self.assistant, job))
        except Exception as exc:  # noqa: BLE001 - handed to the request, which says it in HTTP
            if isinstance(exc, EXPECTED):
                log.info("API request refused: %s", exc)
            else:
                log.exception("API job failed")
            job.emit(exc)
        finally:
            self.queue.record(time.monotonic() - t0)
            if not (again and self._put_back(job)):
                self.jobs_done += 1
                job.emit(END)

    def _put_back(self, job: Job) -> bool:
        """Queue a job that has more to do for its next turn; False when it ends here instead."""
        if job.cancel.is_set():
            return False  # a request that left mid-job (or a timeout) takes no more turns
        try:
            self.queue.put_back(job.client, job)
            return True
        except QueueClosed as exc:
            job.stop("shutdown")
            job.emit(exc)
            return False

    def _close_conversations(self) -> None:
        try:
            self.conversations.close(self.assistant)
        except Exception:  # noqa: BLE001 - the Assistant still closes
            log.exception("could not delete the API conversations at exit")

    def shutdown(self) -> None:
        """Stop accepting jobs, end the waiting ones, cancel the running one (any thread)."""
        for job in self.queue.close():
            job.stop("shutdown")
            job.emit(QueueClosed("the server is shutting down"))
            job.emit(END)
        running = self.running
        if running is not None:
            running.stop("shutdown")
            if not running.started:  # waiting behind the front-end's own work: its request ends now
                running.emit(QueueClosed("the server is shutting down"))
                running.emit(END)

    def join(self, timeout: float = JOIN_S) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()
