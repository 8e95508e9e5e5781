"""Generate: the target streams the answer (a local model on its own thread, or the remote tier);
the stages before this one see its `Chunk`s and get its `TurnResult` as the return value."""

from __future__ import annotations

from typing import Generator

from engine.chat.pipeline import Rest
from engine.chat.turn import Turn
from engine.inference.generate import Chunk, TurnResult
from engine.kv.tiers import KVTiers


class Generate:
    name = "generate"

    def __init__(self, *, kv: KVTiers | None):
        self.kv = kv

    def __call__(self, turn: Turn, rest: Rest) -> Generator[Chunk, None, TurnResult | None]:
        req = turn.request
        stream = turn.target.stream(turn.history, turn.user, turn.params, turn.cancel, turn.moved, tiers=self.kv,
                                    conversation_id=turn.conv.id, read_ahead=req.read_ahead, domain=req.domain)
        try:
            for item in stream:
                if isinstance(item, TurnResult):
                    return item
                yield item
        finally:
            stream.close()  # now, not at garbage collection: an early exit stops the model (Job.__iter__)
        return None
