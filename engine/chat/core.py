"""The assistant's core: tiers, routing, fallback, conversations and the summary chain.

A turn (engine/chat/turns.py): validate → route (classifier, cache stickiness, user override) →
retrieve memories for the message (inside the new user turn, after the cached prefix;
engine/chat/turn_memory.py) → pick the tier, falling back to the nearest available one → fit the
window → commit the user message → stream the answer into SQLite → finish with measured stats →
maybe re-ask a low-confidence L1 answer on L2 (cascade) → queue the turn for the memory index and
maybe a background summary. Front-ends use engine.api, which builds this from settings.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from types import MappingProxyType
from typing import Iterator, Mapping

import psutil

from engine.chat.conversation import Conversation, ConversationNotFound, StableBlock, TurnDone, load_conversation
from engine.chat.session import Message, Session
from engine.chat.summaries import SummaryHandle, pending_task, submit_summary
from engine.chat.targets import InputError, LocalTarget, RemoteTarget
from engine.chat.turn_docs import TurnDocs
from engine.chat.turn_memory import TurnMemory
from engine.chat.turns import MAX_MESSAGE_CHARS, Turns
from engine.config.paths import user_dir
from engine.inference.backend import LoadParams, ModelLoadError
from engine.inference.manager import ModelManager
from engine.inference.remote import RemoteClient, RemoteConfig
from engine.inference.runtime import Worker
from engine.kv.tiers import WINDOW_DOMAIN, KVTiers
from engine.memory.service import MemoryService
from engine.models.catalog import Catalog, ModelNotFound
from engine.models.instruct import is_instruct
from engine.config.ownership import adopt, check_owner
from engine.routing.router import RouteDecision, apply_stickiness, classify
from engine.storage import Database, clean_text

log = logging.getLogger(__name__)

MAX_SUMMARY_CHARS = 2_000  # a user-edited summary rides in every prompt of its conversation
# Geometric-mean token probability below which an L1 answer is re-asked on L2, for models the
# catalog has no calibration for. Small models are less sure of everything: calibrate per model.
DEFAULT_CASCADE_THRESHOLD = 0.35
# Prompt speed assumed for a model not measured yet (tokens/s; a laptop CPU on a ~1.5B model).
DEFAULT_PROMPT_TPS = 200.0
LEVELS = ("L1", "L2", "L3")
SUMMARY_CATCH_UP_S = 60.0  # longest a turn waits for the summary of the turns leaving its window
CATCH_UP_POLL_S = 0.05  # how often that wait looks at Stop
# Nearest available tier when one is missing: prefer stronger, then weaker.
FALLBACK_ORDER = {"L1": ("L1", "L2", "L3"), "L2": ("L2", "L1", "L3"), "L3": ("L3", "L2", "L1")}

__all__ = ["AssistantCore", "Conversation", "ConversationNotFound", "InputError", "MAX_MESSAGE_CHARS",
           "StableBlock", "TurnDone"]


class AssistantCore(Turns, TurnMemory, TurnDocs):
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
        n_ctx_max: a longer context each model may load with where it was trained for it and it is
            cheap (ModelManager._longer); None: exactly `load.n_ctx`.
        base_models: let auto routing, its fallbacks and the cascade answer with a tier whose model
            is a base model (not instruction-tuned). Off: only the user's explicit route reaches it.

    Raises:
        ModelNotFound, ModelLoadError: the first model cannot be loaded (messages for the user).

    It belongs to the thread that drives it (engine/config/ownership.py): the one that built it, or the
    one it was handed to (the API server's "api-engine"). Turns and `tiers` are that thread's; other
    threads read what it publishes (`published_tiers`, each model's view, the status snapshot).
    """

    def __init__(self, db: Database, model: str | None = None, load: LoadParams = LoadParams(),
                 debug: bool = False, catalog: Catalog | None = None, *,
                 tiers: dict[str, str] | None = None, remote: RemoteConfig | None = None,
                 cascade: bool = False, cascade_threshold: float | None = None, max_switch_s: float = 1.5,
                 vram_budget_mb: float | None = None, manager: ModelManager | None = None,
                 summary_every: int = 0, memory: MemoryService | None = None, memory_k: int = 3,
                 kv_tiers: bool = True, kv_warm_mb: float | None = None, kv_cold_mb: float | None = None,
                 warn_threshold: float | None = None, gpu_device: str = "auto", n_gpu_layers: int | None = None,
                 base_models: bool = False, n_ctx_max: int | None = None, docs=None,
                 docs_allow_remote: bool = False, retrieval_max_tokens: int = 256):
        adopt(self)
        self.db = db
        self.docs = docs  # a DocumentService (engine/docs), or None: no documents
        self.docs_allow_remote = docs_allow_remote  # a turn with documents may go to L3
        self.retrieval_max_tokens = retrieval_max_tokens  # memories + documents per user turn
        self.base_models = base_models  # auto routing, fallbacks and the cascade may pick a base model
        self.settings = None  # the Settings it was built from (engine.api), for live changes
        self.manager = manager or ModelManager(params=load, debug=debug, catalog=catalog,
                                               vram_budget_mb=vram_budget_mb, gpu_device=gpu_device,
                                               n_gpu_layers=n_gpu_layers, n_ctx_max=n_ctx_max)
        self.single_model = model is not None
        if model is not None:
            self.tiers = {"L1": model, "L2": model}
        else:
            # Both tiers on the instruction-tuned demo: demo-int4 is a base model (tests and
            # benchmarks name it for its MQA mechanics; a chat never gets it by default).
            self.tiers = dict(tiers or {"L1": "demo-small", "L2": "demo-small"})
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
            self.set_tier("L1", self.tiers["L2"])
            self._local("L1")  # L2 broken too: that error is the one the user sees
        self.configure_cascade(cascade, cascade_threshold)

    @property
    def tiers(self) -> dict[str, str]:
        """Level → model (catalog id or .gguf path) for L1 and L2: the owner's (the thread that
        drives turns); any other thread reads `published_tiers`."""
        check_owner(self)
        return self._tiers

    @tiers.setter
    def tiers(self, tiers: dict[str, str]) -> None:
        check_owner(self)
        self._tiers = dict(tiers)
        # Replaced whole, never changed in place: a reader on another thread (the server's event
        # loop, the status thread) takes the reference and has one consistent pair.
        self.published_tiers: Mapping[str, str] = MappingProxyType(dict(tiers))

    def set_tier(self, level: str, model: str) -> None:
        """Use `model` for `level` from the next turn on, and publish the change."""
        self.tiers = self.tiers | {level: model}

    def configure_cascade(self, enabled: bool, threshold: float | None = None) -> None:
        """Re-ask auto-routed L1 answers below `threshold` on L2 (None: the L1 model's catalog
        calibration, else DEFAULT_CASCADE_THRESHOLD)."""
        if enabled and threshold is None:
            entry = self._primary.model.entry
            threshold = (entry.confidence_threshold if entry else 0.0) or DEFAULT_CASCADE_THRESHOLD
        self.cascade_threshold = threshold if enabled else None

    # ---- single-model conveniences (CLI default, tests)
    @property
    def _primary(self) -> Worker:
        return self._local("L1").worker  # looked up each time: the manager may have reloaded it

    @property
    def model_id(self) -> str:
        return self._primary.model.id

    @property
    def backend(self):
        """The L1 model's backend: its facts (identity, n_ctx, params) for any thread; what touches
        its context only on the model's thread (engine/config/ownership.py)."""
        return self._primary.backend

    @property
    def vocab(self):
        """The L1 model's vocabulary (`VocabTokenizer`): tokenize and detokenize on any thread."""
        return self._primary.vocab

    @property
    def template(self):
        return self._primary.template

    def session(self, conversation_id: int) -> Session:
        """The conversation rendered for the primary (L1) model."""
        conv = self.conversation(conversation_id)
        return Session(self.vocab, self.template, conv.history())

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
        plus the tiers' bytes and budgets. Read from what each model's thread published after its
        last job, so any thread may call it."""
        if self.kv is None:
            return {}
        return self.kv.pages([(w.view, w.plan.kv_bytes_per_token if w.plan else 0) for w in self.manager.published])

    # ---- conversations
    def new_conversation(self, system_prompt: str = "") -> int:
        return self.db.create_conversation(model=self.model_id, system_prompt=clean_text(system_prompt).strip())

    def conversation(self, conversation_id: int) -> Conversation:
        """The conversation as the models see it, rebuilt from SQLite on first use."""
        conv = self._conversations.get(conversation_id)
        if conv is None:
            conv = self._conversations[conversation_id] = load_conversation(self.db, conversation_id)
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
        # Every per-conversation map lets go: the API server deletes one conversation per request.
        self._conversations.pop(conversation_id, None)
        self._warm.pop(conversation_id, None)
        self._summary_jobs.pop(conversation_id, None)  # a summary still running finds its rows gone
        if self.memory is not None:
            for mid in message_ids:
                self.memory.forget_message(mid)
        if self.kv is not None:
            self.kv.forget(conversation_id)
        self.db.scrub()  # its text out of the WAL: the file keeps only the pages secure_delete zeroed

    # ---- routing
    def set_conversation_route(self, conversation_id: int, route: str) -> None:
        """Force a level for every message of a conversation ("auto" lets the router decide)."""
        if route not in ("auto", *LEVELS):
            raise InputError(f"route must be auto, L1, L2 or L3, not {route!r}")
        self.conversation(conversation_id)
        self.db.update_conversation(conversation_id, route=route)

    def set_conversation_docs(self, conversation_id: int, docs: bool | str | None) -> None:
        """Answer this conversation's messages from the documents: True (every collection), a
        collection name, or False/None (off)."""
        self.conversation(conversation_id)
        if isinstance(docs, str) and not docs.strip():
            raise InputError("the collection name is empty")
        value = "*" if docs is True else (docs.strip() if isinstance(docs, str) else None)
        self.db.update_conversation(conversation_id, docs=value)

    def conversation_docs(self, conversation_id: int) -> str | None:
        """None (off), "*" (every collection) or a collection name."""
        row = self.db.conversation(conversation_id)
        if row is None:
            raise ConversationNotFound(f"no conversation with id {conversation_id}")
        return row.get("docs")

    def route(self, conversation_id: int, text: str, forced: str = "auto",
              domain: str = WINDOW_DOMAIN) -> RouteDecision:
        """Decide the level for a message: the message's override, the conversation's, else the
        classifier + cache stickiness (which counts another conversation's cached prefix only
        within the turn's trust `domain`: the reason names the tokens to re-evaluate)."""
        if forced in LEVELS:
            return RouteDecision(forced, "user override", 0.0)
        row = self.db.conversation(conversation_id)
        if row and row["route"] in LEVELS:
            return RouteDecision(row["route"], "conversation override", 0.0)
        decision = self._instruct_tier(classify(text))
        warm = self._warm.get(conversation_id)
        warm_worker = self.manager.find_loaded(self.tiers.get(warm, "")) if warm else None
        if warm_worker and decision.level in ("L1", "L2") and warm != decision.level:
            history = self.conversation(conversation_id).history()
            user = Message("user", clean_text(text).strip())
            # Price the switch without loading anything: an unloaded target evaluates everything.
            target = self.manager.find_loaded(self.tiers.get(decision.level, ""))
            if target is not None:
                local = LocalTarget(decision.level, target)
                shared = self.kv is None or self.kv.shares(local.identity, conversation_id, domain)
                uncached = local.uncached_tokens(history, user, shared)
            else:
                uncached = len(LocalTarget(warm, warm_worker).session(history).prompt(user))
            tps = (target.prompt_tps if target else None) or DEFAULT_PROMPT_TPS
            decision = self._instruct_tier(apply_stickiness(decision, warm_level=warm, uncached_tokens=uncached,
                                                            prompt_tps=tps, max_switch_s=self.max_switch_s))
        return decision

    def _instruct_tier(self, decision: RouteDecision) -> RouteDecision:
        """The router's pick, moved off a local tier that holds a base model when the other local
        tier's model is instruction-tuned: only a user's explicit route (per message or per
        conversation) sends a chat to a base model."""
        other = {"L1": "L2", "L2": "L1"}.get(decision.level)
        if self.base_models or other is None or self.tiers.get(decision.level) == self.tiers.get(other):
            return decision
        if self.tier_is_instruct(decision.level) is False and self.tier_is_instruct(other):
            why = f"{decision.reason}; {decision.level} holds a base model (not instruction-tuned) → {other}"
            return replace(decision, level=other, reason=why, wanted=decision.wanted or decision.level)
        return decision

    def tier_is_instruct(self, level: str) -> bool | None:
        """Whether `level`'s model is instruction-tuned (None: no model, or it can't be told)."""
        model = self.tiers.get(level)
        return is_instruct(model, self.manager.catalog) if model else None

    def _local(self, level: str) -> LocalTarget | None:
        model = self.tiers.get(level)
        if not model:
            return None
        # L2 is the GPU tier; a distinct L1 model stays on the CPU so the GPU's memory goes to L2.
        # One file serving both tiers (one model, or L2 standing in for a broken L1) is loaded
        # once, planned for the GPU: the manager keeps one worker per file.
        worker = self.manager.get(model, gpu=level != "L1" or model == self.tiers.get("L2"))
        if self.kv is not None and worker.before_close is None:
            kv = self.kv
            worker.before_close = lambda w: kv.release(w.backend)  # evicted or exiting: keep its state
        return LocalTarget(level, worker)

    def _targets(self, level: str, local_only: bool = False) -> Iterator[tuple[LocalTarget | RemoteTarget, str | None]]:
        """Targets to try for `level`, nearest first, each with the fallback note if not `level`.
        `local_only`: never the remote tier (a turn carrying the user's documents)."""
        reasons = []
        for candidate in FALLBACK_ORDER[level]:
            note = f"{level} {reasons[-1]} → {candidate}" if candidate != level and reasons else None
            if candidate == "L3" and local_only:
                reasons.append("not used: documents stay on this computer")
                continue
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
            if candidate != level and self._skip_base(candidate, FALLBACK_ORDER[level]):
                # A fallback is the engine's choice, not the user's: not to a base model while
                # an instruction-tuned tier is further down the list.
                reasons[-1:] = [", ".join(reasons[-1:] + [f"{candidate} holds a base model"])]
                continue
            yield target, note

    def _skip_base(self, candidate: str, order: tuple[str, ...]) -> bool:
        if self.base_models or self.tier_is_instruct(candidate) is not False:
            return False
        later = order[order.index(candidate) + 1:]
        return any(self.tiers.get(c) not in (None, self.tiers.get(candidate)) and self.tier_is_instruct(c)
                   for c in later if c != "L3") or ("L3" in later and self.remote is not None)


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

    def catch_up_summary(self, conv: Conversation, timeout: float = SUMMARY_CATCH_UP_S,
                         cancel: threading.Event | None = None) -> None:
        """Older turns are leaving the window: let the summary covering them finish first (it
        stops yielding to chat requests), queuing it if it is due. Waits at most `timeout`, and
        not at all once `cancel` is set (Stop)."""
        self._maybe_summarize(conv)
        handle = self._summary_jobs.get(conv.id)
        if handle is None or handle.done.is_set():
            return
        handle.urgent.set()
        deadline = time.monotonic() + timeout
        while not handle.done.wait(CATCH_UP_POLL_S):
            if cancel is not None and cancel.is_set():
                handle.urgent.clear()  # nobody waits for it now: it yields to chat requests again
                return
            if time.monotonic() > deadline:
                log.warning("summary of conversation %d not ready after %.0f s; the window moves without it",
                            conv.id, timeout)
                return

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

