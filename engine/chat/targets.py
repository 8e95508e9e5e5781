"""Where a turn runs: a local model's inference thread (L1/L2) or the remote endpoint (L3).

Both stream the same `Chunk`s and end with a `TurnResult`, so the facade persists and reports
them alike.
"""

from __future__ import annotations

import threading
from typing import Iterator

from engine.inference.backend import ContextFull, DecodeError
from engine.chat.window import Window, apply_shift, fit_window, session_counter
from engine.inference.generate import Chunk, GenerateParams, TurnResult, TurnStats, common_prefix, generate
from engine.kv.tiers import KVTiers
from engine.inference.remote import RemoteClient, estimate_prompt
from engine.inference.runtime import FOREGROUND, Job, Worker
from engine.chat.session import Message, Session


class InputError(ValueError):
    """The user's message cannot be sent as it is (empty, too long, no room left)."""


class LocalTarget:
    remote = False

    def __init__(self, level: str, worker: Worker):
        self.level, self.worker = level, worker

    @property
    def model_id(self) -> str:
        return self.worker.model.id

    @property
    def identity(self) -> str:
        return self.worker.backend.identity

    def session(self, history: list[Message]) -> Session:
        return Session(self.worker.backend, self.worker.template, history)

    def fit(self, system: list[Message], turns: list[Message], user: Message, params: GenerateParams,
            first_kept: int = 0) -> Window:
        """The window for this turn; InputError if the message alone cannot fit.
        Tokenizing reads only the vocabulary, so it is safe beside the model's thread."""
        n_ctx = self.worker.backend.n_ctx
        n_user = len(self.session([]).content_ids(user))
        if n_user > n_ctx // 2:
            raise InputError(f"message too long for this model: {n_user} tokens, the context holds {n_ctx}")
        reserve = min(params.max_tokens, n_ctx // 4)  # room for the answer
        try:
            return fit_window(session_counter(self.session([])), n_ctx, system, turns, user, reserve, first_kept)
        except ValueError as exc:
            raise InputError(str(exc)) from exc

    def uncached_tokens(self, history: list[Message], user: Message) -> int:
        """Tokens this model would evaluate for the next turn: the prompt minus its cached prefix."""
        prompt = self.session(history).prompt(user)
        kv = self.worker.backend.kv_tokens
        return len(prompt) - common_prefix(kv, prompt)

    def stream(self, history: list[Message], user: Message, params: GenerateParams,
               cancel: threading.Event | None, window_moved: bool = False, *,
               tiers: KVTiers | None = None, conversation_id: int | None = None) -> Iterator[Chunk | TurnResult]:
        def run(worker: Worker, job: Job) -> None:
            prompt = self.session(history).prompt(user)
            # Another conversation in the context: park it, bring this one's state from RAM or disk.
            restore = tiers.prepare(worker.backend, conversation_id, prompt) if tiers and conversation_id else None
            shift = None
            if window_moved:  # the oldest turns left the window: shift the cache, else re-evaluate
                shift = "kv" if apply_shift(worker.backend, prompt) else "reeval"
            try:
                piece = worker.prefill_piece()
                for item in generate(worker.backend, prompt, params, job.cancel, piece):
                    if isinstance(item, TurnResult):
                        item.stats.context_shift = shift
                        if restore is not None:
                            item.stats.restored_from = restore.restored_from
                            item.stats.restore_ms = round(restore.restore_ms, 2)
                            item.stats.park_ms = round(restore.park_ms, 2)
                            item.stats.ttft_ms += restore.restore_ms + restore.park_ms
                        worker.note_prompt_speed(item.stats.prompt_tokens_evaluated, item.stats.prompt_ms / 1000,
                                                 piece, item.stats.decode_tps)
                        worker.publish(conversation_id)  # before the caller hears the turn ended
                    job.emit(item)
            except ContextFull as exc:
                raise InputError(f"this conversation is full: {exc}; start a new one") from exc
            except DecodeError as exc:  # what was read stays cached; what was shown stays stored
                raise InputError(f"the model stopped with an error: {exc}. Send the message again, or "
                                 "start a new chat if it keeps happening") from exc
            finally:
                worker.publish(conversation_id)

        if cancel is not None and cancel.is_set() and not window_moved:
            # Stopped before the model was asked (while memories were retrieved, the window fitted
            # or a summary awaited): end now rather than queue behind the model's other work.
            yield self._stopped_before_start(history, user)
            return
        yield from self.worker.submit(run, FOREGROUND, cancel)

    def _stopped_before_start(self, history: list[Message], user: Message) -> TurnResult:
        prompt = self.session(history).prompt(user)  # the vocabulary only, beside the model's thread
        kv = self.worker.view.kv_tokens
        cached = common_prefix(kv, prompt)
        return TurnResult([], "", [], TurnStats(len(prompt), 0, cached, 0, 0.0, 0.0, 0.0, "cancelled",
                                                "append" if cached else "fresh"))


class RemoteTarget:
    remote = True
    level = "L3"
    identity = None

    def __init__(self, client: RemoteClient):
        self.client = client

    @property
    def model_id(self) -> str:
        return f"L3:{self.client.model_name}"

    def fit(self, system: list[Message], turns: list[Message], user: Message, params: GenerateParams,
            first_kept: int = 0) -> Window:
        """The window within the endpoint's configured context, counted with tiktoken: an
        estimate (the remote tokenizer is unknown), labelled so."""
        n_ctx = self.client.config.n_ctx
        n_user = estimate_prompt([user])
        if n_user > n_ctx // 2:
            raise InputError(f"message too long for the L3 model: ~{n_user} tokens, its context holds {n_ctx}")
        reserve = min(params.max_tokens, n_ctx // 4)
        try:
            return fit_window(estimate_prompt, n_ctx, system, turns, user, reserve, first_kept, estimated=True)
        except ValueError as exc:
            raise InputError(str(exc)) from exc

    def stream(self, history: list[Message], user: Message, params: GenerateParams,
               cancel: threading.Event | None, window_moved: bool = False, **_) -> Iterator[Chunk | TurnResult]:
        messages = [{"role": m.role, "content": m.text_for_model} for m in history + [user]]
        yield from self.client.stream_chat(messages, params, cancel)
