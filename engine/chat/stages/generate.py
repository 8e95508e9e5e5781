"""Generate: the target streams the answer (a local model on its own thread, or the remote tier);
the stages before this one see its chunks and get the answer, not yet stored, as a `TurnDone`."""

from __future__ import annotations

from engine.chat.conversation import TurnDone
from engine.chat.pipeline import Events, Rest
from engine.chat.turn import Turn
from engine.inference.events import TurnResult


class Generate:
    name = "generate"

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        req, fit, target = turn.request, turn.fit, turn.target
        stream = target.stream(fit.history, turn.user, fit.params, turn.cancel, fit.moved, conversation_id=turn.conv.id,
                               read_ahead=req.read_ahead, domain=req.domain)
        try:
            for item in stream:
                if isinstance(item, TurnResult):
                    return TurnDone.of(item, turn.conv.id, target.model_id, target.level)
                yield item
        finally:
            stream.close()  # now, not at garbage collection: an early exit stops the model
        return None
