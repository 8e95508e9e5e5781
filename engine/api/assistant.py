"""The Assistant every front-end uses: built from settings in one place, owning what it opens.

Threads (docs/architecture.md): a front-end calls `send`/`regenerate`/… from its own engine thread
(never a GUI thread), the Assistant's owner (engine/config/ownership.py); each loaded model runs on its own
thread. `stop`, `count_tokens`, `status` and `published_tiers` are for any thread (a GUI, an
event loop): none touches a model, waits on an engine lock or blocks.
"""

from __future__ import annotations

import logging
import threading
from contextlib import nullcontext
from typing import Any, Iterator

import numpy as np
import psutil

from engine.api.documents import DocumentsApi, embedder_from_settings
from engine.api.engine_config import CONFIG_SETTINGS, engine_config
from engine.api.images import keep_image, kept_image_file
from engine.api.status import StatusPublisher
from engine.chat import branches
from engine.chat.core import AssistantCore, TurnDone
from engine.chat.export import conversation_html, conversation_json, conversation_markdown
from engine.chat.message_record import MessageRecord
from engine.chat.events import TurnEvent
from engine.chat.targets import InputError
from engine.config.paths import db_path
from engine.config.presets import Preset
from engine.config.settings import Settings
from engine.docs.service import DocumentService
from engine.inference.errors import ModelLoadError
from engine.inference.events import GenerateParams
from engine.inference.remote import RemoteClient, RemoteError, config_from_settings
from engine.inference.vocab import VocabTokenizer
from engine.memory.service import MemoryService
from engine.models.catalog import ModelNotFound
from engine.config.ownership import check_owner
from engine.storage import Database, clean_text

log = logging.getLogger(__name__)

EMBEDDER_JOIN_S = 60.0  # longest close() waits for an embedder still loading

# Settings a running engine picks up at once; any other change applies on the next start.
LIVE_SETTINGS = frozenset({
    "cascade.enabled", "cascade.threshold", "router.max_switch_s", "router.base_models", "summary.every_turns",
    "memory.k", "retrieval.max_tokens", "docs.k", "docs.allow_remote", "generate.repetition_guard",
    "confidence.warn_threshold", "l3.base_url", "l3.api_key", "l3.model", "l3.n_ctx", "l3.timeout_s",
    "l3.images",
    "tier.L1", "tier.L2", "router.mode", "ui.language", "ui.theme",
    # read anew each turn: reasoning_options (engine/api/engine_config.py) and the config's quick_no_think
    "reasoning.quick_off", "reasoning.think", "reasoning.budget_tokens", "reasoning.history",
    "speculative.mode",
})


