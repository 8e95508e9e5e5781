"""The summary chain: older turns folded into a short running summary by a local model.

Summaries are background jobs on a loaded model's thread. A foreground chat request pre-empts
one (it stops and is queued again behind the chat), and the job borrows the context by saving
and restoring the foreground conversation's KV sequence, so the next chat turn still evaluates
only its new tokens.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from engine.inference.backend import SamplingParams
from engine.inference.events import GenerateParams, TurnResult
from engine.inference.generate import generate
from engine.inference.runtime import BACKGROUND, Job, ModelUnloaded, Worker
from engine.chat.session import Message, Session
from engine.storage import Database

log = logging.getLogger(__name__)

SUMMARY_EVERY_TURNS = 5
SUMMARY_CHARS = 200
KEEP_RECENT_TURNS = 2  # the newest turns are still in the window: not summarised yet
MAX_PREEMPTIONS = 2  # then a summary runs to the end: the chain must keep up under steady use
_PARAMS = GenerateParams(SamplingParams(temperature=0.0, repeat_penalty=1.1, seed=0), max_tokens=96)


@dataclass
class SummaryTask:
    conversation_id: int
    previous: dict | None  # the chain's newest row, folded into the new summary
    messages: list[Message]  # turns not covered yet, oldest first (all with database ids)


def pending_task(db: Database, conversation_id: int, messages: list[Message],
                 every: int = SUMMARY_EVERY_TURNS) -> SummaryTask | None:
    """The next summary to write, if at least `every` turns are uncovered beyond the recent ones."""
    chain = db.summaries(conversation_id)
    previous = chain[-1] if chain else None
    covered = previous["last_message_id"] if previous else 0
    todo = [m for m in messages if m.id is not None and m.id > covered and m.role in ("user", "assistant")]
    users = [i for i, m in enumerate(todo) if m.role == "user"]
    if len(users) < every + KEEP_RECENT_TURNS:
        return None
    cut = users[len(users) - KEEP_RECENT_TURNS]  # leave the newest turns out
    return SummaryTask(conversation_id, previous, todo[:cut])


def summary_messages(task: SummaryTask, max_chars: int = SUMMARY_CHARS) -> list[Message]:
    lines = [f"{'User' if m.role == 'user' else 'Assistant'}: {m.content.strip()[:600]}" for m in task.messages]
    prior = f"Summary so far: {task.previous['text']}\n\n" if task.previous else ""
    ask = (f"{prior}Conversation to add:\n" + "\n".join(lines)
           + f"\n\nWrite one updated summary of the whole conversation in at most {max_chars} characters.")
    return [Message("system", "You summarise conversations briefly and factually."), Message("user", ask)]


class SummaryHandle:
    """Tracks one summary across pre-emptions: `done` is set once it is written, has failed, or its
    model was unloaded before it could run."""

    def __init__(self):
        self.done = threading.Event()
        self.summary_id: int | None = None
        self.preemptions = 0
        self.urgent = threading.Event()  # a turn waits for it: it no longer yields to chat requests


def submit_summary(worker: Worker, db: Database, task: SummaryTask, max_chars: int = SUMMARY_CHARS) -> SummaryHandle:
    """Queue a background summary on `worker`.

    A chat request pre-empts it (within one prompt piece or token) and it queues itself again,
    going on from what it had read, but only MAX_PREEMPTIONS times: after that it runs to the end,
    so the chain keeps up under steady use at the cost of one delayed turn (delayed by what was
    left to read). `handle.urgent` makes it run to the end at once.
    """
    handle = SummaryHandle()
    preempted = threading.Event()  # the last run yielded to a chat request
    # What a pre-empted run had read of the summary prompt (its KV sequence): the next run goes on
    # from there, so pre-emptions cost no work twice and the run that no longer yields has only
    # the rest to do (a 1 000-token history took ~7 s to read from scratch on demo-small).
    progress = None

    def run(w: Worker, job: Job) -> None:
        nonlocal progress
        preempted.clear()
        saved = w.backend.save_sequence()  # the foreground conversation's KV: borrowed, then returned
        result = None
        try:
            prompt = Session(w.backend, w.template, summary_messages(task, max_chars)).prompt()
            resume, progress = progress, None
            if resume is not None and not w.backend.restore_sequence(resume):
                w.backend.reset()  # refused: read it from the start
            for item in generate(w.backend, prompt, _PARAMS, _StopWhen(job, handle), w.prefill_piece()):
                if isinstance(item, TurnResult):
                    result = item
            if (result is None or result.stats.finish_reason == "cancelled") and not job.cancel.is_set():
                progress = w.backend.save_sequence()
        finally:
            if not w.backend.restore_sequence(saved):
                log.warning("could not restore the KV sequence after a summary; the next turn re-evaluates")
        if result is None or result.stats.finish_reason == "cancelled":
            if not job.cancel.is_set():  # pre-empted, not stopped by quitting or unloading
                handle.preemptions += 1
                preempted.set()
                log.info("summary of conversation %d pre-empted (%d); queued again", task.conversation_id,
                         handle.preemptions)
            return
        text = result.text.strip()[: max_chars * 2] or "(empty summary)"
        handle.summary_id = db.add_summary(task.conversation_id, task.messages[0].stored_id, task.messages[-1].stored_id,
                                           text, model=w.model.id,
                                           previous_id=task.previous["id"] if task.previous else None)

    def on_done(job: Job) -> None:
        if preempted.is_set() and job.error is None:
            try:
                worker.submit(run, BACKGROUND).add_done_callback(on_done)
                return
            except ModelUnloaded:
                pass
        handle.done.set()  # written, failed, or dropped with its model: never leave a waiter hanging

    worker.submit(run, BACKGROUND).add_done_callback(on_done)
    return handle


class _StopWhen:
    """A summary stops when told to (quit, unload) or, while it still yields, when a chat request
    waits behind it (pre-emption). Past MAX_PREEMPTIONS, or once a turn waits for it, it no
    longer yields."""

    def __init__(self, job: Job, handle: SummaryHandle):
        self.job, self.handle = job, handle

    def is_set(self) -> bool:
        if self.job.cancel.is_set():
            return True
        yielding = self.handle.preemptions < MAX_PREEMPTIONS and not self.handle.urgent.is_set()
        return yielding and self.job.preempt.is_set()
