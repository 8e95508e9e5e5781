"""Fallback: the chosen level's targets, nearest first — an unavailable tier passes the turn to the
next one, with a note saying why (engine/chat/tier_set.py)."""

from __future__ import annotations

import logging
from dataclasses import replace

from engine.chat.pipeline import Events, Rest
from engine.chat.targets import InputError
from engine.chat.tier_set import TierSet
from engine.chat.turn import Placed, Turn
from engine.inference.remote import RemoteError

log = logging.getLogger(__name__)


class Fallback:
    name = "fallback"

    def __init__(self, *, tiers: TierSet):
        self.tiers = tiers

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        failures: list[str] = []
        for target, note in self.tiers.targets(turn.route.level, local_only=turn.recalled.local_only,
                                               base_models=turn.config.base_models):
            try:
                return (yield from rest(replace(turn, placed=Placed(target, note))))
            except RemoteError as exc:
                if not exc.unavailable or exc.partial:
                    raise InputError(str(exc)) from exc
                log.warning("L3 failed before answering: %s", exc)
                failures.append(str(exc))
        raise InputError("no model is available for this message" + (f": {failures[-1]}" if failures else ""))
