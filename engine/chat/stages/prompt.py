"""Prompt: the new user message (or a tool's result) is stored before the answer starts (with the ids the target read),
an edited turn's old messages leave the context, and "remember that …" pins its fact."""

from __future__ import annotations

from dataclasses import replace

from engine.chat.memory_recall import MemoryRecall
from engine.chat.pipeline import Events, Rest
from engine.chat.turn import Turn
from engine.storage import Database


class Prompt:
    name = "prompt"

    def __init__(self, *, db: Database, memory: MemoryRecall):
        self.db, self.memory = db, memory

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        user, conv, target = turn.user, turn.conv, turn.target
        remembered, identity = turn.remembered, target.identity
        if turn.commit_user and user.id is None:
            user.id = self.db.add_message(conv.id, user.role, user.content, model=target.model_id,
                                          token_ids=user.ids.get(identity) if identity is not None else None,
                                          token_model=identity,
                                          model_text=user.model_text, tool_call_id=user.tool_call_id,
                                          images=user.images,
                                          parent_id=conv.messages[-1].id if conv.messages else None)
            conv.messages.append(user)
            self.db.supersede(turn.request.replaces, user.id)  # an edit or a branch: the old turns leave
            for old in turn.request.replaces:
                self.memory.forget_message(old)
            if turn.recalled.fact:
                remembered = self.memory.remember(conv.id, user, turn.recalled.fact)
        return (yield from rest(replace(turn, remembered=remembered)))
