"""The engine on its own QThread: the GUI thread never loads a model, tokenizes or waits.

Structured payloads cross threads as JSON text, not as Python dicts/lists: shiboken's conversion
of Python containers in queued signals crashed the interpreter at exit now and then (a refcount
error on a bool, `bool_dealloc`), and plain strings avoid that conversion altogether.

`EngineWorker` lives in a QThread and owns the `Assistant` (engine.api); the window calls its
slots through queued connections and hears back through signals. Tokens are batched: the worker
emits at most one `tokens` signal per TOKEN_BATCH_MS, so a fast model cannot flood the GUI's event
queue. The GUI thread calls only `stop`, `count_tokens` and `status`: none touches a model or waits
on an engine lock (Stop acts within one prompt piece or token).

The local API server (app/api_server.py) serves this worker's Assistant: `post` puts its jobs on
this thread through a queued signal, one at a time, so window turns and API requests take turns
and two threads never drive the Assistant at once.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections import deque
from typing import Callable, Collection

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal, Slot

from engine.api import (Assistant, ConversationNotFound, GenerateParams, InputError, MessageTooLong, ModelLoadError,
                        ModelNotFound, SamplingParams, StorageError, TurnDone, adopt, check_owner)

log = logging.getLogger(__name__)
TOKEN_BATCH_MS = 30


class EngineWorker(QObject):
    """Owns the engine; every slot runs on the engine thread, which owns the worker's state
    (engine/config/ownership.py): another thread changes it with `post`."""

    ready = Signal(str)              # JSON {"model", "tiers", "demo", "memory", "degraded", "documents"}
    failed = Signal(str)             # the engine could not start (message for the user)
    conversations = Signal(str)      # JSON [{"id", "title", "updated"}], newest first
    history = Signal(int, str)       # conversation id, JSON [{"role", "content", "stats", "superseded"}]
    tokens = Signal(int, str)        # conversation id, text since the last emit
    superseded = Signal(int, str)    # a low-confidence answer being re-asked on L2 (JSON, as done)
    done = Signal(int, str)          # conversation id, JSON {"text", "stats", "level", "model", ...}
    turn_failed = Signal(int, str)   # conversation id, message
    too_long = Signal(int, str)      # conversation id, JSON {"tokens", "fits", "n_ctx", "estimated", "message"}
    created = Signal(int)            # a new conversation's id
    notice = Signal(str)             # a one-line result or problem for the status bar / banner
    found = Signal(str, str)         # search query, JSON list of matching conversation ids
    settings_applied = Signal(str)   # JSON list of the changed keys that wait for the next start
    jobs_posted = Signal()           # (to itself, queued) a callable waits in `_posted`: run one

    def __init__(self, model: str | None = None, n_ctx: int | None = None, memory: bool | None = None):
        super().__init__()
        self.model, self.n_ctx, self.use_memory = model, n_ctx, memory
        self.assistant: Assistant | None = None
        self.cancel = threading.Event()  # set from the GUI thread: stops the answer being written
        self._posted: deque[Callable[[], None]] = deque()  # the API server's jobs (any thread appends)
        self._closed = False
        self._hidden: Callable[[], Collection[int]] = tuple
        self.jobs_posted.connect(self._run_posted, Qt.QueuedConnection)

    # ---- lifecycle
    def open_assistant(self) -> Assistant:
        """The engine this worker owns (on the engine thread)."""
        return Assistant.from_settings(model=self.model, n_ctx=self.n_ctx, memory=self.use_memory)

    @property
    def hidden(self) -> Callable[[], Collection[int]]:
        """Conversations the chat list leaves out (the API server's unstored ones): the engine
        thread's; the API server's control thread sets it with `post`."""
        check_owner(self)
        return self._hidden

    @hidden.setter
    def hidden(self, hidden: Callable[[], Collection[int]]) -> None:
        check_owner(self)
        self._hidden = hidden

    @Slot()
    def start(self) -> None:
        adopt(self)  # the engine thread: from here on its slots and posted calls change this worker
        try:
            self.assistant = self.open_assistant()
        except (ModelNotFound, ModelLoadError, ValueError, OSError) as exc:  # OSError: StorageError too
            self.failed.emit(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - reported in the window, with the trace in the log
            log.exception("engine failed to start")
            self.failed.emit(f"internal error: {type(exc).__name__}: {exc}")
            return
        a = self.assistant
        for warning in a.warnings:
            self.notice.emit(warning)
        models = a.status().get("models") or [{}]
        self.ready.emit(json.dumps({"model": a.model_id, "tiers": dict(a.tiers), "demo": bool(models[0].get("demo")),
                                    "memory": a.memory is not None, "degraded": a.degraded,
                                    "documents": a.documents_progress() is not None}))
        self.refresh()

    @Slot()
    def shutdown(self) -> None:
        self._closed = True
        if self._posted:  # the API server is stopped before this: nothing should be left
            log.error("%d API jobs were still waiting when the engine closed", len(self._posted))
            self._posted.clear()
        if self.assistant is not None:
            self.assistant.close()  # models, memory and database, background threads joined
            self.assistant = None
        # Back to the GUI thread: deleting a QObject whose thread has finished crashed the
        # interpreter at exit now and then.
        self.moveToThread(QCoreApplication.instance().thread())

    # ---- conversations
    @Slot()
    def refresh(self) -> None:
        if self.assistant is None:
            return
        hidden = self.hidden()
        self.conversations.emit(json.dumps([{"id": r["id"], "title": r["title"] or "(new chat)",
                                             "updated": r["updated"]} for r in self.assistant.conversations()
                                            if r["id"] not in hidden], ensure_ascii=False))

    @Slot(str)
    def new_conversation(self, system_prompt: str = "") -> None:
        if self.assistant is None:
            return
        cid = self.assistant.new_conversation(system_prompt)
        self.created.emit(cid)
        self.refresh()

    @Slot(str)
    def search(self, query: str) -> None:
        if self.assistant is not None:
            hidden = self.hidden()
            self.found.emit(query, json.dumps([c for c in self.assistant.search_conversations(query)
                                               if c not in hidden]))

    @Slot(int)
    def load(self, conversation_id: int) -> None:
        if self.assistant is None:
            return
        try:
            rows = self.assistant.transcript(conversation_id)
        except ConversationNotFound as exc:
            self.notice.emit(str(exc))
            return
        self.history.emit(conversation_id, json.dumps(rows, ensure_ascii=False))

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
        try:
            text = self.assistant.export(conversation_id, "json" if fmt == "json" else "markdown")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except (OSError, LookupError, InputError) as exc:
            self.notice.emit(f"export failed: {exc}")
            return
        self.notice.emit(f"exported to {path}")

    @Slot()
    def forget_all_memories(self) -> None:
        if self.assistant is not None:
            log.info("forgot %d memories", self.assistant.forget_all_memories())

    @Slot(str)
    def apply_settings(self, keys_json: str) -> None:
        """Settings changed in the dialog: apply what can be applied live, say what waits for a restart."""
        if self.assistant is None:
            return
        settings = self.assistant.settings
        if settings is not None:
            settings.reload()  # another process's or object's write (the window's is this shared one)
        later = [k for k in json.loads(keys_json) if settings is None or not self.assistant.apply_setting(k, settings.get(k))]
        self.settings_applied.emit(json.dumps(sorted(later)))

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

    # ---- a message too long for the context, sent again with the user's choice (MessageTooLong)
    @Slot(int, str, str, float, int, str, bool)
    def send_overflow(self, conversation_id: int, text: str, route: str, temperature: float, max_tokens: int,
                      overflow: str, edit: bool) -> None:
        """`overflow`: "head_tail" or "summarise"; `edit`: the text replaces the last user message."""
        call = "resend_edited" if edit else "send"
        self._turn(conversation_id, lambda a, p: getattr(a, call)(conversation_id, text, p, self.cancel, route=route,
                                                                  overflow=overflow), temperature, max_tokens)

    def _turn(self, conversation_id: int, start, temperature: float, max_tokens: int) -> None:
        """Run one turn's generator, batching tokens into signals."""
        if self.assistant is None:
            self.turn_failed.emit(conversation_id, "the engine is not ready")
            return
        self.cancel.clear()
        settings = self.assistant.settings
        guard = settings is None or bool(settings.get("generate.repetition_guard"))  # read per turn: live
        params = GenerateParams(SamplingParams(temperature=temperature), max_tokens=max_tokens,
                                repetition_guard=guard)
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
        except MessageTooLong as exc:  # the window asks the user: head and tail, a summary, or neither
            self.too_long.emit(conversation_id, json.dumps({"tokens": exc.tokens, "fits": exc.fits, "n_ctx": exc.n_ctx,
                                                            "estimated": exc.estimated, "message": str(exc)}))
        except (InputError, ConversationNotFound, StorageError) as exc:  # StorageError: disk full, read-only
            self.turn_failed.emit(conversation_id, str(exc))
        except Exception as exc:  # noqa: BLE001 - the window stays usable; the trace goes to the log
            log.error("turn failed: %s", traceback.format_exc())
            self.turn_failed.emit(conversation_id, f"internal error: {type(exc).__name__}: {exc}")
        finally:
            self.refresh()

    # ---- the local API server's jobs (app/api_server.py)
    def post(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the engine thread after what is already queued there (window turns included);
        returns at once. Any thread.

        Raises:
            RuntimeError: the engine has closed.
        """
        if self._closed:
            raise RuntimeError("the app's engine has closed")
        self._posted.append(fn)
        self.jobs_posted.emit()

    @Slot()
    def _run_posted(self) -> None:
        if not self._posted:
            return  # dropped at shutdown
        fn = self._posted.popleft()
        try:
            fn()  # the server's own wrapper: it reports its errors to the request
        finally:
            self.refresh()  # a stored API conversation shows up in the list

    # ---- called from the GUI thread: never waits on the engine
    def stop(self) -> None:
        self.cancel.set()

    def count_tokens(self, text: str) -> int | None:
        """Exact tokens of `text` for the L1 model (its vocabulary alone, no model lock)."""
        a = self.assistant
        return a.count_tokens(text) if a is not None else None

    def status(self) -> dict:
        """The engine's latest published status (gauges)."""
        a = self.assistant
        return a.status() if a is not None else {}


def _done_dict(item: TurnDone) -> dict:
    return {"text": item.text, "stats": item.stats, "level": item.level, "model": item.model,
            "route_reason": item.route_reason, "fallback": item.fallback, "message_id": item.message_id}
