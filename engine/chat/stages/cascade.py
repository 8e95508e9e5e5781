"""Cascade: an auto-routed L1 answer whose confidence (geometric-mean token probability) is below
the threshold is taken back (`Retracted`, engine/chat/events.py) and asked again on L2."""

from __future__ import annotations

from dataclasses import replace

from engine.chat.config import EngineConfig
from engine.chat.conversation import TurnDone
from engine.chat.events import Retracted
from engine.chat.pipeline import Events, Rest
from engine.chat.tier_set import TierSet
from engine.chat.turn import Turn
from engine.routing.router import RouteDecision

# Geometric-mean token probability below which an L1 answer is re-asked on L2, for models the
# catalog has no calibration for. Small models are less sure of everything: calibrate per model.
DEFAULT_THRESHOLD = 0.35


def cascade_threshold(config: EngineConfig, tiers: TierSet) -> float | None:
    """The threshold in effect: None when the cascade is off; the configured one; else the L1
    model's catalog calibration, else DEFAULT_THRESHOLD."""
    if not config.cascade:
        return None
    if config.cascade_threshold is not None:
        return config.cascade_threshold
    l1 = tiers.local("L1")
    entry = l1.entry if l1 is not None else None
    return (entry.confidence_threshold if entry else 0.0) or DEFAULT_THRESHOLD


class Cascade:
    name = "cascade"

    def __init__(self, *, tiers: TierSet):
        self.tiers = tiers

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        done = yield from rest(turn)
        threshold = self._threshold(turn, done)
        if done is None or threshold is None:
            return done
        reason = f"cascade: L1 confidence {done.confidence:.2f} < {threshold:.2f}"
        yield Retracted(done, reason, "L2")
        return (yield from rest(replace(turn, decision=RouteDecision("L2", reason, 0.0), commit_user=False,
                                        supersedes=done)))

    def _threshold(self, turn: Turn, done: TurnDone | None) -> float | None:
        """The threshold `done` fell below, if it is to be asked again on L2; else None."""
        req, models = turn.request, self.tiers.models
        if (done is None or req.kind != "send" or not req.cascade or req.route != "auto" or done.level != "L1"
                or done.route_reason.endswith("override") or done.confidence is None
                or (done.stats is not None and done.stats.finish_reason in ("cancelled", "tool_calls"))
                or not models.get("L2") or models["L2"] == models["L1"]
                or not (turn.config.base_models or self.tiers.is_instruct("L2") is not False)):  # not a base model
            return None
        threshold = cascade_threshold(turn.config, self.tiers)
        return threshold if threshold is not None and done.confidence < threshold else None
