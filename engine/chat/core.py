"""The assistant's core: conversations, the tiers that answer them, and turns as a pipeline.

A turn is `TurnRequest` → the stages of engine/chat/stages (the tool loop, after the answer, route,
recall, cascade, fallback, fit, prompt, store, generate) over explicit collaborators; every entry
point below (send, an edit, a branch, regenerate, tool results) runs the same stages. Front-ends
use engine.api, which builds this from settings (`EngineConfig`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any, Iterator, Mapping

import psutil

from engine.chat.branches import Branches, forked, on_path
from engine.chat.config import EngineConfig
from engine.chat.chat_switches import ChatSwitches
from engine.chat.image_store import image_store
from engine.chat.conversation import Conversation, ConversationNotFound, StableBlock, TurnDone, load_conversation
from engine.chat.doc_recall import DocumentRecall
from engine.chat.memory_recall import MemoryRecall
from engine.chat.pipeline import TurnEvent, compose, stage_names
from engine.chat.request import TurnRequest
from engine.chat.session import Message, Session
from engine.chat.stages import Parts, turn_stages
from engine.chat.stages.cascade import cascade_threshold
from engine.chat.stages.route import Route
from engine.chat.stages.tools import results_turn
from engine.chat.summary_chain import SummaryChain
from engine.chat.targets import InputError, LocalTarget
from engine.chat.tier_set import TierSet
from engine.chat.turn import Turn
from engine.config.ownership import adopt, check_owner
from engine.config.paths import user_dir
from engine.inference.errors import ModelLoadError
from engine.inference.events import GenerateParams
from engine.inference.manager import ModelManager
from engine.inference.runtime import Worker
from engine.inference.remote import RemoteClient
from engine.kv.tiers import WINDOW_DOMAIN, KVTiers
from engine.memory.service import MemoryService
from engine.models.catalog import Catalog, ModelNotFound
from engine.routing.router import RouteDecision
from engine.storage import MAX_MESSAGE_CHARS, Database, clean_text

log = logging.getLogger(__name__)
_WIDE = re.compile(r"[\u1100-\u9fff\uac00-\ud7af\uff00-\uffef]")  # a token each, about

__all__ = ["AssistantCore", "Conversation", "ConversationNotFound", "EngineConfig", "InputError",
           "MAX_MESSAGE_CHARS", "StableBlock", "TurnDone", "TurnRequest"]


class AssistantCore(ChatSwitches):
    """Routed chat over local tiers (L1/L2) and an optional remote L3, with SQLite persistence.

    Args:
        db: the database.
        config: what shapes the engine (engine/chat/config.py).
        manager: the model manager to load with (default: one made from `config`).
        catalog: the model catalog (default: models/catalog.toml).
        memory: the vector memory (started by the caller); None: turns use no memory.
        docs: the documents index (engine/docs `DocumentService`); None: no documents.

    Raises:
        ModelNotFound, ModelLoadError: the first model cannot be loaded (messages for the user).

    It belongs to the thread that drives it (engine/config/ownership.py): the one that built it, or the
    one it was handed to (the API server's "api-engine"). Turns and `tiers` are that thread's; other
    threads read what it publishes (`published_tiers`, each model's view, the status snapshot).
    """

    def __init__(self, db: Database, config: EngineConfig = EngineConfig(), *, manager: ModelManager | None = None,
                 catalog: Catalog | None = None, memory: MemoryService | None = None, docs=None):
        adopt(self)
        self.db, self.config = db, config
        self.memory_recall = MemoryRecall(memory=memory, count=self._count_prompt)
        self.doc_recall = DocumentRecall(docs=docs, db=db, count=self._count_prompt)
        self.settings = None  # the Settings it was built from (engine.api), for live changes
        self.manager = manager or ModelManager(params=config.load, debug=config.debug, catalog=catalog,
                                               vram_budget_mb=config.vram_budget_mb, gpu_device=config.gpu_device,
                                               n_gpu_layers=config.n_gpu_layers, n_ctx_max=config.n_ctx_max)
        self.kv = self._kv_tiers(config)
        remote = RemoteClient(config.remote) if config.remote and config.remote.base_url else None
        self.tier_set = TierSet(manager=self.manager, models=config.tier_models(), single_model=config.model is not None,
                                remote=remote, kv=self.kv)
        self._conversations: dict[int, Conversation] = {}
        self.summary_chain = SummaryChain(db=db, worker=lambda: self._l1().worker)
        self.branches = Branches(db=db, conversations=self._conversations, load=self.conversation,
                                 memory=self.memory_recall, summaries=self.summary_chain, render=self._next_prefix)
        self.stages = turn_stages(Parts(db=db, tiers=self.tier_set, kv=self.kv, memory=self.memory_recall,
                                        documents=self.doc_recall,
                                        summaries=self.summary_chain, conversation=self.conversation))
        self.use_stages(self.stages)
        self.degraded: str | None = None  # why a tier stands in for another since the start
        self._load_first()

    def use_stages(self, stages: tuple) -> None:
        """Run turns through `stages` from the next turn on (engine/chat/pipeline.py)."""
        self.stages, self._pipeline = tuple(stages), compose(stages)
        self._router = next(s for s in self.stages if isinstance(s, Route))
        log.debug("turn stages: %s", " → ".join(stage_names(self.stages)))

    @staticmethod
    def _kv_tiers(config: EngineConfig) -> KVTiers | None:
        if not config.kv_tiers:
            return None
        warm = config.kv_warm_mb * 1e6 if config.kv_warm_mb is not None else min(
            1e9, psutil.virtual_memory().total * 0.1)
        cold = config.kv_cold_mb * 1e6 if config.kv_cold_mb is not None else 2e9
        return KVTiers(user_dir() / "kv", int(warm), int(cold), checkpoint=config.kv_checkpoint)

    def _load_first(self) -> None:
        """Load L1 now: fail early with a clear message."""
        try:
            self.tier_set.local("L1")
        except (ModelNotFound, ModelLoadError) as exc:
            models = self.tier_set.models
            if self.tier_set.single_model or models["L2"] == models["L1"]:
                raise
            # A broken or missing L1 file must not take the app down while L2 works: L2 answers
            # everything, and the user is told why (window banner, CLI stderr).
            self.degraded = f"L1 model unavailable ({exc}); the L2 model answers everything"
            log.warning("%s", self.degraded)
            self.set_tier("L1", models["L2"])
            self.tier_set.local("L1")  # L2 broken too: that error is the one the user sees

    # ---- configuration
    @property
    def memory(self) -> MemoryService | None:
        """The vector memory turns recall from and index into (None: none)."""
        return self.memory_recall.memory

    @memory.setter
    def memory(self, memory: MemoryService | None) -> None:
        self.memory_recall.memory = memory

    @property
    def docs(self):
        """The documents index (engine/docs `DocumentService`), or None."""
        return self.doc_recall.docs

    def configure(self, **changes: Any) -> None:
        """Change `EngineConfig` fields from the next turn on (a turn keeps the one it started with)."""
        self.config = replace(self.config, **changes)

    @property
    def tiers(self) -> dict[str, str]:
        """Level → model (catalog id or .gguf path) for L1 and L2: the owner's (the thread that
        drives turns); any other thread reads `published_tiers`."""
        check_owner(self)
        return self.tier_set.models

    @property
    def published_tiers(self) -> Mapping[str, str]:
        return self.tier_set.published

    def set_tier(self, level: str, model: str) -> None:
        """Use `model` for `level` from the next turn on, and publish the change."""
        check_owner(self)
        self.tier_set.set(level, model)

    @property
    def single_model(self) -> bool:
        return self.tier_set.single_model

    @property
    def remote(self) -> RemoteClient | None:
        return self.tier_set.remote

    @remote.setter
    def remote(self, client: RemoteClient | None) -> None:
        self.tier_set.remote = client

    @property
    def cascade_threshold(self) -> float | None:
        """The threshold below which an auto-routed L1 answer is asked again on L2; None: off."""
        return cascade_threshold(self.config, self.tier_set)

    # ---- single-model conveniences (CLI default, tests)
    def _l1(self) -> LocalTarget:
        target = self.tier_set.local("L1")
        if target is None:  # L1 always has a model (EngineConfig.tier_models)
            raise ModelNotFound("no model is set for L1")
        return target

    @property
    def _primary(self) -> Worker:
        return self._l1().worker  # looked up each time: the manager may have reloaded it

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
        return Session(self.vocab, self.template, self.conversation(conversation_id).history())

    def close(self) -> None:
        """Unload the models (each context's conversation state goes to the KV tiers, and every
        warm snapshot to its cold file, so the next start resumes without re-evaluating)."""
        if self.kv is not None:
            self.kv.exiting = True  # a state its cold file holds already need not be copied again
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

    # ---- turns
    def send(self, conversation_id: int, text: str, params: GenerateParams = GenerateParams(), *,
             after: int | None = None, replacing: int | None = None, **options: Any) -> Iterator[TurnEvent]:
        """Send a user message and stream the answer: `Chunk`s (`ReasoningChunk`s for a reasoning
        model's thinking), then a `TurnDone`; when the cascade re-asks a weak L1 answer on L2, a
        `Retracted` in place of the first answer's TurnDone, then the second answer
        (engine/chat/events.py: the closed set of events, and `TurnFold`). `options` are
        `TurnRequest`'s keyword fields (route, cancel, docs, memory, overflow, tools, …). With
        `tools` (`TurnTools`), each round of calls streams a `ToolCallEvent` and a
        `ToolResultEvent` per call, then the next round's answer; so does every other entry point
        below.

        Args:
            after: branch from an answer on the chat's path: the message follows it, and the turns
                after it leave the path once the message is stored, kept as a branch
                (`switch_branch` goes back).
            replacing: a user message on the path that this one is sent in place of (an edit); it
                and the turns after it leave the path the same way.

        Raises:
            MessageTooLong: the message does not fit the context and overflow is "refuse".
            InputError: empty or oversized message, no room left in the context, or `after` /
                `replacing` is not an answer / a user message on the chat's path.
            ConversationNotFound: unknown id.
        """
        conv = self.conversation(conversation_id)
        if after is None and replacing is None:
            request = TurnRequest(conversation_id=conversation_id, text=text, params=params, **options).checked()
            user = Message("user", request.text, images=list(request.images) or None)
            yield from self._pipeline(Turn(request, self.config, conv, user))
            return
        if replacing is not None:
            at = on_path(conv, replacing)
        else:
            assert after is not None  # one of the two is set: neither is a plain send, above
            at = _turn_end(conv, on_path(conv, after))  # an answer that called tools: its turn ends with its last round
        m = conv.messages[at]
        if replacing is not None and m.role != "user":
            raise InputError("only a message you wrote can be edited")
        if replacing is None and (m.role != "assistant" or m.tool_calls):
            raise InputError("a branch starts after an answer")
        yield from forked(conv, at if replacing is not None else at + 1,
                          lambda cut: AssistantCore.send(self, conversation_id, text, params, replaces=cut, **options))

    def regenerate(self, conversation_id: int, params: GenerateParams = GenerateParams(),
                   message_id: int | None = None, **options: Any) -> Iterator[TurnEvent]:
        """Answer a user message again: the one `message_id` answered (an answer on the chat's
        path; None: the last). The old answer and the turns after it leave the path once the new
        answer starts, kept as a branch.

        Raises:
            InputError: no such answer, or (without `message_id`) the conversation does not end
                with an answered user message.
        """
        conv = self.conversation(conversation_id)
        if message_id is None:
            if len(conv.messages) < 2 or (conv.messages[-1].role, conv.messages[-2].role) != ("assistant", "user"):
                raise InputError("nothing to regenerate: the conversation does not end with an answer")
            at = len(conv.messages) - 1
        else:
            at = on_path(conv, message_id)
        asked = max((i for i in range(at) if conv.messages[i].role == "user"), default=None)
        if conv.messages[at].role != "assistant" or asked is None:
            raise InputError("only an answer to a message can be given again")
        user, old = conv.messages[asked], conv.messages[asked + 1]  # its first round, when it called tools

        def run(later: tuple[int, ...]) -> Iterator:
            request = TurnRequest(kind="regenerate", conversation_id=conversation_id, text=user.content,
                                  params=params, replaces=later, **options).checked()
            return self._pipeline(Turn(request, self.config, conv, user, commit_user=False,
                                       supersedes=TurnDone(conv.id, old.id, "", old.content, [])))

        yield from forked(conv, asked + 2, run)

    def send_tool_results(self, conversation_id: int, results: list[tuple[str, str]],
                          params: GenerateParams = GenerateParams(), **options: Any) -> Iterator[TurnEvent]:
        """The results of the last answer's tool calls, as (call id, output text) in the calls'
        order; the model that made the calls goes on from them (a result is the tool role's turn:
        shown to the model as data, never as the user's words). Stream as `send`.

        Raises:
            InputError: the conversation does not end with calls, a result names no call of it,
                or a result is too long.
        """
        conv = self.conversation(conversation_id)
        calls = conv.messages[-1].tool_calls if conv.messages and conv.messages[-1].role == "assistant" else None
        if not calls:
            raise InputError("no tool calls to answer: the conversation does not end with an answer that called tools")
        known = {c["id"] for c in calls}
        if not results or any(cid not in known for cid, _ in results):
            raise InputError(f"tool results must answer the last answer's calls ({', '.join(sorted(known))})")
        results = [(cid, clean_text(text)) for cid, text in results]
        if any(len(text) > MAX_MESSAGE_CHARS for _, text in results):
            raise InputError(f"a tool result may hold at most {MAX_MESSAGE_CHARS} characters")
        options.setdefault("route", conv.messages[-1].level or "auto")  # the caller's model goes on
        options.setdefault("memory", False)  # the question was kept with its turn; results are data
        request = TurnRequest(kind="tool_results", conversation_id=conversation_id, params=params,
                              **options).checked()
        yield from self._pipeline(results_turn(self.db, conv, self.config, request, results))

    def resend_edited(self, conversation_id: int, text: str, params: GenerateParams = GenerateParams(),
                      message_id: int | None = None, **options: Any) -> Iterator[TurnEvent]:
        """`send` in place of the last user message, or of `message_id` (`replacing`).

        Raises:
            InputError: no user message to edit, or `text` is not sendable.
        """
        if message_id is None:
            message_id = next((m.id for m in reversed(self.conversation(conversation_id).messages)
                               if m.role == "user"), None)
            if message_id is None:
                raise InputError("no message to edit")
        yield from self.send(conversation_id, text, params, replacing=message_id, **options)

    def route(self, conversation_id: int, text: str, forced: str = "auto",
              domain: str = WINDOW_DOMAIN) -> RouteDecision:
        """The level that would answer `text` now (engine/chat/stages/route.py)."""
        return self._router.decide(conversation_id, text, forced, self.config, domain)

    def _count_prompt(self, text: str) -> int:
        """Tokens of `text` for the L1 vocabulary; an estimate (4 Latin characters or 1 CJK
        character a token) while none is loaded."""
        count = getattr(self, "count_tokens", None)
        n = count(text) if count is not None else None
        if n is not None:
            return n
        wide = len(_WIDE.findall(text))
        return wide + (len(text) - wide + 3) // 4

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

    def pin_conversation(self, conversation_id: int, pinned: bool) -> None:
        """Keep a conversation at the top of `conversations()` (or let it go back to its date).

        Raises:
            ConversationNotFound: unknown id.
        """
        self._row(conversation_id)  # ConversationNotFound; the row alone: no transcript to load
        self.db.set_pinned(conversation_id, pinned)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation everywhere: its rows, its memory chunks, its KV snapshots, its images."""
        self.conversation(conversation_id)  # ConversationNotFound for an unknown id
        digests = self.db.conversation_images(conversation_id)
        message_ids = self.db.delete_conversation(conversation_id)
        image_store().remove(digests - self.db.images_in_use(digests))  # no other chat's
        # Every per-conversation map lets go: the API server deletes one conversation per request.
        self._conversations.pop(conversation_id, None)
        self.tier_set.forget(conversation_id)
        self.summary_chain.forget(conversation_id)
        for mid in message_ids:
            self.memory_recall.forget_message(mid)
        if self.kv is not None:
            self.kv.forget(conversation_id)
        self.db.scrub()  # its text out of the WAL: the file keeps only the pages secure_delete zeroed

    # ---- branches (engine/chat/branches.py)
    def switch_branch(self, conversation_id: int, message_id: int) -> dict:
        """Show the branch `message_id` is on (`Branches.switch`)."""
        self.conversation(conversation_id)
        return self.branches.switch(conversation_id, message_id)

    def delete_turn(self, conversation_id: int, message_id: int) -> list[int]:
        """Delete the turn `message_id` is part of (`Branches.delete_turn`); the ids deleted."""
        conv = self.conversation(conversation_id)
        return self.branches.delete_turn(conv, on_path(conv, message_id))

    def _next_prefix(self, conv: Conversation) -> list[int]:
        """The L1 model's tokens for the chat and the markers that open its next user turn."""
        return Session(self.vocab, self.template, conv.history()).next_prefix()

    def map_sizes(self) -> dict[str, int]:
        """Entries in each per-conversation map (engine/api/footprint.py)."""
        return {"summary jobs": len(self.summary_chain.jobs), "conversation cache": len(self._conversations),
                "warm level": len(self.tier_set.warm)}

    # ---- summary chain
    def wait_for_summaries(self, timeout: float | None = None) -> None:
        self.summary_chain.wait(timeout)

    def summaries(self, conversation_id: int) -> list[dict]:
        self.conversation(conversation_id)
        return self.db.summaries(conversation_id)

    def edit_summary(self, summary_id: int, text: str) -> None:
        """Replace a summary with the user's text (engine/chat/summary_chain.py `edit`)."""
        self.summary_chain.edit(summary_id, text)


def _turn_end(conv: Conversation, at: int) -> int:
    """The last message of the turn `at` is part of: an answer's rounds of calls, their results
    and the answer in words after them are one turn (the window shows them as one answer)."""
    messages = conv.messages
    while at + 1 < len(messages) and messages[at].role in ("assistant", "tool") and messages[at + 1].role != "user":
        at += 1
    return at
