"""Fit the window: the turns that fit the target's context with room for the answer. When older
turns leave it, the stable block (pinned memories, the summary that covers them) is brought up to
date; a message too long for the context is refused, or shortened as the user chose."""

from __future__ import annotations

import logging
from dataclasses import replace

from engine.chat.conversation import StableBlock
from engine.chat.memory_recall import MemoryRecall
from engine.chat.pipeline import Events, Rest
from engine.chat.summary_chain import SummaryChain
from engine.chat.targets import InputError, MessageTooLong
from engine.chat.tier_set import TierSet
from engine.chat.turn import Turn
from engine.chat.window import Window, head_tail
from engine.retrieval.fusion import Hits
from engine.routing.router import quick

log = logging.getLogger(__name__)


class Fit:
    name = "fit"

    def __init__(self, *, memory: MemoryRecall, summaries: SummaryChain, tiers: TierSet):
        self.memory, self.summaries, self.tiers = memory, summaries, tiers

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        window, turn.moved = self._window(turn)
        turn.window = window
        turn.history = window.messages if window else turn.conv.history()
        turn.params = turn.request.params  # a long message leaves less room than asked: the answer gets what is left
        if (turn.config.quick_no_think and turn.target.level == "L1" and turn.params.think and quick(turn.decision)
                and turn.target.worker.template.reasoning is not None):  # a quick request on a thinking L1
            turn.params = replace(turn.params, think=False)
            turn.decision = replace(turn.decision, reason=f"{turn.decision.reason}; answered without thinking")
        if window is not None and window.max_answer is not None and window.max_answer < turn.params.max_tokens:
            turn.params = replace(turn.params, max_tokens=window.max_answer)
        done = yield from rest(turn)
        if done is not None and window is not None:
            turn.conv.first_kept[turn.target.identity] = window.first_kept
        return done

    def _window(self, turn: Turn) -> tuple[Window | None, bool]:
        """This turn's window for the target, and whether it moved (older turns overflowed). When it
        moves, the stable block (pinned memories, summary) is brought up to date: a new prefix is
        re-evaluated or shifted then anyway."""
        conv, key = turn.conv, turn.target.identity
        start = conv.first_kept.get(key, 0)
        block = conv.stable.get(key)
        if block is None:
            block = conv.stable[key] = StableBlock(self.memory.pinned() if turn.memory else ())
        window = self._fit(turn, block, start)
        if window is None or window.first_kept == start:
            return window, False
        # The turns leaving the window: in the summary it carries.
        self.summaries.catch_up(conv, turn.config.summary_every, cancel=turn.cancel)
        fresh = StableBlock(self.memory.pinned() if turn.memory else (), self.summaries.latest(conv.id))
        if fresh != block:
            conv.stable[key] = fresh
            shortened = window.overflow
            window = self._fit(turn, fresh, start)
            window.overflow = window.overflow or shortened
        return window, True

    def _fit(self, turn: Turn, block: StableBlock, start: int) -> Window | None:
        user, overflow = turn.user, turn.request.overflow
        try:
            return self._target_fit(turn, block, start)
        except InputError as exc:
            if user.id is not None and isinstance(exc, MessageTooLong):  # stored already (regenerate, cascade)
                raise InputError(str(exc)) from exc
            if user.id is not None or (user.model_text is None and (overflow == "refuse"
                                                                   or not isinstance(exc, MessageTooLong))):
                raise
            too_long = exc
        if user.model_text is not None:
            # The message fits only without the memories retrieved for it (or an earlier shortening
            # was for another window): send it without them, or shorten it from the words typed.
            log.info("retrieved memories and excerpts left out: the message fills the context")
            _without_retrieval(turn)
            try:
                return self._target_fit(turn, block, start)
            except MessageTooLong as exc:
                if overflow == "refuse":
                    raise
                too_long = exc
        return self._shorten(turn, block, start, too_long)

    def _target_fit(self, turn: Turn, block: StableBlock, start: int) -> Window:
        return turn.target.fit(turn.conv.system(block), _turns(turn), turn.user, turn.request.params, start)

    def _shorten(self, turn: Turn, block: StableBlock, start: int, too_long: MessageTooLong) -> Window:
        """The user's choice for a message too long for the context: the models read its head and
        tail, or the L1 model's summary of it in parts (the stored content stays what was typed)."""
        user, target, overflow, fits = turn.user, turn.target, turn.request.overflow, too_long.fits
        source = user.content
        if overflow == "summarise":  # head_tail then only trims it if another tokenizer counts more
            source = self.tiers.local("L1").summarise(user.content, fits, turn.cancel)
        for _ in range(3):  # the template may count a few tokens more at the cut than the text alone
            text, _ = head_tail(source, fits, target.count_text)
            user.model_text, user.ids = text, {}
            try:
                window = self._target_fit(turn, block, start)
            except MessageTooLong as exc:
                fits -= max(1, exc.tokens - exc.fits)
                continue
            window.overflow = {"mode": overflow, "tokens": too_long.tokens, "kept": target.count_text(text)}
            log.info("a %d-token message was shortened (%s) to %d tokens", too_long.tokens, overflow,
                     window.overflow["kept"])
            return window
        user.model_text, user.ids = None, {}
        raise too_long


def _turns(turn: Turn) -> list:
    """The stored turns before this one: a regenerated or cascaded answer's user message and old
    answer are not among them, nor the new message once stored (a fallback after L3 failed)."""
    messages = turn.conv.messages
    if not turn.commit_user:
        return messages[:-2]
    return messages[:-1] if messages and messages[-1] is turn.user else messages


def _without_retrieval(turn: Turn) -> None:
    """The user turn as typed: no memories, no excerpts (each said so in the stats)."""
    turn.user.model_text, turn.user.ids = None, {}
    if turn.recall is not None:
        turn.recall = Hits(status="skipped: no room in the context")
    if turn.sources:
        turn.sources, turn.document_tokens = [], 0
        turn.docs_status = "skipped: no room in the context"
    turn.memory_tokens = 0
