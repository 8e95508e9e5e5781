"""Route: which level answers — the message's override, the conversation's, else the classifier
moved by cache stickiness (switching models re-evaluates what the other one has not cached)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from engine.chat.config import EngineConfig
from engine.chat.conversation import Conversation
from engine.chat.pipeline import Events, Rest
from engine.chat.session import Message
from engine.chat.targets import LocalTarget
from engine.chat.tier_set import LEVELS, TierSet
from engine.chat.turn import Turn
from engine.kv.tiers import KVTiers
from engine.routing.router import RouteDecision, apply_stickiness, classify
from engine.storage import Database, clean_text

# Prompt speed assumed for a model not measured yet (tokens/s; a laptop CPU on a ~1.5B model).
DEFAULT_PROMPT_TPS = 200.0


class Route:
    name = "route"

    def __init__(self, *, db: Database, tiers: TierSet, kv: KVTiers | None,
                 conversation: Callable[[int], Conversation]):
        self.db, self.tiers, self.kv, self.conversation = db, tiers, kv, conversation

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        req = turn.request
        decision = self.decide(turn.conv.id, turn.user.content, req.route, turn.config, req.domain)
        tools = req.params.tools
        if tools is not None and tools.offered() and not decision.reason.endswith("override"):
            decision = self.tiers.tool_tier(decision)  # a user's own route is theirs
        if req.images and not decision.reason.endswith("override"):
            decision = self.tiers.vision_tier(decision)
        if req.kind == "tool_results" and decision.reason == "user override":
            # send_tool_results routes to the model that called (kept there, as an override is, so
            # the results extend its KV): say so, not the user's override
            decision = replace(decision, reason="tool results: the model that called")
        return (yield from rest(replace(turn, decision=decision)))

    def decide(self, conversation_id: int, text: str, forced: str, config: EngineConfig,
               domain: str) -> RouteDecision:
        """The message's override, the conversation's, else the classifier + cache stickiness
        (which counts another conversation's cached prefix only within the turn's trust `domain`:
        the reason names the tokens to re-evaluate)."""
        if forced in LEVELS:
            return RouteDecision(forced, "user override", 0.0)
        row = self.db.conversation(conversation_id)
        if row and row["route"] in LEVELS:
            return RouteDecision(row["route"], "conversation override", 0.0)
        decision = self.tiers.instruct_tier(classify(text), config.base_models)
        warm = self.tiers.warm.get(conversation_id)
        warm_worker = self.tiers.loaded(warm) if warm else None
        if not (warm and warm_worker and decision.level in ("L1", "L2") and warm != decision.level):
            return decision
        history = self.conversation(conversation_id).history()
        user = Message("user", clean_text(text).strip())
        # Price the switch without loading anything: an unloaded target evaluates everything.
        target = self.tiers.loaded(decision.level)
        if target is not None:
            local = LocalTarget(decision.level, target)
            shared = self.kv is None or self.kv.shares(local.identity, conversation_id, domain)
            uncached = local.uncached_tokens(history, user, shared)
        else:
            uncached = len(LocalTarget(warm, warm_worker).session(history).prompt(user))
        tps = (target.prompt_tps if target else None) or DEFAULT_PROMPT_TPS
        moved = apply_stickiness(decision, warm_level=warm, uncached_tokens=uncached, prompt_tps=tps,
                                 max_switch_s=config.max_switch_s)
        return self.tiers.instruct_tier(moved, config.base_models)
