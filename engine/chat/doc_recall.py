"""The documents' part in a turn: which collection a message may use, the excerpts retrieved for
it, and keeping such a turn on this computer unless the user allowed the remote tier."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from typing import Callable

from engine.chat.stats import stored_sources
from engine.docs.prompt import documents_turn, sources
from engine.retrieval.fusion import Hits
from engine.routing.router import RouteDecision
from engine.storage import Database

log = logging.getLogger(__name__)


class DocumentRecall:
    """Args:
        docs: the documents index (engine/docs `DocumentService`), or None: no documents.
        db: the conversations' "Use my documents" and stored answers' sources.
        count: tokens of a text for the L1 vocabulary (the retrieval budget's unit).
    """

    def __init__(self, *, docs, db: Database, count: Callable[[str], int]):
        self.docs, self.db, self.count = docs, db, count

    def scope(self, conversation_id: int, docs: bool | str | None) -> str | None:
        """None (no documents), "*" (every collection) or a collection, for this message:
        `docs` when given, else the conversation's "Use my documents"."""
        if self.docs is None or docs is False:
            return None
        if docs is None:
            row = self.db.conversation(conversation_id)
            return row.get("docs") if row else None
        return "*" if docs is True else docs

    def search(self, text: str, scope: str | None) -> Hits | None:
        if scope is None:
            return None
        try:
            return self.docs.search(text, collection=None if scope == "*" else scope)
        except Exception as exc:  # noqa: BLE001 - documents are an aid: the turn goes on without them
            log.exception("document retrieval failed")
            return Hits(status=f"skipped: retrieval failed ({type(exc).__name__})")

    @staticmethod
    def keep_local(decision: RouteDecision, found, allow_remote: bool, has_l2: bool) -> RouteDecision:
        """A turn carrying the user's documents stays on the local tiers unless allowed."""
        if not found or allow_remote or decision.level != "L3":
            return decision
        level = "L2" if has_l2 else "L1"
        return replace(decision, level=level,
                       reason=f"{decision.reason}; documents stay on this computer (setting docs.allow_remote) → {level}")

    def excerpts(self, content: str, model_text: str, found: Hits, budget: int) -> tuple[str | None, list[dict], int]:
        """The user turn with the excerpts that fit `budget` tokens ahead of its words (and of any
        recalled memories), what [n] refers to, and the tokens they added; None when none fits."""
        text, kept, used = documents_turn(content, model_text, found, budget, self.count)
        return text, (sources(kept) if text is not None else []), used

    def carried(self, answer_id: int | None) -> tuple[list[dict], str, int]:
        """A regenerated answer reads the same stored user turn: the old answer's sources."""
        if answer_id is None:
            return [], "off", 0
        rows = self.db.read("SELECT stats FROM messages WHERE id = ?", (answer_id,))
        try:
            return stored_sources(json.loads(rows[0][0]) if rows and rows[0][0] else {})
        except ValueError:
            return [], "off", 0
