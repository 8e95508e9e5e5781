"""Fit the window: the turns that fit the target's context with room for the answer. When older
turns leave it, the stable block (pinned memories, the summary that covers them) is brought up to
date; a message too long for the context is refused, or shortened as the user chose."""

from __future__ import annotations

import logging
from dataclasses import replace

from engine.chat.conversation import StableBlock
from engine.chat.memory_recall import MemoryRecall
from engine.chat.pipeline import Events, Rest
from engine.chat.session import Message
from engine.chat.summary_chain import SummaryChain
from engine.chat.targets import InputError, MessageTooLong
from engine.chat.tier_set import TierSet
from engine.chat.turn import Fitted, Turn
from engine.chat.window import Window, head_tail
from engine.retrieval.fusion import Hits
from engine.routing.router import quick

log = logging.getLogger(__name__)


class Fit:
    name = "fit"

    def __init__(self, *, memory: MemoryRecall, summaries: SummaryChain, tiers: TierSet):
        self.memory, self.summaries, self.tiers = memory, summaries, tiers

    def __call__(self, turn: Turn, rest: Rest) -> Events:
        turn, window, moved = self._window(turn)
        target, decision = turn.target, turn.route
        params = turn.request.params  # a long message leaves less room than asked: the answer gets what is left
        if (turn.config.quick_no_think and target.level == "L1" and params.think and quick(decision)
                and target.capabilities.reasoning):  # a quick request on a thinking L1
            params = replace(params, think=False)
            decision = replace(decision, reason=f"{decision.reason}; answered without thinking")
        if params.speculative is None:  # the request left it to the engine's setting
            params = replace(params, speculative=turn.config.speculative)
        if window is not None and window.max_answer is not None and window.max_answer < params.max_tokens:
            params = replace(params, max_tokens=window.max_answer)
        history = window.messages if window else turn.conv.history()
        done = yield from rest(replace(turn, decision=decision, fitted=Fitted(window, moved, params, history)))
        if done is not None and window is not None:
            turn.conv.first_kept[target.identity] = window.first_kept
        return done

    def _window(self, turn: Turn) -> tuple[Turn, Window | None, bool]:
        """This turn's window for the target, and whether it moved (older turns overflowed), with
        the turn as it goes on (what it recalled left out when the message alone fills the
        context). When the window moves, the stable block (pinned memories, summary) is brought up
        to date: a new prefix is re-evaluated or shifted then anyway."""
        conv, key = turn.conv, turn.target.identity
        start = conv.first_kept.get(key, 0)
        block = conv.stable.get(key)
        if block is None:
            block = conv.stable[key] = StableBlock(self.memory.pinned() if turn.memory else ())
        turn, window = self._fit(turn, block, start)
        if window is None or window.first_kept == start:
            return turn, window, False
        # The turns leaving the window: in the summary it carries.
        self.summaries.catch_up(conv, turn.config.summary_every, cancel=turn.cancel)
        fresh = StableBlock(self.memory.pinned() if turn.memory else (), self.summaries.latest(conv.id))
        if fresh != block:
            conv.stable[key] = fresh
            shortened = window.overflow
            turn, window = self._fit(turn, fresh, start)
            window.overflow = window.overflow or shortened
        return turn, window, True

    def _fit(self, turn: Turn, block: StableBlock, start: int) -> tuple[Turn, Window]:
        user, overflow = turn.user, turn.request.overflow
        try:
            return turn, self._target_fit(turn, block, start)
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
            turn = _without_retrieval(turn)
            try:
                return turn, self._target_fit(turn, block, start)
            except MessageTooLong as exc:
                if overflow == "refuse":
                    raise
                too_long = exc
        assert isinstance(too_long, MessageTooLong)  # any other InputError was raised above
        return turn, self._shorten(turn, block, start, too_long)

    def _target_fit(self, turn: Turn, block: StableBlock, start: int) -> Window:
        return turn.target.fit(turn.conv.system(block), _turns(turn), turn.user, turn.request.params, start)

    def _shorten(self, turn: Turn, block: StableBlock, start: int, too_long: MessageTooLong) -> Window:
        """The user's choice for a message too long for the context: the models read its head and
        tail, or the L1 model's summary of it in parts (the stored content stays what was typed)."""
        user, target, overflow, fits = turn.user, turn.target, turn.request.overflow, too_long.fits
        source = user.content
        if overflow == "summarise":  # head_tail then only trims it if another tokenizer counts more
            l1 = self.tiers.local("L1")
            if l1 is None:
                raise too_long
            source = l1.summarise(user.content, fits, turn.cancel)
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


def _turns(turn: Turn) -> list[Message]:
    """The stored turns before this one: a regenerated or cascaded answer's user message and old
    answer are not among them, nor the new message once stored (a fallback after L3 failed)."""
    messages = turn.conv.messages
    if not turn.commit_user:
        return messages[:-2]
    return messages[:-1] if messages and messages[-1] is turn.user else messages


def _without_retrieval(turn: Turn) -> Turn:
    """The user turn as typed: no memories, no excerpts (each said so in the stats)."""
    turn.user.model_text, turn.user.ids = None, {}
    was, skipped = turn.recalled, "skipped: no room in the context"
    now = replace(was, memories=Hits(status=skipped) if was.memories is not None else None, memory_tokens=0)
    if was.sources:
        now = replace(now, sources=(), document_tokens=0, docs_status=skipped)
    return replace(turn, recalled=now)
