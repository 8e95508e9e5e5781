"""After the answer (it acts on the way out, once every stage inside it has returned): the
answer is handed to the front-end, then the background work it leaves — the next summary when one
is due, and the turn queued for the memory index (even when the turn ended early: what was stored
is indexed)."""

from __future__ import annotations

from engine.chat.memory_recall import MemoryRecall
from engine.chat.pipeline import Events, Rest
from engine.chat.summary_chain import SummaryChain
from engine.chat.turn import Turn


class After:
    name = "after"

    def __init__(self, *, memory: MemoryRecall, summaries: SummaryChain):
        self.memory, self.summaries = memory, summaries

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        regenerate = turn.request.kind == "regenerate"
        old = turn.supersedes.message_id if regenerate and turn.supersedes else None
        try:
            done = yield from rest(turn)
            if done is None:
                return None
            yield done
            if turn.memory and not regenerate:
                self.summaries.maybe_summarize(turn.conv, turn.config.summary_every)
            return done
        finally:
            messages = turn.conv.messages
            if old is not None and messages and messages[-1].id != old:
                # The new answer stands in the memory for the old one and the turns after it.
                for gone in (old, *turn.request.replaces):
                    self.memory.forget_message(gone)
            if turn.memory or regenerate:
                self.memory.index(turn.conv, turn.user)
