"""The one API the CLI and the app use: conversations, routed turns, persistence.

A turn: validate → route (classifier, cache stickiness, user override) → retrieve memories for
the message (they go inside the new user turn, after the cached prefix) → pick the tier, falling
back to the nearest available one → fit the window (system + stable block of pinned memories and
summary, recent whole turns, the new turn) → commit the user message (a "remember that …" becomes
a pinned memory) → stream the answer, writing it to SQLite at least every `flush_s` seconds →
finalise with measured stats → maybe re-ask a low-confidence L1 answer on L2 (cascade) → queue the
turn's messages for the memory index and maybe a background summary.
"""

from __future__ import annotations

import logging
import re

import psutil
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

from engine.inference.backend import LoadParams, ModelLoadError
from engine.models.catalog import Catalog, ModelNotFound
from engine.routing.confidence import confidence_report, geometric_mean_prob
from engine.chat.window import Window
from engine.inference.generate import Chunk, GenerateParams, TurnResult
from engine.kv.tiers import KVTiers
from engine.memory.prompt import pinned_facts, pinned_text, recalled_turn
from engine.memory.remember import parse_remember
from engine.memory.service import Hits, MemoryInputError, MemoryService
from engine.inference.manager import ModelManager
from engine.config.paths import user_dir
from engine.inference.remote import RemoteClient, RemoteConfig, RemoteError
from engine.routing.risk import caution_text, risk_flags
from engine.routing.router import RouteDecision, apply_stickiness, classify
from engine.inference.runtime import BACKGROUND, ModelUnloaded, Worker
from engine.chat.session import Message, Session
from engine.storage import Database, clean_text
from engine.chat.summaries import SummaryHandle, pending_task, submit_summary
from engine.chat.targets import InputError, LocalTarget, RemoteTarget

log = logging.getLogger(__name__)
_CJK = re.compile(r"[\u3400-\u9fff]")

MAX_MESSAGE_CHARS = 200_000  # refuse before tokenizing anything larger
MAX_SUMMARY_CHARS = 2_000  # a user-edited summary rides in every prompt of its conversation
# Geometric-mean token probability below which an L1 answer is re-asked on L2, for models the
# catalog has no calibration for. Small models are less sure of everything: calibrate per model.
DEFAULT_CASCADE_THRESHOLD = 0.35
# Prompt speed assumed for a model not measured yet (tokens/s; a laptop CPU on a ~1.5B model).
DEFAULT_PROMPT_TPS = 200.0
LEVELS = ("L1", "L2", "L3")
# Nearest available tier when one is missing: prefer stronger, then weaker.
FALLBACK_ORDER = {"L1": ("L1", "L2", "L3"), "L2": ("L2", "L1", "L3"), "L3": ("L3", "L2", "L1")}

__all__ = ["Assistant", "ConversationNotFound", "InputError", "TurnDone", "clean_text"]


class ConversationNotFound(LookupError):
    pass


@dataclass
class TurnDone:
    conversation_id: int
    message_id: int
    model: str
    text: str
    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    stats: dict = field(default_factory=dict)
    level: str = ""
    route_reason: str = ""
    fallback: str | None = None
    confidence: float | None = None
    superseded: bool = False  # a low-confidence answer re-asked on a stronger tier (cascade)


@dataclass(frozen=True)
class StableBlock:
    """What follows the system prompt in a model's window: pinned memories and the summary of
    turns that left the window. Frozen between shift points: changing it re-evaluates the window."""

    pinned: tuple[str, ...] = ()
    summary: str | None = None


@dataclass
class TurnInput:
    """The new user message and what the memory made of it."""

    user: Message
    recall: Hits | None = None  # memories retrieved for it (None: no memory service)
    fact: str | None = None  # "remember that …": the fact to pin once the message is stored
    remembered: dict | None = None  # {"id", "text"} of the pinned memory, or {"error"}
    replaces: list[int] = field(default_factory=list)  # an edited turn: message ids it supersedes


