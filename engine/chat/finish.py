"""The end of an answer: its stored row completed, the model's state checkpointed to its cold file
while the user reads, and its `TurnStats` — confidence, risk, the window, memory and documents —
made once."""

from __future__ import annotations

import re

from engine.chat.conversation import StableBlock, TurnDone
from engine.chat.memory_recall import MemoryRecall, memories_used
from engine.chat.session import Message
from engine.chat.stats import Retrieval, TurnStats
from engine.chat.tier_set import TierSet
from engine.chat.turn import Turn
from engine.inference.generate import TurnResult
from engine.inference.runtime import BACKGROUND, ModelUnloaded
from engine.kv.tiers import KVTiers
from engine.routing.confidence import confidence_report, geometric_mean_prob
from engine.routing.risk import caution_text, risk_flags
from engine.storage import Database

_CJK = re.compile(r"[\u3400-\u9fff]")


class Finish:
    def __init__(self, *, db: Database, tiers: TierSet, kv: KVTiers | None, memory: MemoryRecall):
        self.db, self.tiers, self.kv, self.memory = db, tiers, kv, memory

    def __call__(self, turn: Turn, answer: Message, result: TurnResult) -> TurnDone:
        target, conv = turn.target, turn.conv
        answer.content = result.text
        calls = [c.as_openai() for c in result.tool_calls]
        answer.tool_calls = calls or None
        thinks = bool(result.reasoning or result.reasoning_ids)
        answer.reasoning = result.reasoning if thinks else None
        if target.identity:
            answer.ids = {target.identity: result.token_ids}
            answer.reasoning_ids = {target.identity: result.reasoning_ids} if thinks else {}
            self.tiers.warm[conv.id] = target.level
            self._checkpoint(turn)
        stats = self.stats(turn, result)
        self.db.update_message(answer.id, content=result.text,
                               token_ids=result.token_ids if target.identity else None,
                               logprobs=result.logprobs, status="done", stats=stats.as_json(),
                               reasoning=answer.reasoning,
                               reasoning_ids=result.reasoning_ids if thinks and target.identity else None,
                               tool_calls=calls)
        return TurnDone(conv.id, answer.id, target.model_id, result.text, result.token_ids, result.logprobs, stats,
                        target.level, turn.decision.reason, stats.fallback, geometric_mean_prob(result.logprobs),
                        reasoning=result.reasoning, tool_calls=calls)

    def _checkpoint(self, turn: Turn) -> None:
        """The turn's cells to the chat's cold file while the user reads (engine/kv/tiers.py)."""
        if self.kv is None:
            return
        kv, cid = self.kv, turn.conv.id
        try:
            turn.target.worker.submit(lambda w, job: kv.checkpoint(w.backend, cid), BACKGROUND)
        except ModelUnloaded:
            pass  # unloaded meanwhile: its state went to the tiers then

    def stats(self, turn: Turn, result: TurnResult) -> TurnStats:
        target, window, note = turn.target, turn.window, turn.note
        block = turn.conv.stable.get(target.identity) or StableBlock()
        offload = None
        if target.identity:  # where the layers are, and why not where they were asked to be
            offload = target.worker.offload
            note = "; ".join(x for x in (note, offload["note"]) if x) or None
        user_text = turn.user.content
        flags = risk_flags(user_text, result.text)
        return TurnStats.of(
            result.stats, level=target.level, route_reason=turn.decision.reason, fallback=note, offload=offload,
            confidence=self._confidence(turn, result),
            context=window.as_dict() | {"context_shift": result.stats.context_shift} if window else None,
            summary_used=bool(window and block.summary),
            risk={"flags": flags, "caution": caution_text(flags, "zh" if _CJK.search(user_text) else "en")},
            memories_used=memories_used(turn.recall), memory=self.memory.note(turn.recall, turn.remembered, block),
            sources=turn.sources, documents=turn.docs_status,
            retrieval=Retrieval(turn.memory_tokens, turn.document_tokens, turn.config.retrieval_max_tokens))

    @staticmethod
    def _confidence(turn: Turn, result: TurnResult) -> dict | None:
        """Local models give per-token logprobs; the remote tier does not."""
        target = turn.target
        if not target.identity:
            return None
        entry = target.worker.model.entry
        # The catalog's thresholds were calibrated on greedy answers; sampled answers pick less
        # likely tokens and score lower, so they are not flagged until calibrated per mode.
        warn = entry.warn_threshold if entry and turn.request.params.sampling.temperature == 0.0 else 0.0
        if turn.config.warn_threshold:  # the user's own threshold applies to every answer
            warn = turn.config.warn_threshold
        pieces = [target.worker.vocab.token_bytes(t) for t in result.token_ids]  # not the model's: it may be busy
        return confidence_report(pieces, result.logprobs, warn)
