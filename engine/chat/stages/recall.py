"""Recall: the user's documents and memories for this message, under one retrieval budget.

Excerpts and memories go inside the new user turn, after the cached prefix: memories first take
at most half the budget when excerpts are waiting, then the excerpts get what is left and go
ahead of them. A regenerated answer reads the stored user turn again, with the same sources.
"""

from __future__ import annotations

from engine.chat.doc_recall import DocumentRecall
from engine.chat.memory_recall import MemoryRecall
from engine.chat.pipeline import Events, Rest
from engine.chat.tier_set import TierSet
from engine.chat.turn import Turn
from engine.memory.prompt import recalled_turn
from engine.memory.remember import parse_remember


class Recall:
    name = "recall"

    def __init__(self, *, memory: MemoryRecall, documents: DocumentRecall, tiers: TierSet):
        self.memory, self.documents, self.tiers = memory, documents, tiers

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        if turn.request.kind == "regenerate":
            self._carry(turn)
        elif turn.request.kind != "tool_results":  # a tool's output is no question to search for
            self._recall(turn)
        return (yield from rest(turn))

    def _recall(self, turn: Turn) -> None:
        req, config, user = turn.request, turn.config, turn.user
        found = self.documents.search(user.content, self.documents.scope(turn.conv.id, req.docs))
        self._keep_local(turn, found)
        budget = config.retrieval_max_tokens
        if req.memory:
            turn.recall = self.memory.recall(turn.conv, user.content, config.memory_k,
                                             budget // 2 if found else budget)
            turn.memory_tokens = turn.recall.tokens if turn.recall is not None else 0
            if self.memory.memory is not None:
                turn.fact = parse_remember(user.content)
        user.model_text = recalled_turn(user.content, turn.recall) if turn.recall else None
        turn.docs_status = found.status if found is not None else "off"
        if found:
            text, turn.sources, used = self.documents.excerpts(user.content, user.model_text or user.content,
                                                               found, max(0, budget - turn.memory_tokens))
            if text is None:
                turn.docs_status = "skipped: no excerpt fits the retrieval budget"
            else:
                user.model_text, turn.document_tokens = text, used
        turn.local_only = bool(turn.sources) and not config.docs_allow_remote

    def _carry(self, turn: Turn) -> None:
        old = turn.supersedes.message_id if turn.supersedes else None
        turn.sources, turn.docs_status, turn.document_tokens = self.documents.carried(old)
        turn.local_only = bool(turn.sources) and not turn.config.docs_allow_remote
        self._keep_local(turn, turn.sources)

    def _keep_local(self, turn: Turn, found) -> None:
        turn.decision = self.documents.keep_local(turn.decision, found, turn.config.docs_allow_remote,
                                                  bool(self.tiers.models.get("L2")))