@dataclass
class Conversation:
    id: int
    system_prompt: str
    messages: list[Message]  # every turn the models may see (superseded answers are not here)
    # Per model identity: index into `messages` where its window starts (older turns overflowed).
    first_kept: dict[str, int] = field(default_factory=dict)

    # Per model identity (None: the remote tier): the stable block in its window.
    stable: dict[str | None, StableBlock] = field(default_factory=dict)

    def system(self, block: StableBlock | None = None) -> list[Message]:
        parts = [self.system_prompt] if self.system_prompt else []
        if block and block.pinned:
            parts.append(pinned_text(list(block.pinned)))
        if block and block.summary:
            parts.append(f"Summary of the earlier conversation: {block.summary}")
        return [Message("system", "\n\n".join(parts))] if parts else []

    def history(self) -> list[Message]:
        return self.system() + self.messages


class Assistant:
    """Routed chat over local tiers (L1/L2) and an optional remote L3, with SQLite persistence.

    Args:
        db: the database.
        model: one model (catalog id or .gguf path) for every local tier, or None for the
            two-tier default `tiers`.
        tiers: level → model for L1/L2 (used when `model` is None).
        remote: the L3 endpoint, if the user configured one.
        cascade: re-ask an auto-routed L1 answer on L2 when its geometric-mean token probability
            is below `cascade_threshold` (None: the L1 model's catalog calibration, else
            DEFAULT_CASCADE_THRESHOLD).
        vram_budget_mb: VRAM for the GPU tier (None: free VRAM minus a margin).
        summary_every: write a background summary of older turns every this many turns (0 = off).
        memory: the vector memory (started by the caller); None: turns use no memory.
        memory_k: memories retrieved per message.
        warn_threshold: flag answers whose geometric-mean token probability is below this, at
            any temperature (None: the model's catalog calibration, applied to greedy answers only).
        kv_warm_mb, kv_cold_mb: RAM and disk budgets of the KV state tiers (engine/kv/tiers.py;
            None: 10 % of RAM up to 1 GB, and 2 GB); kv_tiers=False keeps no state across switches.

    Raises:
        ModelNotFound, ModelLoadError: the first model cannot be loaded (messages for the user).
    """

    def __init__(self, db: Database, model: str | None = None, load: LoadParams = LoadParams(),
                 debug: bool = False, catalog: Catalog | None = None, *,
                 tiers: dict[str, str] | None = None, remote: RemoteConfig | None = None,
                 cascade: bool = False, cascade_threshold: float | None = None, max_switch_s: float = 1.5,
                 vram_budget_mb: float | None = None, manager: ModelManager | None = None,
                 summary_every: int = 0, memory: MemoryService | None = None, memory_k: int = 3,
                 kv_tiers: bool = True, kv_warm_mb: float | None = None, kv_cold_mb: float | None = None,
                 warn_threshold: float | None = None):
        self.db = db
        self.manager = manager or ModelManager(params=load, debug=debug, catalog=catalog,
                                               vram_budget_mb=vram_budget_mb)
        self.single_model = model is not None
        if model is not None:
            self.tiers = {"L1": model, "L2": model}
        else:
            self.tiers = dict(tiers or {"L1": "demo-small", "L2": "demo-int4"})
        self.remote = RemoteClient(remote) if remote and remote.base_url else None
        self.max_switch_s = max_switch_s
        self.summary_every = summary_every  # turns between background summaries; 0 = off
        self.memory, self.memory_k = memory, memory_k
        self.warn_threshold = warn_threshold
        self.kv = None
        if kv_tiers:
            warm = kv_warm_mb * 1e6 if kv_warm_mb is not None else min(1e9, psutil.virtual_memory().total * 0.1)
            cold = kv_cold_mb * 1e6 if kv_cold_mb is not None else 2e9
            self.kv = KVTiers(user_dir() / "kv", int(warm), int(cold))
        self._summary_jobs: dict[int, SummaryHandle] = {}
        self._conversations: dict[int, Conversation] = {}
        self._warm: dict[int, str] = {}  # conversation -> level whose model last held its tokens
        self.degraded: str | None = None  # why a tier stands in for another since the start
        try:
            self._local("L1")  # load now: fail early with a clear message
        except (ModelNotFound, ModelLoadError) as exc:
            if self.single_model or self.tiers["L2"] == self.tiers["L1"]:
                raise
            # A broken or missing L1 file must not take the app down while L2 works: L2 answers
            # everything, and the user is told why (window banner, CLI stderr).
            self.degraded = f"L1 model unavailable ({exc}); the L2 model answers everything"
            log.warning("%s", self.degraded)
            self.tiers["L1"] = self.tiers["L2"]
            self._local("L1")  # L2 broken too: that error is the one the user sees
        if cascade and cascade_threshold is None:
            entry = self._primary.model.entry
            calibrated = entry.confidence_threshold if entry else 0.0
            cascade_threshold = calibrated or DEFAULT_CASCADE_THRESHOLD
        self.cascade_threshold = cascade_threshold if cascade else None

    # ---- single-model conveniences (CLI default, tests)
    @property
    def _primary(self) -> Worker:
        return self._local("L1").worker  # looked up each time: the manager may have reloaded it

    @property
    def model_id(self) -> str:
        return self._primary.model.id

    @property
    def backend(self):
        return self._primary.backend

    @property
    def template(self):
        return self._primary.template

    def session(self, conversation_id: int) -> Session:
        """The conversation rendered for the primary (L1) model."""
        conv = self.conversation(conversation_id)
        return Session(self.backend, self.template, conv.history())

    def close(self) -> None:
        """Unload the models (each context's conversation state goes to the KV tiers, and every
        warm snapshot to its cold file, so the next start resumes without re-evaluating)."""
        self.manager.close()
        if self.kv is not None:
            self.kv.close()
        if self.remote:
            self.remote.close()

    def kv_pages(self) -> dict:
        """KV cache use in pages per loaded model (capacity, used, per conversation hot/warm/cold),
        plus the tiers' bytes and budgets; for the live gauge and `assistant stats`."""
        if self.kv is None:
            return {}
        return self.kv.pages([(w.backend, w.plan.kv_bytes_per_token if w.plan else 0) for w in self.manager.loaded()])

    # ---- conversations
    def new_conversation(self, system_prompt: str = "") -> int:
        return self.db.create_conversation(model=self.model_id, system_prompt=clean_text(system_prompt).strip())

    def conversation(self, conversation_id: int) -> Conversation:
        """The conversation as the models see it, rebuilt from SQLite on first use."""
        conv = self._conversations.get(conversation_id)
        if conv is None:
            row = self.db.conversation(conversation_id)
            if row is None:
                raise ConversationNotFound(f"no conversation with id {conversation_id}")
            messages = []
            for m in self.db.messages(conversation_id):
                if m["superseded_by"] is not None:
                    continue
                # Stored ids belong to the model that made/read them; other models re-tokenize.
                ids = {m["token_model"]: m["token_ids"]} if m["token_model"] and m["token_ids"] is not None else {}
                messages.append(Message(m["role"], m["content"], ids, m["id"], m["level"], m["model_text"]))
            conv = self._conversations[conversation_id] = Conversation(conversation_id, row["system_prompt"], messages)
        return conv

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        title = clean_text(title).strip()
        if not title:
            raise InputError("empty title")
        self.conversation(conversation_id)
        self.db.update_conversation(conversation_id, title=title[:200])

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation everywhere: its rows, its memory chunks, its KV snapshots."""
        self.conversation(conversation_id)  # ConversationNotFound for an unknown id
        message_ids = self.db.delete_conversation(conversation_id)
        self._conversations.pop(conversation_id, None)
        self._warm.pop(conversation_id, None)
        if self.memory is not None:
            for mid in message_ids:
                self.memory.forget_message(mid)
        if self.kv is not None:
            self.kv.forget(conversation_id)

    # ---- routing
    def set_conversation_route(self, conversation_id: int, route: str) -> None:
        """Force a level for every message of a conversation ("auto" lets the router decide)."""
        if route not in ("auto", *LEVELS):
            raise InputError(f"route must be auto, L1, L2 or L3, not {route!r}")
        self.conversation(conversation_id)
        self.db.update_conversation(conversation_id, route=route)

    def route(self, conversation_id: int, text: str, forced: str = "auto") -> RouteDecision:
        """Decide the level for a message: the message's override, the conversation's, else the
        classifier + cache stickiness."""
        if forced in LEVELS:
            return RouteDecision(forced, "user override", 0.0)
        row = self.db.conversation(conversation_id)
        if row and row["route"] in LEVELS:
            return RouteDecision(row["route"], "conversation override", 0.0)
        decision = classify(text)
        warm = self._warm.get(conversation_id)
        warm_worker = self.manager.find_loaded(self.tiers.get(warm, "")) if warm else None
        if warm_worker and decision.level in ("L1", "L2") and warm != decision.level:
            history = self.conversation(conversation_id).history()
            user = Message("user", clean_text(text).strip())
            # Price the switch without loading anything: an unloaded target evaluates everything.
            target = self.manager.find_loaded(self.tiers.get(decision.level, ""))
            if target is not None:
                uncached = LocalTarget(decision.level, target).uncached_tokens(history, user)
            else:
                uncached = len(LocalTarget(warm, warm_worker).session(history).prompt(user))
            tps = (target.prompt_tps if target else None) or DEFAULT_PROMPT_TPS
            decision = apply_stickiness(decision, warm_level=warm, uncached_tokens=uncached,
                                        prompt_tps=tps, max_switch_s=self.max_switch_s)
        return decision

    def _local(self, level: str) -> LocalTarget | None:
        model = self.tiers.get(level)
        if not model:
            return None
        # L2 is the GPU tier; L1 stays on the CPU so the GPU's memory goes to L2.
        worker = self.manager.get(model, gpu=level != "L1" or self.single_model)
        if self.kv is not None and worker.before_close is None:
            kv = self.kv
            worker.before_close = lambda w: kv.release(w.backend)  # evicted or exiting: keep its state
        return LocalTarget(level, worker)

    def _targets(self, level: str) -> Iterator[tuple[LocalTarget | RemoteTarget, str | None]]:
        """Targets to try for `level`, nearest first, each with the fallback note if not `level`."""
        reasons = []
        for candidate in FALLBACK_ORDER[level]:
            note = f"{level} {reasons[-1]} → {candidate}" if candidate != level and reasons else None
            if candidate == "L3":
                if self.remote is None:
                    reasons.append("not configured")
                    continue
                yield RemoteTarget(self.remote), note
                reasons.append("unreachable")
                continue
            try:
                target = self._local(candidate)
            except (ModelNotFound, ModelLoadError) as exc:
                log.warning("tier %s unavailable: %s", candidate, exc)
                reasons.append("unavailable")
                continue
            if target is None:
                reasons.append("not configured")
                continue
            yield target, note

    # ---- turns
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
        try:
            done = yield from self._answer(conv, TurnInput(user), decision, params, cancel, flush_s,
                                           commit_user=False, supersedes=previous)
            if done is not None:
                yield done
        finally:
            if self.memory is not None and conv.messages and conv.messages[-1] is not old:
                self.memory.forget_message(old.id)
            self._index_turn(conv, user)

    def resend_edited(self, conversation_id: int, text: str, params: GenerateParams = GenerateParams(),
                      cancel: threading.Event | None = None, route: str = "auto",
                      flush_s: float = 1.0) -> Iterator[Chunk | TurnDone]:
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
                                 _replaces=[m.id for m in old if m.id is not None])
        except BaseException:
            if not any(m.role == "user" and m.id is not None and m not in old for m in conv.messages[last:]):
                conv.messages[last:last] = old  # nothing was stored: the old turn stands
            raise

    def send(self, conversation_id: int, text: str, params: GenerateParams = GenerateParams(),
             cancel: threading.Event | None = None, route: str = "auto",
             flush_s: float = 1.0, _replaces: list[int] | None = None) -> Iterator[Chunk | TurnDone]:
        """Send a user message and stream the answer: `Chunk`s, then a `TurnDone` (two when the
        cascade re-asks a weak L1 answer on L2: the first has `superseded=True`).

        Raises:
            InputError: empty or oversized message, or no room left in the context.
            ConversationNotFound: unknown id.
        """
        conv = self.conversation(conversation_id)
        text = clean_text(text).strip()
        if not text:
            raise InputError("empty message")
        if len(text) > MAX_MESSAGE_CHARS:
            raise InputError(f"message too long ({len(text)} characters; at most {MAX_MESSAGE_CHARS})")
        decision = self.route(conversation_id, text, route)
        recall = self._recall(conv, text)
        user = Message("user", text, model_text=recalled_turn(text, recall) if recall else None)
        turn = TurnInput(user, recall, parse_remember(text) if self.memory else None, replaces=_replaces or [])
        try:
            done = yield from self._answer(conv, turn, decision, params, cancel, flush_s, commit_user=True)
            if done is None:
                return
            if self._should_cascade(done, route):
                done.superseded = True
                yield done
                reason = f"cascade: L1 confidence {done.confidence:.2f} < {self.cascade_threshold:.2f}"
                done = yield from self._answer(conv, turn, RouteDecision("L2", reason, 0.0), params, cancel,
                                               flush_s, commit_user=False, supersedes=done)
                if done is None:
                    return
            yield done
            self._maybe_summarize(conv)
        finally:
            self._index_turn(conv, user)

    # ---- memory
    def _pinned(self) -> tuple[str, ...]:
        if self.memory is None:
            return ()
        return tuple(pinned_facts([row.text for row in self.memory.pinned()]))

    def _recall(self, conv: Conversation, text: str) -> Hits | None:
        """Memories for this message, minus what the window already shows (its messages, the
        system prompt, pinned facts and summary)."""
        if self.memory is None:
            return None
        start = min(conv.first_kept.values(), default=0)
        shown = conv.messages[start:]
        texts = [conv.system_prompt] + [m.content for m in shown]
        for block in conv.stable.values():
            texts += [*block.pinned, block.summary or ""]
        try:
            return self.memory.search(text, self.memory_k, exclude_texts=texts,
                                      exclude_message_ids=[m.id for m in shown if m.id is not None])
        except Exception as exc:  # noqa: BLE001 - memory is an aid: the turn goes on without it
            log.exception("memory retrieval failed")
            return Hits(status=f"skipped: retrieval failed ({type(exc).__name__})")

    def _remember(self, conv: Conversation, turn: TurnInput) -> None:
        """Pin the fact of a "remember that …" message, citing the stored message."""
        try:
            memory_id = self.memory.add(turn.fact, pin=True, source={"conversation_id": conv.id,
                                                                    "message_id": turn.user.id})
            turn.remembered = {"id": memory_id, "text": turn.fact}
        except MemoryInputError as exc:
            turn.remembered = {"error": str(exc)}

    def _index_turn(self, conv: Conversation, user: Message) -> None:
        """Queue the turn's user message and the answer that stands for the memory index (the
        memory's thread chunks and embeds them; this returns at once)."""
        if self.memory is None or user.id is None:
            return
        try:
            at = conv.messages.index(user)
        except ValueError:
            return
        for m in conv.messages[at:at + 2]:
            if m.id is not None and (m is user or m.role == "assistant"):
                try:
                    self.memory.index_message(conv.id, m.id, m.role, m.content)
                except MemoryInputError as exc:
                    log.warning("message %s not indexed: %s", m.id, exc)

    # ---- summary chain
    def _maybe_summarize(self, conv: Conversation) -> None:
        """Queue a background summary on the L1 model when enough turns are uncovered."""
        if not self.summary_every:
            return
        running = self._summary_jobs.get(conv.id)
        if running is not None and not running.done.is_set():
            return
        task = pending_task(self.db, conv.id, conv.messages, self.summary_every)
        if task is not None:
            self._summary_jobs[conv.id] = submit_summary(self._local("L1").worker, self.db, task)

    def wait_for_summaries(self, timeout: float | None = None) -> None:
        for job in list(self._summary_jobs.values()):
            job.done.wait(timeout)

    def summaries(self, conversation_id: int) -> list[dict]:
        self.conversation(conversation_id)
        return self.db.summaries(conversation_id)

    def edit_summary(self, summary_id: int, text: str) -> None:
        """Replace a summary with the user's text (it rides in the prompt from the next shift point).

        Raises:
            InputError: empty or longer than MAX_SUMMARY_CHARS.
            LookupError: no summary has this id.
        """
        text = clean_text(text).strip()
        if not text:
            raise InputError("empty summary")
        if len(text) > MAX_SUMMARY_CHARS:
            raise InputError(f"summary too long ({len(text)} characters; at most {MAX_SUMMARY_CHARS}): "
                             "it goes into every prompt of the conversation")
        if not self.db.edit_summary(summary_id, text):
            raise LookupError(f"no summary with id {summary_id}")

    def _should_cascade(self, done: TurnDone, route: str) -> bool:
        return (done.level == "L1" and route == "auto" and not done.route_reason.endswith("override")
                and self.cascade_threshold is not None
                and done.confidence is not None and done.confidence < self.cascade_threshold
                and done.stats.get("finish_reason") != "cancelled"
                and bool(self.tiers.get("L2")) and self.tiers["L2"] != self.tiers["L1"])

    def _answer(self, conv: Conversation, turn: TurnInput, decision: RouteDecision, params: GenerateParams,
                cancel: threading.Event | None, flush_s: float, commit_user: bool,
                supersedes: TurnDone | None = None):
        user = turn.user
        turns = conv.messages if commit_user else conv.messages[:-2]  # cascade: without user + weak answer
        failures: list[str] = []
        for target, note in self._targets(decision.level):
            window, moved = self._window(conv, target, turns, turn, params)
            history = window.messages if window else conv.history()
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
                done = yield from self._stream(conv, target, history, turn, decision, note, params, cancel,
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
                params: GenerateParams) -> tuple[Window | None, bool]:
        """This turn's window for a target, and whether it moved (older turns overflowed). When it
        moves, the stable block (pinned memories, summary) is brought up to date: a new prefix is
        re-evaluated or shifted then anyway."""
        key = target.identity
        start = conv.first_kept.get(key, 0)
        block = conv.stable.get(key)
        if block is None:
            block = conv.stable[key] = StableBlock(self._pinned())
        window = self._fit(conv, target, block, turns, turn, params, start)
        if window is None or window.first_kept == start:
            return window, False
        chain = self.db.summaries(conv.id)
        fresh = StableBlock(self._pinned(), chain[-1]["text"] if chain else None)
        if fresh != block:
            conv.stable[key] = fresh
            window = self._fit(conv, target, fresh, turns, turn, params, start)
        return window, True

    @staticmethod
    def _fit(conv: Conversation, target, block: StableBlock, turns: list[Message], turn: TurnInput,
             params: GenerateParams, start: int) -> Window | None:
        try:
            return target.fit(conv.system(block), turns, turn.user, params, start)
        except InputError:
            if turn.user.model_text is None or turn.user.id is not None:
                raise
        # The message fits only without the memories retrieved for it: send it without them.
        log.info("retrieved memories left out: the message fills the context")
        turn.user.model_text, turn.user.ids = None, {}
        turn.recall = Hits(status="skipped: no room in the context")
        return target.fit(conv.system(block), turns, turn.user, params, start)

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
        stream = target.stream(history, user, params, cancel, moved, tiers=self.kv, conversation_id=conv.id)
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
            pieces = [target.worker.backend.token_bytes(t) for t in item.token_ids]
            report = confidence_report(pieces, item.logprobs, warn)
        flags = risk_flags(user_text, item.text)
        risk = {"flags": flags, "caution": caution_text(flags, "zh" if _CJK.search(user_text) else "en")}
        context = window.as_dict() | {"context_shift": item.stats.context_shift} if window else None
        block = conv.stable.get(target.identity) or StableBlock()
        summary_used = bool(window and block.summary)
        stats = item.stats.as_dict() | {"level": target.level, "route_reason": decision.reason,
                                        "fallback": note, "confidence": report, "context": context,
                                        "summary_used": summary_used, "risk": risk,
                                        "memories_used": _memories_used(turn.recall),
                                        "memory": self._memory_note(turn, block)}
        self.db.update_message(answer.id, content=item.text, token_ids=item.token_ids if target.identity else None,
                               logprobs=item.logprobs, status="done", stats=stats)
        done = TurnDone(conv.id, answer.id, target.model_id, item.text, item.token_ids, item.logprobs, stats,
                        target.level, decision.reason, note, confidence)
        return done

    def _memory_note(self, turn: TurnInput, block: StableBlock) -> dict:
        """What the memory did for this turn (for `done.stats.memory`)."""
        if self.memory is None:
            return {"retrieval": "off"}
        return {"retrieval": turn.recall.status if turn.recall is not None else "off",
                "pinned_in_prompt": len(block.pinned), "remembered": turn.remembered}


def _memories_used(recall: Hits | None) -> list[dict]:
    """The retrieved memories the model read, with their sources (for citing them)."""
    if not recall or recall.status != "ok":
        return []
    return [{"id": h.id, "kind": h.kind, "score": h.score, "source": h.source, "text": h.text[:300]}
            for h in recall]
