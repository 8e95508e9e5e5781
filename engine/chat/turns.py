"""Turns: send, regenerate, edit-and-resend; each tries the tier's targets nearest first, fits the
window, commits the user message, streams the answer into SQLite and finishes it with measured stats.
Mixed into the Assistant."""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import replace
from typing import Iterator

from engine.chat.conversation import Conversation, StableBlock, TurnDone, TurnInput
from engine.chat.session import Message
from engine.chat.targets import InputError, MessageTooLong
from engine.chat.turn_memory import _memories_used
from engine.chat.window import Window, head_tail
from engine.inference.generate import Chunk, GenerateParams, TurnResult
from engine.inference.remote import RemoteError
from engine.inference.runtime import BACKGROUND, ModelUnloaded
from engine.kv.snapshot import WINDOW_DOMAIN
from engine.memory.prompt import recalled_turn
from engine.memory.remember import parse_remember
from engine.memory.service import Hits
from engine.routing.confidence import confidence_report, geometric_mean_prob
from engine.routing.risk import caution_text, risk_flags
from engine.routing.router import RouteDecision
from engine.storage import clean_text

log = logging.getLogger(__name__)
_CJK = re.compile(r"[\u3400-\u9fff]")

MAX_MESSAGE_CHARS = 200_000  # refuse before tokenizing anything larger
# What to do with a message too long for the context (MessageTooLong): refuse it, keep its head
# and tail (the middle cut, a marker says how much), or have the L1 model summarise it in parts.
# The stored message keeps every word typed; the shortened text is what the models read.
OVERFLOW = ("refuse", "head_tail", "summarise")


