"""The documents' part in a turn: which collection a message may use, the excerpts retrieved for
it, and keeping such a turn on this computer unless the user allowed the remote tier.
Mixed into the Assistant (uses self.docs, self.docs_allow_remote, self.retrieval_max_tokens)."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import replace

from engine.chat.conversation import TurnInput
from engine.docs.prompt import documents_turn, sources
from engine.docs.search import DocHits
from engine.routing.router import RouteDecision

log = logging.getLogger(__name__)
_WIDE = re.compile(r"[\u1100-\u9fff\uac00-\ud7af\uff00-\uffef]")


class TurnDocs:
    def _doc_scope(self, conversation_id: int, docs: bool | str | None) -> str | None:
        """None (no documents), "*" (every collection) or a collection, for this message:
        `docs` when given, else the conversation's "Use my documents"."""
        if self.docs is None or docs is False:
            return None
        if docs is None:
            return self.conversation_docs(conversation_id)
        return "*" if docs is True else docs

    def _doc_recall(self, text: str, scope: str | None) -> DocHits | None:
        if scope is None:
            return None
        try:
            return self.docs.search(text, collection=None if scope == "*" else scope)
        except Exception as exc:  # noqa: BLE001 - documents are an aid: the turn goes on without them
            log.exception("document retrieval failed")
            return DocHits(status=f"skipped: retrieval failed ({type(exc).__name__})")

    def _keep_local(self, decision: RouteDecision, found: DocHits | list | None) -> RouteDecision:
        """A turn carrying the user's documents stays on the local tiers unless allowed."""
        if not found or self.docs_allow_remote or decision.level != "L3":
            return decision
        level = "L2" if self.tiers.get("L2") else "L1"
        return replace(decision, level=level,
                       reason=f"{decision.reason}; documents stay on this computer (setting docs.allow_remote) → {level}")

    def _with_documents(self, turn: TurnInput, found: DocHits | None, budget: int) -> None:
        """Put the excerpts that fit `budget` tokens into the user turn, ahead of its words (and of
        any recalled memories); record what [n] refers to."""
        turn.docs_status = found.status if found is not None else "off"
        if not found:
            return
        user = turn.user
        text, kept, used = documents_turn(user.content, user.model_text or user.content, found, budget,
                                          self._count_prompt)
        if text is None:
            turn.docs_status = "skipped: no excerpt fits the retrieval budget"
            return
        user.model_text = text
        turn.sources, turn.document_tokens = sources(kept), used

    def _carry_sources(self, turn: TurnInput, answer_id: int | None) -> None:
        """A regenerated answer reads the same stored user turn: it cites the same sources."""
        if answer_id is None:
            return
        rows = self.db.read("SELECT stats FROM messages WHERE id = ?", (answer_id,))
        try:
            stats = json.loads(rows[0][0]) if rows and rows[0][0] else {}
        except ValueError:
            return
        turn.sources = stats.get("sources") or []
        turn.docs_status = stats.get("documents", "off")
        turn.document_tokens = (stats.get("retrieval") or {}).get("document_tokens", 0)
        turn.local_only = bool(turn.sources) and not self.docs_allow_remote

    def _count_prompt(self, text: str) -> int:
        """Tokens of `text` for the L1 vocabulary; an estimate (4 Latin characters or 1 CJK
        character a token) while none is loaded."""
        count = getattr(self, "count_tokens", None)
        n = count(text) if count is not None else None
        if n is not None:
            return n
        wide = len(_WIDE.findall(text))
        return wide + (len(text) - wide + 3) // 4
