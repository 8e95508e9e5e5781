"""The end of an answer: its stored row completed, the target told (a local model checkpoints its
state to the chat's cold file while the user reads), and its `TurnStats` — confidence, risk, the
window, memory and documents — made once."""

from __future__ import annotations

import re
from dataclasses import replace

from engine.chat.conversation import StableBlock, TurnDone
from engine.chat.memory_recall import MemoryRecall, memories_used
from engine.chat.session import Message
from engine.chat.stats import Retrieval, TurnStats
from engine.chat.target import token_owner
from engine.chat.tier_set import TierSet
from engine.chat.turn import Turn
from engine.routing.confidence import geometric_mean_prob
from engine.routing.risk import caution_text, risk_flags
from engine.storage import Database

_CJK = re.compile(r"[\u3400-\u9fff]")


class Finish:
    def __init__(self, *, db: Database, tiers: TierSet, memory: MemoryRecall):
        self.db, self.tiers, self.memory = db, tiers, memory

    def __call__(self, turn: Turn, answer: Message, done: TurnDone) -> TurnDone:
        """`done` (the model's answer, not yet stored) as the stored answer `answer` is now."""
        assert answer.id is not None and done.stats is not None
        target, conv = turn.target, turn.conv
        owner = token_owner(target)
        answer.content = done.text
        answer.tool_calls = done.tool_calls or None
        thinks = bool(done.reasoning or done.reasoning_ids)
        answer.reasoning = done.reasoning if thinks else None
        if owner is not None:
            answer.ids = {owner: done.token_ids}
            answer.reasoning_ids = {owner: done.reasoning_ids} if thinks else {}
            self.tiers.warm[conv.id] = target.level
        stats = self.stats(turn, done)
        self.db.update_message(answer.id, content=done.text, token_ids=done.token_ids if owner is not None else None,
                               logprobs=done.logprobs, status="done", stats=stats.as_json(),
                               reasoning=answer.reasoning,
                               reasoning_ids=done.reasoning_ids if thinks and owner is not None else None,
                               tool_calls=done.tool_calls)
        stored = replace(done, message_id=answer.id, stats=stats, route_reason=turn.route.reason,
                         fallback=stats.fallback, confidence=geometric_mean_prob(done.logprobs))
        if target.capabilities.checkpoint:
            target.after_turn(stored)
        return stored

    def stats(self, turn: Turn, done: TurnDone) -> TurnStats:
        assert done.stats is not None
        target, window, note, got = turn.target, turn.fit.window, turn.placed and turn.placed.note, turn.recalled
        block = turn.conv.stable.get(target.identity) or StableBlock()
        offload = target.offload() if target.capabilities.offload else None
        if offload is not None:  # where the layers are, and why not where they were asked to be
            why = offload.get("note")
            note = "; ".join(x for x in (note, why if isinstance(why, str) else None) if x) or None
        user_text = turn.user.content
        flags = risk_flags(user_text, done.text)
        sampled = turn.request.params.sampling.temperature != 0.0
        confidence = (target.confidence(done, sampled, turn.config.warn_threshold)
                      if target.capabilities.confidence else None)
        return TurnStats.of(
            done.stats, level=target.level, route_reason=turn.route.reason, fallback=note, offload=offload,
            confidence=confidence,
            context=window.as_dict() | {"context_shift": done.stats.context_shift} if window else None,
            summary_used=bool(window and block.summary),
            risk={"flags": flags, "caution": caution_text(flags, "zh" if _CJK.search(user_text) else "en")},
            memories_used=memories_used(got.memories), memory=self.memory.note(got.memories, turn.remembered, block),
            sources=list(got.sources), documents=got.docs_status,
            retrieval=Retrieval(got.memory_tokens, got.document_tokens, turn.config.retrieval_max_tokens))