class Assistant(AssistantCore, DocumentsApi):
    """The engine's front door: conversations, turns as event streams, stop, token counts, status.

    Build it with `Assistant.from_settings`; the constructor (AssistantCore's) is for tests that
    wire parts by hand.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._owned: list[Any] = []  # closed, in order, after the models
        self._stop = threading.Event()  # the running turn's Stop (a front-end runs one turn at a time)
        self._tokenizer: VocabTokenizer | None = None
        self.warnings: list[str] = []  # problems met while starting, for the front-end to show
        self.water: dict[int, dict] = {}  # conversation -> its context water level after its last turn
        self._status = StatusPublisher(self)
        self._status.start()

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, memory: bool | None = None,
                      docs: bool | None = None, database: Database | None = None, l3_url: str | None = None,
                      l3_key: str | None = None, l3_model: str | None = None, **overrides: Any) -> "Assistant":
        """The one place where settings become an engine; keyword arguments override settings.

        Args:
            settings: the user's settings (default: `Settings.shared()`, the data dir's file).
            memory: False runs without the vector memory (default: memory.enabled).
            docs: False runs without the documents index (default: docs.enabled).
            database: an open database to use (closed by the caller), else the data dir's own.
            l3_url, l3_key, l3_model: the remote tier instead of the l3.* settings.
            overrides: engine/api/engine_config.py `engine_config`'s keywords: model (one model for
                both local tiers), n_ctx, n_threads, debug, cascade, cascade_threshold,
                vram_budget_mb, n_gpu_layers (-1 = all, 0 = CPU, instead of the planner's choice),
                gpu_device ("auto", "none" or a device name).

        Raises:
            ModelNotFound, ModelLoadError: no local model could be loaded (a message for the user).
            RemoteError: `l3_url` is not a usable URL (a bad URL in the settings only warns).
            StorageError: the database cannot be opened (disk full, read-only data folder).
        """
        settings = settings or Settings.shared()
        warnings: list[str] = []
        try:
            remote = config_from_settings(settings, l3_url, l3_key, l3_model)
        except RemoteError as exc:
            if l3_url is not None:
                raise
            remote = None  # a bad URL in settings: run without L3 and say why
            warnings.append(str(exc))
        config = engine_config(settings, remote=remote, **overrides)
        owned: list[Any] = []
        db = database if database is not None else Database(db_path())
        if database is None:
            owned.append(db)
        service = docs_service = None
        try:
            if memory if memory is not None else settings.get("memory.enabled"):
                service = MemoryService.from_settings(db, settings)  # started once a model is loaded
                owned.insert(0, service)  # closed before the database it writes to
            if docs if docs is not None else settings.get("docs.enabled"):
                embedder = service.embedder if service is not None else embedder_from_settings(settings)
                docs_service = DocumentService.from_settings(db, settings, embedder)
                owned.insert(0, docs_service)  # its indexer stops before the memory and the database
            assistant = cls(db, config, memory=service, docs=docs_service)
        except BaseException:
            for thing in owned:
                thing.close()
            raise
        if service is not None:
            # Only now: a start that fails on its model exits without an embedder half-loaded in
            # native code (an exit then ended in std::terminate).
            service.start()
        if docs_service is not None:
            # The embedder loads when documents need it (memory starts it anyway when it is on).
            docs_service.start()  # resumes folders whose indexing a quit or crash interrupted
            if settings.get("docs.watch"):
                docs_service.watch()
        assistant._owned = owned
        assistant.warnings = warnings + settings.problems()
        # The first snapshot was taken before memory and documents started: a reader must never see
        # a state already left behind ("not started"), even for the half second until the next one.
        assistant._status.refresh()
        assistant.settings = settings
        assistant.load_tokenizer()
        return assistant

    # ---- lifecycle
    def close(self) -> None:
        """Stop the running turn, unload the models (their KV state goes to the tiers), then close
        the memory and the database this assistant opened. Background threads are joined."""
        self._stop.set()
        self._status.close()
        super().close()
        embedders = []
        for thing in self._owned:
            thing.close()
            embedder = getattr(thing, "embedder", None)
            if embedder is not None and embedder not in embedders:
                embedders.append(embedder)  # shared by memory and documents: closed once both are
        for embedder in embedders:  # never leave the interpreter while ONNX Runtime is still loading
            if embedder.state == "loading":
                embedder.wait(EMBEDDER_JOIN_S)
            embedder.close()  # its thread owns the session: ended before the interpreter tears down
        self._owned = []
        tokenizer, self._tokenizer = self._tokenizer, None
        if tokenizer is not None:
            tokenizer.close()

    def stop(self) -> None:
        """Stop the answer being written (within one prompt piece or token); any thread may call it."""
        self._stop.set()

    # ---- lock-free reads (any thread, the GUI's included)
    def load_tokenizer(self) -> None:
        """(Re)load the vocabulary that `count_tokens` uses: the L1 model's (engine thread)."""
        try:
            path = self.manager.resolve(self.tiers["L1"]).path
            fresh = VocabTokenizer(path)
        except (ModelNotFound, ModelLoadError, OSError) as exc:
            log.warning("no token counter: %s", exc)
            fresh = None
        old, self._tokenizer = self._tokenizer, fresh
        if old is not None:
            old.close()

    def count_tokens(self, text: str) -> int | None:
        """Exact tokens of `text` as a message for the L1 model; None while no vocabulary is loaded.
        Never waits on a model or the engine."""
        tokenizer = self._tokenizer
        if tokenizer is None:
            return None
        try:
            return tokenizer.count(text)
        except ValueError:  # replaced meanwhile
            return None

    def status(self) -> dict:
        """The latest status snapshot, published by the engine every STATUS_S: loaded models, KV
        pages, devices, RAM, memory, context water levels. Never blocks."""
        return self._status.latest

    # ---- conversations (reads)
    def conversations(self) -> list[dict]:
        """Every conversation, pinned ones first, then newest first: {"id", "title", "updated",
        "model", "pinned"}."""
        rows = sorted(self.db.conversations(), key=lambda r: (bool(r["pinned"]), r["updated"]), reverse=True)
        return [{"id": r["id"], "title": r["title"], "updated": r["updated"], "model": r["model"],
                 "pinned": bool(r["pinned"])} for r in rows]

    def search_conversations(self, query: str) -> list[int]:
        return self.db.search_conversations(query)

    def messages(self, conversation_id: int) -> list[MessageRecord]:
        """Every stored message, in the order written, typed (engine/chat/message_record.py):
        "superseded" means off the chat's current path (another branch); "branches" lists every
        message at its place, oldest first, when it has siblings (answers given again, messages
        edited)."""
        self.conversation(conversation_id)  # ConversationNotFound for an unknown id
        rows = self.db.messages(conversation_id)
        siblings = branches.siblings(rows)
        return [MessageRecord.of(r, siblings.get(r["id"])) for r in rows]

    def transcript(self, conversation_id: int) -> list[dict]:
        """`messages` as JSON-shaped dicts: {"id", "role", "content", "reasoning" (a reasoning
        model's thinking, else None), "stats", "superseded" (off the chat's current path: another
        branch), "tool_calls" (an answer's calls, OpenAI-shaped, else None), "tool_call_id" (a tool
        result's, else None), "parent_id" (the message it follows), "branches" (every message at
        its place, oldest first, when it has siblings: answers given again, messages edited; else
        None), "images" (a message's images: [{"digest", "at"}], else None)}."""
        return [m.as_dict() for m in self.messages(conversation_id)]

    def add_image(self, data: bytes, name: str = "the image") -> dict:
        """Keep an image for a message: {"digest" (for `send(..., images=[...])`), "width",
        "height", "format", "frames" (> 1: an animation, its first frame used), "scaled_from"}.

        Raises:
            InputError: not an image this app reads, damaged, or too large, in words.
        """
        return keep_image(data, name)

    def image_path(self, digest: str):
        """Where a sent image's file is kept (a thumbnail's source), or None."""
        return kept_image_file(digest)

    def vision_tiers(self) -> list[str]:
        """The tiers whose model reads images (a local model with its projector beside it), the
        ones an image turn can go to; the engine thread's, like `tiers`."""
        check_owner(self)
        return [level for level in ("L1", "L2", "L3") if self.tier_set.sees_images(level)]

    def tier_fits(self) -> dict[str, str]:
        """How each tier's model runs here ("gpu", "partial", "cpu", "too_big", "unknown"; L3
        "remote"): the model picker's labels. The engine thread's, like `tiers`."""
        check_owner(self)
        return self.tier_set.fits(psutil.virtual_memory().available)

    def export(self, conversation_id: int, fmt: str = "markdown", reasoning: bool = False) -> str:
        """The conversation as Markdown, JSON or HTML text (a page of its own, every text escaped).
        A reasoning model's thinking is a field of its own in JSON; in Markdown and HTML only with
        `reasoning` (folded above the answer)."""
        if fmt not in ("markdown", "json", "html"):
            raise InputError(f"export format must be markdown, json or html, not {fmt!r}")
        self.conversation(conversation_id)
        if fmt == "json":
            return conversation_json(self.db, conversation_id)
        if fmt == "html":
            return conversation_html(self.db, conversation_id, reasoning)
        return conversation_markdown(self.db, conversation_id, reasoning)

    def new_conversation_from(self, messages: list[tuple], system_prompt: str = "") -> int:
        """A new conversation holding earlier turns that happened elsewhere (an API client's resent
        history): (role, content) or (role, content, fields) with role user, assistant or tool and
        fields an answer's {"tool_calls": [...]} (OpenAI-shaped), a result's {"tool_call_id"} or a
        user message's {"images": [{"digest", "at"}]} (kept by `add_image`), stored as they are; no
        model runs. The next `send` reads them like any stored turn
        (tokenized then, since no ids were stored).

        Raises:
            InputError: another role.
        """
        bad = sorted({m[0] for m in messages if m[0] not in ("user", "assistant", "tool")})
        if bad:
            raise InputError(f"earlier turns must be user, assistant or tool messages, not {', '.join(bad)}")
        cid = self.new_conversation(system_prompt)
        parent = None
        for role, content, *rest in messages:
            fields = (rest[0] if rest else None) or {}
            parent = self.db.add_message(cid, role, clean_text(content).strip(), tool_calls=fields.get("tool_calls"),
                                         tool_call_id=fields.get("tool_call_id"), parent_id=parent,
                                         images=fields.get("images"))
        return cid

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete a conversation everywhere: its rows, memory chunks, KV snapshots and water level."""
        super().delete_conversation(conversation_id)
        self.water.pop(conversation_id, None)  # the status thread copies it twice a second

    # ---- embeddings (the memory's embedding model, shared with documents)
    def embedding_model(self) -> str | None:
        """The id of the model `embed` uses; None when memory and documents are both off."""
        embedder = self._embedder()
        return embedder.model_id if embedder is not None else None

    def embed(self, texts: list[str], wait_s: float = 60.0) -> np.ndarray:
        """Sentence embeddings of `texts` from the memory's model: float32, (len(texts), dim), each
        row L2-normalised, computed on the embedder's own thread; waits up to `wait_s` for a model
        still loading. The owner's call, like a turn (the API server runs it as a job on its
        engine thread).

        Raises:
            InputError: memory and documents are both off (there is no embedding model).
            EmbedderNotReady: the model failed to load, or is still loading after `wait_s`.
        """
        check_owner(self)
        embedder = self._require_embedder()
        embedder.wait(wait_s)
        return embedder.embed(list(texts))

    def embedding_tokens(self, texts: list[str]) -> list[int]:
        """How many tokens the embedding model reads of each text (cut at its limit): what an
        `embed` of them costs. The owner's call, like `embed` (it waits for the embedder's thread).

        Raises:
            InputError: memory and documents are both off (there is no embedding model).
            EmbedderNotReady: the model failed to load, or the embedder is closed.
        """
        check_owner(self)
        return self._require_embedder().count_tokens(list(texts))

    def _require_embedder(self):
        embedder = self._embedder()
        if embedder is None:
            raise InputError("there is no embedding model: turn on the memory (setting memory.enabled)")
        return embedder

    def _embedder(self):
        for owner in (self.memory, self.docs):
            embedder = getattr(owner, "embedder", None)
            if embedder is not None:
                return embedder
        return None

    def forget_all_memories(self) -> int:
        gone = self.memory.forget_all() if self.memory is not None else 0
        self.db.scrub()  # the forgotten text out of the WAL (the file's pages are zeroed: secure_delete)
        return gone

    # ---- presets
    def apply_preset(self, conversation_id: int, preset: Preset) -> None:
        """Give a chat a preset: its system prompt, its tier (the chat's route) and documents on or
        off (unless the preset leaves them as they stand), kept with the chat. A front-end reads
        the preset's temperature and tools for each turn."""
        preset = preset.checked()
        self.set_conversation_system_prompt(conversation_id, preset.system_prompt)
        self.set_conversation_route(conversation_id, preset.tier)
        if preset.documents is not None:  # None: the chat's own switch, as it stands
            self.set_conversation_docs(conversation_id, True if preset.documents else None)
        self.set_conversation_preset(conversation_id, preset.id)

    # ---- turns: the caller's stop event, or the assistant's own Stop
    def send(self, conversation_id: int, text: str, params: GenerateParams = GenerateParams(), *,
             cancel: threading.Event | None = None, **options: Any) -> Iterator[TurnEvent]:
        """AssistantCore.send, stopped by `cancel` or, without one, by `stop()`."""
        return self._observe(super().send(conversation_id, text, params, cancel=self._stop_for(cancel), **options))

    def regenerate(self, conversation_id: int, params: GenerateParams = GenerateParams(), *,
                   cancel: threading.Event | None = None, **options: Any) -> Iterator[TurnEvent]:
        return self._observe(super().regenerate(conversation_id, params, cancel=self._stop_for(cancel), **options))

    def send_tool_results(self, conversation_id: int, results: list[tuple[str, str]],
                          params: GenerateParams = GenerateParams(), *, cancel: threading.Event | None = None,
                          **options: Any) -> Iterator[TurnEvent]:
        """AssistantCore.send_tool_results, stopped by `cancel` or, without one, by `stop()`."""
        return self._observe(super().send_tool_results(conversation_id, results, params,
                                                       cancel=self._stop_for(cancel), **options))

    def _stop_for(self, cancel: threading.Event | None) -> threading.Event:
        check_owner(self)  # every turn starts here: on the thread that drives this Assistant
        if cancel is not None:
            return cancel
        self._stop.clear()
        return self._stop

    def _observe(self, events: Iterator[TurnEvent]) -> Iterator[TurnEvent]:
        with self.docs.turn() if self.docs is not None else nullcontext():  # indexing waits for the turn
            for item in events:
                if isinstance(item, TurnDone) and item.stats.context:
                    self.water[item.conversation_id] = item.stats.context
                yield item

    # ---- settings
    def apply_setting(self, key: str, value: Any) -> bool:
        """Apply a changed setting to the running engine (engine thread). True: in effect now;
        False: it applies on the next start (the front-end says so)."""
        if key not in LIVE_SETTINGS:
            return False
        if key in CONFIG_SETTINGS:
            field, convert = CONFIG_SETTINGS[key]
            self.configure(**{field: convert(value)})
        elif key == "generate.repetition_guard":
            pass  # front-ends read it into each turn's GenerateParams: the next turn has it
        elif key == "docs.k":
            if self.docs is not None:
                self.docs.k = int(value)
        elif key.startswith("l3."):
            self._reconnect_remote()
        elif key in ("tier.L1", "tier.L2") and not self.single_model:
            self.set_tier(key[5:], value)  # loaded on the next turn that needs it
            if key == "tier.L1":
                self.load_tokenizer()
        return True

    def _reconnect_remote(self) -> None:
        try:
            config = config_from_settings(self.settings)
        except RemoteError as exc:
            self.warnings.append(str(exc))
            config = None
        old, self.remote = self.remote, RemoteClient(config) if config and config.base_url else None
        if old is not None:
            old.close()
