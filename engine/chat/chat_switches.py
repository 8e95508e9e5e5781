"""A chat's own switches, kept in its row: the route, the documents, the system prompt, the
preset and the Think switch (AssistantCore's, apart so that the core reads as the turn)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.chat.conversation import ConversationNotFound
from engine.chat.targets import InputError
from engine.chat.request import ROUTES
from engine.storage import MAX_MESSAGE_CHARS, Database, clean_text

if TYPE_CHECKING:
    from engine.chat.conversation import Conversation


class ChatSwitches:
    db: Database

    if TYPE_CHECKING:
        def conversation(self, conversation_id: int) -> Conversation: ...

    def set_conversation_route(self, conversation_id: int, route: str) -> None:
        """Force a level for every message of a conversation ("auto" lets the router decide)."""
        if route not in ROUTES:
            raise InputError(f"route must be auto, L1, L2 or L3, not {route!r}")
        self.conversation(conversation_id)
        self.db.update_conversation(conversation_id, route=route)

    def set_conversation_docs(self, conversation_id: int, docs: bool | str | None) -> None:
        """Answer this conversation's messages from the documents: True (every collection), a
        collection name, or False/None (off)."""
        self.conversation(conversation_id)
        if isinstance(docs, str) and not docs.strip():
            raise InputError("the collection name is empty")
        value = "*" if docs is True else (docs.strip() if isinstance(docs, str) else None)
        self.db.update_conversation(conversation_id, docs=value)

    def _row(self, conversation_id: int) -> dict:
        """The conversation's stored row (its per-chat switches), read fresh."""
        row = self.db.conversation(conversation_id)
        if row is None:
            raise ConversationNotFound(f"no conversation with id {conversation_id}")
        return row

    def conversation_route(self, conversation_id: int) -> str:
        """The chat's route: "auto" (the router chooses per message) or the level that answers it."""
        return self._row(conversation_id).get("route") or "auto"

    def conversation_docs(self, conversation_id: int) -> str | None:
        """None (off), "*" (every collection) or a collection name."""
        return self._row(conversation_id).get("docs")

    def set_conversation_system_prompt(self, conversation_id: int, text: str) -> None:
        """A chat's system prompt from now on (a preset chosen for it): the next turn reads it; the
        KV state keeps what came before the prompt's first changed token."""
        text = clean_text(text).strip()
        if len(text) > MAX_MESSAGE_CHARS:
            raise InputError(f"a system prompt may hold at most {MAX_MESSAGE_CHARS} characters")
        conv = self.conversation(conversation_id)
        self.db.update_conversation(conversation_id, system_prompt=text)
        conv.system_prompt = text

    def set_conversation_preset(self, conversation_id: int, preset_id: str | None) -> None:
        self.conversation(conversation_id)
        self.db.update_conversation(conversation_id, preset=preset_id)

    def conversation_preset(self, conversation_id: int) -> str | None:
        """The id of the preset the chat was given (None: made before presets, or none chosen)."""
        return self._row(conversation_id).get("preset")

    def set_conversation_think(self, conversation_id: int, think: bool | None) -> None:
        """A chat's Think switch for reasoning models: on, off, or None (the reasoning.think setting)."""
        self.conversation(conversation_id)
        self.db.update_conversation(conversation_id, think=None if think is None else int(bool(think)))

    def conversation_think(self, conversation_id: int) -> bool | None:
        """The chat's Think switch (None: never set, the setting applies)."""
        row = self._row(conversation_id)
        return None if row.get("think") is None else bool(row["think"])
