"""Recall: the user's documents and memories for this message, under one retrieval budget.

Excerpts and memories go inside the new user turn, after the cached prefix: memories first take
at most half the budget when excerpts are waiting, then the excerpts get what is left and go
ahead of them. A regenerated answer reads the stored user turn again, with the same sources.
"""

from __future__ import annotations

from dataclasses import replace

from engine.chat.doc_recall import DocumentRecall
from engine.chat.memory_recall import MemoryRecall
from engine.chat.pipeline import Events, Rest
from engine.chat.tier_set import TierSet
from engine.chat.turn import Recalled, Turn
from engine.retrieval.fusion import Hits
from engine.memory.prompt import recalled_turn
from engine.memory.remember import parse_remember


class Recall:
    name = "recall"

    def __init__(self, *, memory: MemoryRecall, documents: DocumentRecall, tiers: TierSet):
        self.memory, self.documents, self.tiers = memory, documents, tiers

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        read: Hits | tuple[dict[str, object], ...] | None = None  # the documents read for it, if any
        if turn.request.kind == "regenerate":
            recalled = self._carry(turn)
            read = recalled.sources
        elif turn.request.kind != "tool_results":  # a tool's output is no question to search for
            recalled, read = self._recall(turn)
        else:
            recalled = Recalled()
        # Documents read for the turn keep it on this computer (even when no excerpt fit).
        decision = self.documents.keep_local(turn.route, read, turn.config.docs_allow_remote,
                                             bool(self.tiers.models.get("L2")))
        return (yield from rest(replace(turn, recalled=recalled, decision=decision)))

    def _recall(self, turn: Turn) -> tuple[Recalled, Hits | None]:
        req, config, user = turn.request, turn.config, turn.user
        found = self.documents.search(user.content, self.documents.scope(turn.conv.id, req.docs))
        budget = config.retrieval_max_tokens
        memories, fact, memory_tokens = None, None, 0
        if req.memory:
            memories = self.memory.recall(turn.conv, user.content, config.memory_k, budget // 2 if found else budget)
            memory_tokens = memories.tokens if memories is not None else 0
            if self.memory.memory is not None:
                fact = parse_remember(user.content)
        user.model_text = recalled_turn(user.content, memories) if memories else None
        docs_status = found.status if found is not None else "off"
        sources: list[dict[str, object]] = []
        document_tokens = 0
        if found:
            text, sources, used = self.documents.excerpts(user.content, user.model_text or user.content, found,
                                                          max(0, budget - memory_tokens))
            if text is None:
                docs_status = "skipped: no excerpt fits the retrieval budget"
            else:
                user.model_text, document_tokens = text, used
        return Recalled(memories, fact, memory_tokens, document_tokens, tuple(sources), docs_status,
                        local_only=bool(sources) and not config.docs_allow_remote), found

    def _carry(self, turn: Turn) -> Recalled:
        old = turn.supersedes.message_id if turn.supersedes else None
        sources, docs_status, document_tokens = self.documents.carried(old)
        return Recalled(document_tokens=document_tokens, sources=tuple(sources), docs_status=docs_status,
                        local_only=bool(sources) and not turn.config.docs_allow_remote)
