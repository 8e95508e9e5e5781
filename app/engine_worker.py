"""The engine on its own QThread: the GUI thread never loads a model, tokenizes or waits.

Structured payloads cross threads as JSON text, not as Python dicts/lists: shiboken's conversion
of Python containers in queued signals crashed the interpreter at exit now and then (a refcount
error on a bool, `bool_dealloc`), and plain strings avoid that conversion altogether.

`EngineWorker` lives in a QThread and owns the `Assistant`; the window calls its slots through
queued connections and hears back through signals. Tokens are batched: the worker emits at most
one `tokens` signal per TOKEN_BATCH_MS, so a fast model cannot flood the GUI's event queue.
Stop is a `threading.Event` the GUI sets directly (the generator checks it every token).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback

from PySide6.QtCore import QCoreApplication, QObject, Signal, Slot

from engine.inference.backend import LoadParams, ModelLoadError, SamplingParams
from engine.models.catalog import ModelNotFound
from engine.chat.assistant import Assistant, ConversationNotFound, InputError, TurnDone
from engine.inference.generate import GenerateParams
from engine.config.paths import db_path
from engine.inference.remote import RemoteError, config_from_settings
from engine.config.settings import Settings
from engine.storage import Database, StorageError

log = logging.getLogger(__name__)
TOKEN_BATCH_MS = 30


class EngineWorker(QObject):
    """Owns the engine; every slot runs on the engine thread."""

    ready = Signal(str)              # JSON {"model", "tiers", "demo", "memory"}
    failed = Signal(str)             # the engine could not start (message for the user)
    conversations = Signal(str)      # JSON [{"id", "title", "updated"}], newest first
    history = Signal(int, str)       # conversation id, JSON [{"role", "content", "stats", "superseded"}]
    tokens = Signal(int, str)        # conversation id, text since the last emit
    superseded = Signal(int, str)    # a low-confidence answer being re-asked on L2 (JSON, as done)
    done = Signal(int, str)          # conversation id, JSON {"text", "stats", "level", "model", ...}
    turn_failed = Signal(int, str)   # conversation id, message
    created = Signal(int)            # a new conversation's id
    notice = Signal(str)             # a one-line result or problem for the status bar / banner
    found = Signal(str, str)         # search query, JSON list of matching conversation ids

    def __init__(self, model: str | None = None, n_ctx: int | None = None, memory: bool | None = None):
        super().__init__()
        self.model, self.n_ctx, self.use_memory = model, n_ctx, memory
        self.assistant: Assistant | None = None
        self.memory_service = None
        self.db: Database | None = None
        self.cancel = threading.Event()  # set from the GUI thread: stops the answer being written

    # ---- lifecycle
    @Slot()
    def start(self) -> None:
        settings = Settings()
        try:
            self.db = Database(db_path())
            use_memory = settings.get("memory.enabled") if self.use_memory is None else self.use_memory
            if use_memory:
                from engine.memory import MemoryService

                self.memory_service = MemoryService.from_settings(self.db, settings).start()
            try:
                remote = config_from_settings(settings)
            except RemoteError as exc:  # a bad URL in settings: run without L3 and say why
                remote = None
                self.notice.emit(str(exc))
            vram = settings.get("runtime.vram_budget_mb")
            self.assistant = Assistant(
                self.db, self.model, LoadParams(n_ctx=self.n_ctx or settings.get("runtime.n_ctx")),
                tiers={"L1": settings.get("tier.L1"), "L2": settings.get("tier.L2")}, remote=remote,
                cascade=settings.get("cascade.enabled"), max_switch_s=settings.get("router.max_switch_s"),
                vram_budget_mb=None if vram < 0 else vram, summary_every=settings.get("summary.every_turns"),
                memory=self.memory_service, memory_k=settings.get("memory.k"),
                kv_warm_mb=settings.get("kv.warm_budget_mb") or None, kv_cold_mb=settings.get("kv.cold_budget_mb"),
                warn_threshold=settings.get("confidence.warn_threshold") or None)
        except (ModelNotFound, ModelLoadError, ValueError, OSError) as exc:
            self.failed.emit(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - reported in the window, with the trace in the log
            log.exception("engine failed to start")
            self.failed.emit(f"internal error: {type(exc).__name__}: {exc}")
            return
        entry = self.assistant.manager.loaded()[0].model.entry
        self.ready.emit(json.dumps({"model": self.assistant.model_id, "tiers": dict(self.assistant.tiers),
                                    "demo": bool(entry and entry.demo), "memory": self.memory_service is not None,
                                    "degraded": self.assistant.degraded}))
        self.refresh()

    @Slot()
    def shutdown(self) -> None:
        if self.assistant is not None:
            self.assistant.close()
            self.assistant = None
        if self.memory_service is not None:
            self.memory_service.close()
        if self.db is not None:
            self.db.close()
        # Back to the GUI thread: deleting a QObject whose thread has finished crashed the
        # interpreter at exit now and then.
        self.moveToThread(QCoreApplication.instance().thread())

    # ---- conversations
    @Slot()
    def refresh(self) -> None:
        if self.db is None:
            return
        rows = sorted(self.db.conversations(), key=lambda r: r["updated"], reverse=True)
        self.conversations.emit(json.dumps([{"id": r["id"], "title": r["title"] or "(new chat)",
                                             "updated": r["updated"]} for r in rows], ensure_ascii=False))

    @Slot(str)
    def new_conversation(self, system_prompt: str = "") -> None:
        if self.assistant is None:
            return
        cid = self.assistant.new_conversation(system_prompt)
        self.created.emit(cid)
        self.refresh()

    @Slot(str)
    def search(self, query: str) -> None:
        if self.db is not None:
            self.found.emit(query, json.dumps(self.db.search_conversations(query)))

    @Slot(int)
    def load(self, conversation_id: int) -> None:
        if self.db is None:
            return
        rows = self.db.messages(conversation_id)
        self.history.emit(conversation_id, json.dumps([{"role": r["role"], "content": r["content"], "stats": r["stats"] or {},
                                             "superseded": r["superseded_by"] is not None} for r in rows], ensure_ascii=False))

    @Slot(int, str)
    def rename(self, conversation_id: int, title: str) -> None:
        try:
            self.assistant.rename_conversation(conversation_id, title)
        except (InputError, ConversationNotFound) as exc:
            self.notice.emit(str(exc))
        self.refresh()

    @Slot(int)
    def delete(self, conversation_id: int) -> None:
        try:
            self.assistant.delete_conversation(conversation_id)
        except ConversationNotFound as exc:
            self.notice.emit(str(exc))
        self.refresh()

    @Slot(int, str, str)
    def export(self, conversation_id: int, path: str, fmt: str) -> None:
        from engine.chat.export import conversation_json, conversation_markdown

        try:
            text = (conversation_json if fmt == "json" else conversation_markdown)(self.db, conversation_id)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except (OSError, LookupError) as exc:
            self.notice.emit(f"export failed: {exc}")
            return
        self.notice.emit(f"exported to {path}")

    @Slot()
    def forget_all_memories(self) -> None:
        if self.memory_service is not None:
            n = self.memory_service.forget_all()
            log.info("forgot %d memories", n)

    # ---- turns
    @Slot(int, str, str, float, int)
    def send(self, conversation_id: int, text: str, route: str, temperature: float, max_tokens: int) -> None:
        self._turn(conversation_id, lambda a, p: a.send(conversation_id, text, p, self.cancel, route=route),
                   temperature, max_tokens)

    @Slot(int, str, float, int)
    def regenerate(self, conversation_id: int, route: str, temperature: float, max_tokens: int) -> None:
        self._turn(conversation_id, lambda a, p: a.regenerate(conversation_id, p, self.cancel, route=route),
                   temperature, max_tokens)

    @Slot(int, str, str, float, int)
    def resend_edited(self, conversation_id: int, text: str, route: str, temperature: float, max_tokens: int) -> None:
        self._turn(conversation_id,
                   lambda a, p: a.resend_edited(conversation_id, text, p, self.cancel, route=route),
                   temperature, max_tokens)

    def _turn(self, conversation_id: int, start, temperature: float, max_tokens: int) -> None:
        """Run one turn's generator, batching tokens into signals."""
        if self.assistant is None:
            self.turn_failed.emit(conversation_id, "the engine is not ready")
            return
        self.cancel.clear()
        params = GenerateParams(SamplingParams(temperature=temperature), max_tokens=max_tokens)
        pending: list[str] = []
        last = time.monotonic()
        try:
            for item in start(self.assistant, params):
                if isinstance(item, TurnDone):
                    if pending:
                        self.tokens.emit(conversation_id, "".join(pending))
                        pending = []
                    (self.superseded if item.superseded else self.done).emit(
                        conversation_id, json.dumps(_done_dict(item), ensure_ascii=False))
                    continue
                pending.append(item.text)
                now = time.monotonic()
                if (now - last) * 1000 >= TOKEN_BATCH_MS:
                    self.tokens.emit(conversation_id, "".join(pending))
                    pending, last = [], now
        except (InputError, ConversationNotFound, StorageError) as exc:  # StorageError: disk full, read-only
            self.turn_failed.emit(conversation_id, str(exc))
        except Exception as exc:  # noqa: BLE001 - the window stays usable; the trace goes to the log
            log.error("turn failed: %s", traceback.format_exc())
            self.turn_failed.emit(conversation_id, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self.refresh()

    # ---- called from the GUI thread: read-only
    def count_tokens(self, text: str) -> int | None:
        """Exact tokens of `text` for the L1 model (a vocabulary lookup, safe beside its thread)."""
        a = self.assistant
        if a is None:
            return None
        try:
            return len(a.backend.tokenize(text, special=False))
        except Exception:  # noqa: BLE001 - a model being swapped: no count this time
            return None

    def kv_pages(self) -> dict:
        a = self.assistant
        return a.kv_pages() if a is not None else {}


def _done_dict(item: TurnDone) -> dict:
    return {"text": item.text, "stats": item.stats, "level": item.level, "model": item.model,
            "route_reason": item.route_reason, "fallback": item.fallback, "message_id": item.message_id}
