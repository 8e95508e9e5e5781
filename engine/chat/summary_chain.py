"""The summary chain: background summaries of older turns on the L1 model, and the wait for one
when those turns are about to leave the window (engine/chat/summaries.py does the summarising)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from engine.chat.conversation import Conversation
from engine.chat.summaries import SummaryHandle, pending_task, submit_summary
from engine.chat.targets import InputError
from engine.inference.runtime import Worker
from engine.storage import Database, clean_text

log = logging.getLogger(__name__)

MAX_SUMMARY_CHARS = 2_000  # a user-edited summary rides in every prompt of its conversation
SUMMARY_CATCH_UP_S = 60.0  # longest a turn waits for the summary of the turns leaving its window
CATCH_UP_POLL_S = 0.05  # how often that wait looks at Stop


class SummaryChain:
    """Args:
        db: where summaries are stored.
        worker: the L1 model's worker, looked up when a summary is due (it may have been reloaded).
    """

    def __init__(self, *, db: Database, worker: Callable[[], Worker]):
        self.db, self._worker = db, worker
        self.jobs: dict[int, SummaryHandle] = {}

    def maybe_summarize(self, conv: Conversation, every: int) -> None:
        """Queue a background summary on the L1 model when `every` turns are uncovered (0: off)."""
        if not every:
            return
        running = self.jobs.get(conv.id)
        if running is not None and not running.done.is_set():
            return
        task = pending_task(self.db, conv.id, conv.messages, every)
        if task is not None:
            self.jobs[conv.id] = submit_summary(self._worker(), self.db, task)

    def catch_up(self, conv: Conversation, every: int, timeout: float = SUMMARY_CATCH_UP_S,
                 cancel: threading.Event | None = None) -> None:
        """Older turns are leaving the window: let the summary covering them finish first (it
        stops yielding to chat requests), queuing it if it is due. Waits at most `timeout`, and
        not at all once `cancel` is set (Stop)."""
        self.maybe_summarize(conv, every)
        handle = self.jobs.get(conv.id)
        if handle is None or handle.done.is_set():
            return
        handle.urgent.set()
        deadline = time.monotonic() + timeout
        while not handle.done.wait(CATCH_UP_POLL_S):
            if cancel is not None and cancel.is_set():
                handle.urgent.clear()  # nobody waits for it now: it yields to chat requests again
                return
            if time.monotonic() > deadline:
                log.warning("summary of conversation %d not ready after %.0f s; the window moves without it",
                            conv.id, timeout)
                return

    def latest(self, conversation_id: int) -> str | None:
        chain = self.db.summaries(conversation_id)
        return chain[-1]["text"] if chain else None

    def wait(self, timeout: float | None = None) -> None:
        for job in list(self.jobs.values()):
            job.done.wait(timeout)

    def forget(self, conversation_id: int) -> None:
        self.jobs.pop(conversation_id, None)  # a summary still running finds its rows gone

    def edit(self, summary_id: int, text: str) -> None:
        """Replace a summary with the user's text (it rides in the prompt from the next shift point).

        Raises:
            InputError: empty or longer than MAX_SUMMARY_CHARS.
            LookupError: no summary has this id.
        """
        text = clean_text(text).strip()
        if not text:
            raise InputError("empty summary")
        if len(text) > MAX_SUMMARY_CHARS:
            raise InputError(f"summary too long ({len(text)} characters; at most {MAX_SUMMARY_CHARS}): "
                             "it goes into every prompt of the conversation")
        if not self.db.edit_summary(summary_id, text):
            raise LookupError(f"no summary with id {summary_id}")
