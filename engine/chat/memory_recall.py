"""The memory's part in a turn: pinned facts, recalled memories inside the new user turn, "remember
that …", and indexing the finished turn (engine/memory does the storing and searching)."""

from __future__ import annotations

import logging
from typing import Callable

from engine.chat.conversation import Conversation, StableBlock
from engine.chat.session import Message
from engine.memory.prompt import Recall, fit_recalled, pinned_facts
from engine.memory.relevance import is_small_talk, worth_recalling
from engine.memory.service import MemoryInputError, MemoryService
from engine.retrieval.fusion import Hits
from engine.retrieval.terms import is_mostly_cjk

log = logging.getLogger(__name__)

# Candidates asked of the search before the relevance floor: its fused rank can put a strong
# meaning match (vector rank 2) below a dozen weak keyword matches. Measured at 100 000 chunks
# (numpy path): 22.6 ms p50 against 17.3 ms for k = 3 (docs/memory.md).
RECALL_POOL = 40


class MemoryRecall:
    """Args:
        memory: the vector memory, or None (turns use none).
        count: tokens of a text for the L1 vocabulary (the retrieval budget's unit).
    """

    def __init__(self, *, memory: MemoryService | None, count: Callable[[str], int]):
        self.memory, self.count = memory, count

    def pinned(self) -> tuple[str, ...]:
        if self.memory is None:
            return ()
        return tuple(pinned_facts([row.text for row in self.memory.pinned()]))

    def recall(self, conv: Conversation, text: str, k: int, budget: int) -> Recall | None:
        """Memories for this message that earn their tokens (engine/memory/relevance.py): none for
        small talk; above the floor; not what the window (as the model read it), the summary or
        the pinned facts already hold; at most `k`, trimmed by rank to `budget` tokens."""
        if self.memory is None:
            return None
        if is_small_talk(text):
            return Recall(status="skipped: small talk")
        start = min(conv.first_kept.values(), default=0)
        shown = conv.messages[start:]
        texts = [conv.system_prompt] + [m.model_text or m.content for m in shown]
        for block in conv.stable.values():
            texts += [*block.pinned, block.summary or ""]
        try:
            found = self.memory.search(text, RECALL_POOL, exclude_texts=texts,
                                       exclude_message_ids=[m.id for m in shown if m.id is not None])
            if found.status != "ok":
                return Recall(status=found.status)
            hits, dropped = worth_recalling(found, k, *self.memory.thresholds(text), is_mostly_cjk(text), texts)
            kept, tokens = fit_recalled(hits, budget, self.count, text)
        except Exception as exc:  # noqa: BLE001 - memory is an aid: the turn goes on without it
            log.exception("memory retrieval failed")
            return Recall(status=f"skipped: retrieval failed ({type(exc).__name__})")
        dropped["over_budget"] = len(hits) - len(kept)
        return Recall(kept, tokens=tokens, dropped={why: n for why, n in dropped.items() if n})

    def remember(self, conversation_id: int, user: Message, fact: str) -> dict:
        """Pin the fact of a "remember that …" message, citing the stored message."""
        if self.memory is None:
            return {"error": "the memory is off"}
        try:
            memory_id = self.memory.add(fact, pin=True, source={"conversation_id": conversation_id,
                                                                "message_id": user.id})
            return {"id": memory_id, "text": fact}
        except MemoryInputError as exc:
            return {"error": str(exc)}

    def forget_message(self, message_id: int) -> None:
        if self.memory is not None:
            self.memory.forget_message(message_id)

    def index(self, conv: Conversation, user: Message) -> None:
        """Queue the turn's user message and the answer that stands for the memory index (the
        memory's thread chunks and embeds them; this returns at once)."""
        if self.memory is None or user.id is None:
            return
        try:
            at = conv.messages.index(user)
        except ValueError:
            return
        for m in conv.messages[at:at + 2]:
            if m.id is not None and (m is user or m.role == "assistant"):
                try:
                    self.memory.index_message(conv.id, m.id, m.role, m.content)
                except MemoryInputError as exc:
                    log.warning("message %s not indexed: %s", m.id, exc)

    def note(self, recall: Hits | None, remembered: dict | None, block: StableBlock) -> dict:
        """What the memory did for this turn (for `done.stats.memory`)."""
        if self.memory is None:
            return {"retrieval": "off"}
        return {"retrieval": recall.status if recall is not None else "off",
                "recall_dropped": getattr(recall, "dropped", {}),
                "pinned_in_prompt": len(block.pinned), "remembered": remembered}


def memories_used(recall: Hits | None) -> list[dict]:
    """The retrieved memories the model read, with their sources (for citing them)."""
    if not recall or recall.status != "ok":
        return []
    return [{"id": h.id, "kind": h.kind, "score": h.score, "source": h.source, "text": h.text[:300]}
            for h in recall]