class Turns:
    def regenerate(self, conversation_id: int, params: GenerateParams = GenerateParams(),
                   cancel: threading.Event | None = None, route: str = "auto",
                   flush_s: float = 1.0) -> Iterator[Chunk | TurnDone]:
        """Answer the last user message again; the previous answer is superseded (kept in the
        record, out of the context) once the new one starts.

        Raises:
            InputError: the conversation does not end with an answered user message.
        """
        conv = self.conversation(conversation_id)
        if len(conv.messages) < 2 or (conv.messages[-1].role, conv.messages[-2].role) != ("assistant", "user"):
            raise InputError("nothing to regenerate: the conversation does not end with an answer")
        user, old = conv.messages[-2], conv.messages[-1]
        decision = self.route(conversation_id, user.content, route)
        previous = TurnDone(conv.id, old.id, "", old.content, [])
        turn = TurnInput(user)
        self._carry_sources(turn, old.id)  # the stored user turn still holds the same excerpts
        decision = self._keep_local(decision, turn.sources)
        try:
            done = yield from self._answer(conv, turn, decision, params, cancel, flush_s,
                                           commit_user=False, supersedes=previous)
            if done is not None:
                yield done
        finally:
            if self.memory is not None and conv.messages and conv.messages[-1] is not old:
                self.memory.forget_message(old.id)
            self._index_turn(conv, user)

    def resend_edited(self, conversation_id: int, text: str, params: GenerateParams = GenerateParams(),
                      cancel: threading.Event | None = None, route: str = "auto",
                      flush_s: float = 1.0, overflow: str = "refuse") -> Iterator[Chunk | TurnDone]:
        """Replace the last user message (and its answer) with `text` and answer that; the old
        turn is superseded in the record once the new message is stored.

        Raises:
            InputError: no user message to edit, or `text` is not sendable.
        """
        conv = self.conversation(conversation_id)
        last = max((i for i, m in enumerate(conv.messages) if m.role == "user"), default=None)
        if last is None:
            raise InputError("no message to edit")
        old = conv.messages[last:]
        conv.messages = conv.messages[:last]
        try:
            yield from self.send(conversation_id, text, params, cancel, route, flush_s,
                                 _replaces=[m.id for m in old if m.id is not None], overflow=overflow)
        except BaseException:
            if not any(m.role == "user" and m.id is not None and m not in old for m in conv.messages[last:]):
                conv.messages[last:last] = old  # nothing was stored: the old turn stands
            raise

    def send(self, conversation_id: int, text: str, params: GenerateParams = GenerateParams(),
             cancel: threading.Event | None = None, route: str = "auto",
             flush_s: float = 1.0, _replaces: list[int] | None = None,
             overflow: str = "refuse", docs: bool | str | None = None,
             cascade: bool = True, memory: bool = True, read_ahead: bool = False,
             domain: str = WINDOW_DOMAIN) -> Iterator[Chunk | TurnDone]:
        """Send a user message and stream the answer: `Chunk`s, then a `TurnDone` (two when the
        cascade re-asks a weak L1 answer on L2: the first has `superseded=True`).

        Args:
            overflow: a message too long for the context: "refuse" (MessageTooLong), "head_tail"
                or "summarise" (see OVERFLOW; the answer's stats["context"]["overflow"] says what
                was done).
            docs: answer from the user's documents: True (every collection), a collection name,
                False (not this message); None: the conversation's "Use my documents". Excerpts
                go inside the new user turn; `done.sources` lists what [n] cites.
            cascade: False never re-asks a weak L1 answer on L2 (a front-end that cannot take back
                text it has already passed on, e.g. an HTTP stream).
            memory: False keeps the turn out of the memory both ways: nothing recalled or pinned
                into it, no "remember that", not indexed, no background summary (a stateless API
                client's turns: the answer depends on the messages sent, and nothing is kept).
            read_ahead: once the answer is out, the model evaluates the markers that open the next
                user turn (~6 tokens), before anyone asks: a client that comes back evaluates that
                much less (the API server's turns; engine/chat/targets.py `_read_ahead`).
            domain: the turn's trust domain: another conversation's KV state serves it only within
                its own (an API client's turns get theirs; engine/kv/tiers.py `prepare`).

        Raises:
            MessageTooLong: the message does not fit the context and overflow is "refuse".
            InputError: empty or oversized message, or no room left in the context.
            ConversationNotFound: unknown id.
        """
        if overflow not in OVERFLOW:
            raise InputError(f"overflow must be one of {', '.join(OVERFLOW)}, not {overflow!r}")
        conv = self.conversation(conversation_id)
        text = clean_text(text).strip()
        if not text:
            raise InputError("empty message")
        if len(text) > MAX_MESSAGE_CHARS:
            raise InputError(f"message too long ({len(text)} characters; at most {MAX_MESSAGE_CHARS})")
        decision = self.route(conversation_id, text, route, domain=domain)
        found = self._doc_recall(text, self._doc_scope(conv.id, docs))
        decision = self._keep_local(decision, found)
        # Memories and excerpts share one budget; with excerpts waiting, memories take half at most.
        recall = self._recall(conv, text, self.retrieval_max_tokens // 2 if found else None) if memory else None
        user = Message("user", text, model_text=recalled_turn(text, recall) if recall else None)
        turn = TurnInput(user, recall, parse_remember(text) if self.memory and memory else None,
                         replaces=_replaces or [], memory_tokens=recall.tokens if recall is not None else 0,
                         memory=memory, read_ahead=read_ahead, domain=domain)
        self._with_documents(turn, found, max(0, self.retrieval_max_tokens - turn.memory_tokens))
        turn.local_only = bool(turn.sources) and not self.docs_allow_remote
        try:
            done = yield from self._answer(conv, turn, decision, params, cancel, flush_s, commit_user=True,
                                           overflow=overflow)
            if done is None:
                return
            if cascade and self._should_cascade(done, route):
                done.superseded = True
                yield done
                reason = f"cascade: L1 confidence {done.confidence:.2f} < {self.cascade_threshold:.2f}"
                done = yield from self._answer(conv, turn, RouteDecision("L2", reason, 0.0), params, cancel,
                                               flush_s, commit_user=False, supersedes=done)
                if done is None:
                    return
            yield done
            if memory:
                self._maybe_summarize(conv)
        finally:
            if memory:
                self._index_turn(conv, user)


    def _should_cascade(self, done: TurnDone, route: str) -> bool:
        return (done.level == "L1" and route == "auto" and not done.route_reason.endswith("override")
                and self.cascade_threshold is not None
                and done.confidence is not None and done.confidence < self.cascade_threshold
                and done.stats.get("finish_reason") != "cancelled"
                and bool(self.tiers.get("L2")) and self.tiers["L2"] != self.tiers["L1"]
                and (self.base_models or self.tier_is_instruct("L2") is not False))  # not on a base model

    def _answer(self, conv: Conversation, turn: TurnInput, decision: RouteDecision, params: GenerateParams,
                cancel: threading.Event | None, flush_s: float, commit_user: bool,
                supersedes: TurnDone | None = None, overflow: str = "refuse"):
        user = turn.user
        turns = conv.messages if commit_user else conv.messages[:-2]  # cascade: without user + weak answer
        failures: list[str] = []
        for target, note in self._targets(decision.level, local_only=turn.local_only):
            window, moved = self._window(conv, target, turns, turn, params, cancel, overflow)
            history = window.messages if window else conv.history()
            run = params  # a long message leaves less room than asked: the answer gets what is left
            if window is not None and window.max_answer is not None and window.max_answer < params.max_tokens:
                run = replace(params, max_tokens=window.max_answer)
            if commit_user and user.id is None:
                user.id = self.db.add_message(conv.id, "user", user.content, model=target.model_id,
                                              token_ids=user.ids.get(target.identity), token_model=target.identity,
                                              model_text=user.model_text)
                conv.messages.append(user)
                for old in turn.replaces:  # an edited message: the old turn leaves the context
                    self.db.supersede(old, user.id)
                    if self.memory is not None:
                        self.memory.forget_message(old)
                if turn.fact:
                    self._remember(conv, turn)
            try:
                done = yield from self._stream(conv, target, history, turn, decision, note, run, cancel,
                                               flush_s, supersedes, window, moved)
                if done is not None and window is not None:
                    conv.first_kept[target.identity] = window.first_kept
                return done
            except RemoteError as exc:
                if not exc.unavailable or exc.partial:
                    raise InputError(str(exc)) from exc
                log.warning("L3 failed before answering: %s", exc)
                failures.append(str(exc))
        raise InputError("no model is available for this message" + (f": {failures[-1]}" if failures else ""))

    def _window(self, conv: Conversation, target, turns: list[Message], turn: TurnInput,
                params: GenerateParams, cancel: threading.Event | None = None,
                overflow: str = "refuse") -> tuple[Window | None, bool]:
        """This turn's window for a target, and whether it moved (older turns overflowed). When it
        moves, the stable block (pinned memories, summary) is brought up to date: a new prefix is
        re-evaluated or shifted then anyway."""
        key = target.identity
        start = conv.first_kept.get(key, 0)
        block = conv.stable.get(key)
        if block is None:
            block = conv.stable[key] = StableBlock(self._pinned() if turn.memory else ())
        window = self._fit(conv, target, block, turns, turn, params, start, overflow, cancel)
        if window is None or window.first_kept == start:
            return window, False
        self.catch_up_summary(conv, cancel=cancel)  # the turns leaving the window: in the summary it carries
        chain = self.db.summaries(conv.id)
        fresh = StableBlock(self._pinned() if turn.memory else (), chain[-1]["text"] if chain else None)
        if fresh != block:
            conv.stable[key] = fresh
            shortened = window.overflow
            window = self._fit(conv, target, fresh, turns, turn, params, start, overflow, cancel)
            window.overflow = window.overflow or shortened
        return window, True

    def _fit(self, conv: Conversation, target, block: StableBlock, turns: list[Message], turn: TurnInput,
             params: GenerateParams, start: int, overflow: str = "refuse",
             cancel: threading.Event | None = None) -> Window | None:
        user = turn.user
        try:
            return target.fit(conv.system(block), turns, user, params, start)
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
            user.model_text, user.ids = None, {}
            if turn.recall is not None:
                turn.recall = Hits(status="skipped: no room in the context")
            if turn.sources:
                turn.sources, turn.document_tokens = [], 0
                turn.docs_status = "skipped: no room in the context"
            turn.memory_tokens = 0
            try:
                return target.fit(conv.system(block), turns, user, params, start)
            except MessageTooLong as exc:
                if overflow == "refuse":
                    raise
                too_long = exc
        return self._shorten(conv, target, block, turns, turn, params, start, overflow, too_long, cancel)

    def _shorten(self, conv: Conversation, target, block: StableBlock, turns: list[Message], turn: TurnInput,
                 params: GenerateParams, start: int, overflow: str, too_long: MessageTooLong,
                 cancel: threading.Event | None) -> Window:
        """The user's choice for a message too long for the context: the models read its head and
        tail, or the L1 model's summary of it in parts (the stored content stays what was typed)."""
        user, fits = turn.user, too_long.fits
        source = user.content
        if overflow == "summarise":  # head_tail then only trims it if another tokenizer counts more
            source = self._local("L1").summarise(user.content, fits, cancel)
        for _ in range(3):  # the template may count a few tokens more at the cut than the text alone
            text, _ = head_tail(source, fits, target.count_text)
            user.model_text, user.ids = text, {}
            try:
                window = target.fit(conv.system(block), turns, user, params, start)
            except MessageTooLong as exc:
                fits -= max(1, exc.tokens - exc.fits)
                continue
            window.overflow = {"mode": overflow, "tokens": too_long.tokens, "kept": target.count_text(text)}
            log.info("a %d-token message was shortened (%s) to %d tokens", too_long.tokens, overflow,
                     window.overflow["kept"])
            return window
        user.model_text, user.ids = None, {}
        raise too_long

    def _stream(self, conv: Conversation, target, history: list[Message], turn: TurnInput,
                decision: RouteDecision, note: str | None, params: GenerateParams,
                cancel: threading.Event | None, flush_s: float, supersedes: TurnDone | None,
                window: Window | None = None, moved: bool = False):
        """Yield the target's chunks while persisting them; return the TurnDone (not yielded)."""
        user = turn.user
        answer = Message("assistant", "", {}, None, target.level)
        parts: list[str] = []
        ids: list[int] = []
        finished = False
        last_flush = time.monotonic()
        stream = target.stream(history, user, params, cancel, moved, tiers=self.kv, conversation_id=conv.id,
                               read_ahead=turn.read_ahead, domain=turn.domain)
        try:
            for item in stream:
                if answer.id is None:  # first output: the tier is answering, make the row
                    answer.id = self.db.add_message(conv.id, "assistant", "", model=target.model_id,
                                                    level=target.level, token_ids=[] if target.identity else None,
                                                    token_model=target.identity, status="streaming")
                    if supersedes is not None:
                        self.db.supersede(supersedes.message_id, answer.id)
                        conv.messages = [m for m in conv.messages if m.id != supersedes.message_id]
                    conv.messages.append(answer)
                if isinstance(item, TurnResult):
                    finished = True
                    return self._finish(conv, target, answer, item, decision, note, window, turn,
                                        params.sampling.temperature)
                # Per token only appends: on a laptop every cycle spent here is taken from the decode.
                parts.append(item.text)
                if item.token >= 0:
                    ids.append(item.token)
                if time.monotonic() - last_flush >= flush_s:
                    self._mirror(answer, target, parts, ids)
                    self.db.update_message(answer.id, content=answer.content,
                                           token_ids=ids if target.identity else None)
                    last_flush = time.monotonic()
                yield item
        except RemoteError as exc:
            exc.partial = answer.id is not None
            raise
        finally:
            stream.close()  # now, not at garbage collection: an early exit stops the model (Job.__iter__)
            if answer.id is not None and not finished:
                # Consumer stopped early or an error: keep what was shown, and let the conversation
                # mirror what was sampled so the next turn's tokens extend the KV cache exactly.
                self._mirror(answer, target, parts, ids)
                self.db.update_message(answer.id, content=answer.content,
                                       token_ids=ids if target.identity else None,
                                       status="done", stats={"finish_reason": "interrupted"})
        return None

    @staticmethod
    def _mirror(answer: Message, target, parts: list[str], ids: list[int]) -> None:
        answer.content = "".join(parts)
        if target.identity:
            answer.ids = {target.identity: list(ids)}

    def _finish(self, conv: Conversation, target, answer: Message, item: TurnResult, decision: RouteDecision,
                note: str | None, window: Window | None, turn: TurnInput, temperature: float) -> TurnDone:
        user_text = turn.user.content
        answer.content = item.text
        if target.identity:
            answer.ids = {target.identity: item.token_ids}
        if target.identity:
            self._warm[conv.id] = target.level
            if self.kv is not None:  # copy the state to RAM while the user reads: a later switch only restores
                kv, cid = self.kv, conv.id
                try:
                    target.worker.submit(lambda w, job: kv.park(w.backend, cid), BACKGROUND)
                except ModelUnloaded:
                    pass  # unloaded meanwhile: its state already went to the warm tier
        confidence = geometric_mean_prob(item.logprobs)
        report = None
        if target.identity:  # local models give per-token logprobs; the remote tier does not
            entry = target.worker.model.entry
            # The catalog's thresholds were calibrated on greedy answers; sampled answers pick less
            # likely tokens and score lower, so they are not flagged until calibrated per mode.
            warn = entry.warn_threshold if entry and temperature == 0.0 else 0.0  # 0 flags nothing
            if self.warn_threshold:  # the user's own threshold applies to every answer
                warn = self.warn_threshold
            pieces = [target.worker.vocab.token_bytes(t) for t in item.token_ids]  # not the model's: it may be busy
            report = confidence_report(pieces, item.logprobs, warn)
        flags = risk_flags(user_text, item.text)
        risk = {"flags": flags, "caution": caution_text(flags, "zh" if _CJK.search(user_text) else "en")}
        context = window.as_dict() | {"context_shift": item.stats.context_shift} if window else None
        block = conv.stable.get(target.identity) or StableBlock()
        summary_used = bool(window and block.summary)
        offload = None
        if target.identity:  # where the layers are, and why not where they were asked to be
            offload = target.worker.offload
            note = "; ".join(x for x in (note, offload["note"]) if x) or None
        stats = item.stats.as_dict() | {"level": target.level, "route_reason": decision.reason,
                                        "fallback": note, "offload": offload, "confidence": report, "context": context,
                                        "summary_used": summary_used, "risk": risk,
                                        "memories_used": _memories_used(turn.recall),
                                        "memory": self._memory_note(turn, block),
                                        "sources": turn.sources, "documents": turn.docs_status,
                                        "retrieval": {"memory_tokens": turn.memory_tokens,
                                                      "document_tokens": turn.document_tokens,
                                                      "max_tokens": self.retrieval_max_tokens}}
        self.db.update_message(answer.id, content=item.text, token_ids=item.token_ids if target.identity else None,
                               logprobs=item.logprobs, status="done", stats=stats)
        done = TurnDone(conv.id, answer.id, target.model_id, item.text, item.token_ids, item.logprobs, stats,
                        target.level, decision.reason, note, confidence)
        return done

