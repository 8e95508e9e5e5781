"""The engine on its own thread: the GUI thread never loads a model, tokenizes or waits.

`EngineWorker` owns the `Assistant` (engine.api) on a `Runner` named "engine" (app/background.py):
the window hands it calls with `call(fn, on_done)`, `fn(assistant)` runs on the engine thread and
`on_done(result)` comes back on the GUI thread. Tokens are batched: a turn sends at most one
`tokens` batch per TOKEN_BATCH_MS, so a fast model cannot flood the GUI's event queue. The GUI
thread calls only `stop`, `count_tokens` and `status` directly: none touches a model or waits on an
engine lock (Stop acts within one prompt piece or token).

The local API server (app/api_server.py) serves this worker's Assistant: its `post` is the engine
Runner's `run`, so window turns and API requests take turns and two threads never drive the
Assistant at once.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import closing
from typing import Callable, Collection, TypeVar

from PySide6.QtCore import QObject, Signal

from app.background import Runner
from app.chat_controller import TurnOptions, TurnStart
from app.errors import TURN_ERRORS, USER_ERRORS, said  # noqa: F401 - the window's parts import them from here
from app.transcript import Answer
from engine.api import (Approval, Assistant, Chunk, GenerateParams, InputError, ModelLoadError, ModelNotFound,
                        ReasoningChunk, Retracted, SamplingParams, Toolbox, ToolCallEvent, ToolResultEvent, TurnDone,
                        TurnFold, TurnTools, adopt, check_owner, reasoning_options, unknown_event)

log = logging.getLogger(__name__)
TOKEN_BATCH_MS = 30
T = TypeVar("T")


class EngineWorker(QObject):
    """Owns the engine; what runs on the engine thread owns the worker's state
    (engine/config/ownership.py): another thread changes it with `post`. Made and called on the
    GUI thread."""

    tokens = Signal(int, str)  # (emitted on the GUI thread) conversation id, text since the last batch
    thinking = Signal(int, str)  # the same for a reasoning model's thinking

    def __init__(self, model: str | None = None, n_ctx: int | None = None, memory: bool | None = None):
        super().__init__()
        self.model, self.n_ctx, self.use_memory = model, n_ctx, memory
        self.assistant: Assistant | None = None
        self.cancel = threading.Event()  # set from the GUI thread: stops the answer being written
        self.closing = False
        self.runner: Runner | None = None
        self._hidden: Callable[[], Collection[int]] = tuple
        # GUI-thread receivers the window sets: a one-line result or problem, the chat list.
        self.on_notice: Callable[[str], None] = lambda text: log.info("%s", text)
        self.on_conversations: Callable[[list[dict]], None] = lambda rows: None
        # A tool call to approve: (Approval, reply) on the GUI thread; reply("once" | "always" | "deny")
        # from any thread.
        self.on_approval: Callable[[Approval, Callable[[str], None]], None] = lambda approval, reply: reply("deny")
        self.on_approval_ended: Callable[[], None] = lambda: None
        self.toolbox: Toolbox | None = None  # the built-in tools and mcp.json's servers (made with the engine)

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

    def start(self, on_ready: Callable[[dict], None], on_failed: Callable[[str], None]) -> None:
        """Open the engine on its thread: `on_ready(info)` or `on_failed(message)` on the GUI thread."""
        self.runner = Runner("engine", self)
        self.runner.run(self._open, on_ready, lambda exc: on_failed(self._start_error(exc)))
        self.refresh()

    def retry(self, on_ready: Callable[[dict], None], on_failed: Callable[[str], None]) -> None:
        """Open the engine again on its thread, after a failed start (a model or setting changed)."""
        if self.runner is None or self.assistant is not None or self.closing:
            return
        self.runner.run(self._open, on_ready, lambda exc: on_failed(self._start_error(exc)))
        self.refresh()

    def _open(self) -> dict:
        adopt(self)  # the engine thread: from here on what runs there changes this worker
        a = self.assistant = self.open_assistant()
        self.toolbox = Toolbox.for_assistant(a)  # reads mcp.json; no server starts until a turn needs it
        for warning in a.warnings + self.toolbox.problems:
            self.runner.to_gui(self.on_notice, warning)
        models = a.status().get("models") or [{}]
        return {"model": a.model_id, "tiers": dict(a.tiers), "vision": a.vision_tiers(), "fits": a.tier_fits(),
                "demo": bool(models[0].get("demo")),
                "memory": a.memory is not None, "degraded": a.degraded,
                "documents": a.documents_progress() is not None}

    @staticmethod
    def _start_error(exc: BaseException) -> str:
        if isinstance(exc, (ModelNotFound, ModelLoadError, ValueError, OSError)):  # OSError: StorageError too
            return str(exc)
        log.error("engine failed to start", exc_info=exc)
        return f"internal error: {type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Cancel the turn, run what is queued, close the Assistant and end the thread (GUI thread,
        at the window's close: the one wait on the engine, after the API server has stopped)."""
        self.closing = True
        self.cancel.set()
        if self.runner is not None:
            self.runner.close(self._shutdown)

    def _shutdown(self) -> None:
        if self.toolbox is not None:
            self.toolbox.close()  # every MCP server's process group ends
            self.toolbox = None
        if self.assistant is not None:
            self.assistant.close()  # models, memory and database, background threads joined
            self.assistant = None

    # ---- calls
    def call(self, fn: Callable[[Assistant], T], on_done: Callable[[T], None] | None = None,
             refresh: bool = False) -> None:
        """`fn(assistant)` on the engine thread, after what is queued there; `on_done(result)` on the
        GUI thread. An error goes to `on_notice`; `refresh`: the chat list is read again after it.
        Nothing runs while the engine has not started."""
        def job():
            if self.assistant is None:
                raise _NotReady
            return fn(self.assistant)

        def failed(exc: BaseException) -> None:
            if not isinstance(exc, _NotReady):
                self.on_notice(said(exc))

        self.post_call(job, on_done, failed)
        if refresh:
            self.refresh()

    def post_call(self, op: Callable[[], T], on_done: Callable[[T], None] | None,
                  on_error: Callable[[BaseException], None] | None) -> None:
        """`op()` on the engine thread (the window's own calls: refused quietly once it closes)."""
        if self.runner is None:
            return
        try:
            self.runner.run(op, on_done, on_error)
        except RuntimeError:
            log.debug("engine call dropped: the engine has closed")

    def refresh(self) -> None:
        """Read the chat list again (its rows go to `on_conversations`)."""
        self.call(self._rows, self.on_conversations)

    def _rows(self, a: Assistant) -> list[dict]:
        hidden = self.hidden()
        return [{"id": r["id"], "title": r["title"] or "(new chat)", "updated": r["updated"], "pinned": r["pinned"]}
                for r in a.conversations() if r["id"] not in hidden]

    def search(self, query: str, on_found: Callable[[str, list[int]], None]) -> None:
        def found(a: Assistant) -> list[int]:
            hidden = self.hidden()
            return [c for c in a.search_conversations(query) if c not in hidden]

        self.call(found, lambda ids: on_found(query, ids))

    def export(self, conversation_id: int, path: str, fmt: str) -> None:
        def write(a: Assistant) -> None:
            text = a.export(conversation_id, {"md": "markdown", "json": "json", "html": "html"}[fmt])
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)

        self.post_call(lambda: write(self.assistant), lambda _r: self.on_notice(f"exported to {path}"),
                       lambda exc: self.on_notice(f"export failed: {said(exc)}"))

    def apply_settings(self, keys: list[str], on_applied: Callable[[list[str]], None]) -> None:
        """Settings changed in the dialog: apply what can be applied live; `on_applied` gets the keys
        that wait for a restart."""
        def apply(a: Assistant) -> list[str]:
            settings = a.settings
            if settings is not None:
                settings.reload()  # another process's or object's write (the window's is this shared one)
            return sorted(k for k in keys if settings is None or not a.apply_setting(k, settings.get(k)))

        self.call(apply, on_applied)

    # ---- turns
    def turn(self, conversation_id: int, start: TurnStart, options: TurnOptions,
             on_event: Callable[[int, object], None], on_error: Callable[[int, BaseException], None]) -> None:
        """Run one turn on the engine thread: token batches go to `tokens` (a reasoning model's
        thinking to `thinking`); each answer (`Answer`), the cascade's `Retracted` and each tool
        call and result go to `on_event`, in order; an exception that ended the turn
        (MessageTooLong: the window asks the user) to `on_error`; then the chat list is read
        again. `options`: the window's switches (Think, Tools: the toolbox's tools, each call
        approved)."""
        if self.runner is None or self.runner.closed or self.closing:
            return
        self.runner.run(lambda: self._turn(conversation_id, start, options, on_event),
                        on_error=lambda exc: on_error(conversation_id, exc))
        self.refresh()

    def _turn(self, cid: int, start: TurnStart, options: TurnOptions, on_event: Callable[[int, object], None]) -> None:
        if self.assistant is None:
            raise InputError("the engine is not ready")
        if self.closing:
            return  # queued behind the turn the close cancelled
        self.cancel.clear()
        params = turn_params(self.assistant.settings, options.temperature, options.max_tokens, options.think)
        batch = _Batches(self.runner, cid, self.tokens, self.thinking)
        fold = TurnFold()
        # The toolbox's sources are asked on this thread (the built-ins read stores it owns).
        tools = TurnTools(self.toolbox.runner(), self.approve) if options.tools and self.toolbox is not None else None
        events = start(self.assistant, params, self.cancel, tools)
        with closing(events):  # an error here stops the model now, not at garbage collection
            for item in events:
                match fold.take(item):
                    case Chunk() | ReasoningChunk():
                        batch.add(item)
                        continue
                    case TurnDone():
                        event = Answer.of(item)  # a snapshot: the engine's own object stays on this thread
                    case Retracted() | ToolCallEvent() | ToolResultEvent():
                        event = item  # frozen
                    case _:
                        unknown_event(item)
                batch.flush()
                self.runner.to_gui(on_event, cid, event)
        batch.flush()
        if fold.final is not None and fold.final.tool_calls:
            # Stopped between rounds (at an approval, in a tool): the calls were the last answer.
            # The window hears the turn end as for any stopped answer.
            self.runner.to_gui(on_event, cid, Answer.of(fold.final).stopped())

    # ---- tools (on the engine thread, in a turn)
    def approve(self, approval: Approval) -> str:
        """Put a call to the user and wait for the answer (the engine's thread waits; the window
        does not). Stop or closing the app denies it."""
        answered, box = threading.Event(), {}

        def reply(decision: str) -> None:
            box.setdefault("decision", decision)
            answered.set()

        self.runner.to_gui(self.on_approval, approval, reply)
        while not answered.wait(0.05):
            if self.cancel.is_set() or self.closing:
                self.runner.to_gui(self.on_approval_ended)
                return "deny"
        return box["decision"]

    # ---- the local API server's jobs (app/api_server.py)
    def post(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the engine thread after what is already queued there (window turns included);
        returns at once. Any thread. The chat list is read again after it (a stored API
        conversation shows up).

        Raises:
            RuntimeError: the engine has closed (or not started).
        """
        if self.runner is None:
            raise RuntimeError("the app's engine has not started")
        self.runner.run(fn)
        self.refresh()

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


class _NotReady(Exception):
    """A call made before the engine started, or after it failed to: nothing to say."""


def turn_params(settings, temperature: float, max_tokens: int, think: bool | None) -> GenerateParams:
    """A window turn's parameters, the settings read per turn (live). `think`: the chat's Think
    switch (None: the reasoning.think setting)."""
    guard = settings is None or bool(settings.get("generate.repetition_guard"))
    return GenerateParams(SamplingParams(temperature=temperature), max_tokens=max_tokens, repetition_guard=guard,
                          **reasoning_options(settings, think=think))


class _Batches:
    """A turn's streamed text, answer and thinking apart, handed to the GUI thread at most every
    TOKEN_BATCH_MS: a signal per token would flood the window's event loop."""

    def __init__(self, runner: Runner, cid: int, tokens, thinking):
        self.runner, self.cid, self.signals = runner, cid, {False: tokens, True: thinking}
        self.pending: list[str] = []
        self.kind = False  # what `pending` holds: thinking (True) or answer text
        self.last = time.monotonic()

    def add(self, item) -> None:
        kind = isinstance(item, ReasoningChunk)
        if kind != self.kind:
            self.flush()
            self.kind = kind
        self.pending.append(item.text)
        now = time.monotonic()
        if (now - self.last) * 1000 >= TOKEN_BATCH_MS:
            self.flush()
            self.last = now

    def flush(self) -> None:
        if self.pending:
            self.runner.to_gui(self.signals[self.kind].emit, self.cid, "".join(self.pending))
            self.pending = []
