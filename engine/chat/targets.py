"""Where a turn runs: a local model's inference thread (L1/L2) or the remote endpoint (L3).

Both stream the same `Chunk`s and end with a `TurnResult`, so the turn's stages store and report
them alike; each says what it can do (`Capabilities`, engine/chat/target.py).
"""

from __future__ import annotations

import base64
import logging
import math
import threading
from typing import Callable, Generator

from engine.inference.backend import SamplingParams
from engine.inference.errors import ContextFull, DecodeError, NoVision
from engine.inference.images import ImageError
from engine.chat.window import (MARKER_ROOM, TooLong, Window, answer_floor, apply_shift, fit_window, group,
                                session_counter)
from engine.inference.events import Chunk, GenerateParams, GenerationStats, ReasoningChunk, TurnResult
from engine.inference.generate import common_prefix, generate
from engine.inference.reasoning import opens_block
from engine.inference.tokens import Drafting
from engine.kv.tiers import WINDOW_DOMAIN, KVTiers
from engine.inference.remote import RemoteClient, estimate_prompt, estimate_tokens
from engine.inference.runtime import BACKGROUND, FOREGROUND, Job, ModelUnloaded, Worker
from engine.chat.image_store import image_store
from engine.chat.session import Message, Session
from engine.chat.conversation import TurnDone
from engine.chat.target import Capabilities
from engine.models.catalog import ModelEntry
from engine.routing.confidence import confidence_report


log = logging.getLogger(__name__)

SUMMARY_PIECE_MAX = 384  # tokens one part's summary may take (overflow="summarise")
_SUMMARISE_SYSTEM = "You condense text faithfully: keep names, numbers, instructions and any question asked."
_SUMMARISE = GenerateParams(SamplingParams(temperature=0.0, repeat_penalty=1.1, seed=0))
# At most this many tokens are read ahead after an answer (its last token and the markers that open
# the next user turn: ~6 for ChatML); more means the rendering is not what was expected.
READ_AHEAD_MAX = 32


class InputError(ValueError):
    """The user's message cannot be sent as it is (empty, too long, no room left)."""


class MessageTooLong(InputError):
    """The message does not fit even with no earlier turn and the least room for the answer.

    Attributes: `tokens` (the message's), `fits` (the most of them that would), `n_ctx`,
    `estimated` (counted with tiktoken for a remote model). Send it again with
    `overflow="head_tail"` or `overflow="summarise"` to have it shortened.
    """

    def __init__(self, tokens: int, fits: int, n_ctx: int, estimated: bool = False, where: str = "this model"):
        approx = "~" if estimated else ""
        super().__init__(f"message too long for {where}: {approx}{tokens} tokens, at most {approx}{fits} fit "
                         f"(the context holds {n_ctx}); keep its head and tail, or summarise it")
        self.tokens, self.fits, self.n_ctx, self.estimated = tokens, fits, n_ctx, estimated


class LocalTarget:
    """A local tier's model. The caller's thread (a front-end's engine thread) renders and counts
    with the model's `vocab` and reads its published `view`; what touches the context runs as a
    job on the model's thread."""

    def __init__(self, level: str, worker: Worker, kv: KVTiers | None = None):
        self.level, self.worker, self.kv = level, worker, kv

    @property
    def capabilities(self) -> Capabilities:
        entry = self.entry
        # tools: unless the catalog says it cannot (an unknown file may: its template decides)
        return Capabilities(tools=entry is None or entry.tools is not False,
                            reasoning=self.worker.template.reasoning is not None, tokens=True,
                            checkpoint=self.kv is not None, offload=True, confidence=True,
                            vision=self.worker.backend.vision is not None)

    @property
    def model_id(self) -> str:
        return self.worker.model.id

    @property
    def entry(self) -> ModelEntry | None:
        """The model's catalog entry (None: a file the catalog does not know)."""
        return self.worker.model.entry

    @property
    def identity(self) -> str:
        return self.worker.backend.identity

    def session(self, history: list[Message], params: GenerateParams | None = None,
                on_model: bool = False) -> Session:
        """`history` rendered with the vocabulary alone: any thread, beside the model's decoding;
        `on_model` (in a job, on the model's thread): with the backend itself, which alone can
        tokenize images. `params`: thinking on or off, and the rule for earlier thinking (default:
        the template's)."""
        tokenizer = self.worker.backend if on_model else self.worker.vocab
        pixels = image_store().pixels if on_model else None
        if params is None:
            return Session(tokenizer, self.worker.template, history, pixels=pixels)
        return Session(tokenizer, self.worker.template, history, history=params.reasoning_history, think=params.think,
                       tools=params.tools.tools if params.tools is not None else (), pixels=pixels)

    def fit(self, system: list[Message], turns: list[Message], user: Message, params: GenerateParams,
            first_kept: int = 0) -> Window:
        """The window for this turn, its max_answer capped to the room the prompt leaves.
        Tokenizing reads only the vocabulary (`vocab`), so it is safe beside the model's thread.

        Raises:
            MessageTooLong: the message does not fit even with the answer floor (window.py).
        """
        n_ctx = self.worker.backend.n_ctx
        reserve = min(params.max_tokens, n_ctx // 4)  # room for the answer; shrinks for a long message
        try:
            window = fit_window(session_counter(self.session([], params)), n_ctx, system, turns, user, reserve, first_kept,
                                floor=answer_floor(n_ctx))
        except TooLong as exc:
            n_user = len(self.session([]).content_ids(user))
            raise MessageTooLong(n_user, max(0, n_user - (exc.needed - exc.limit)), n_ctx) from exc
        window.max_answer = min(params.max_tokens, window.answer_room)
        return window

    def count_text(self, text: str) -> int:
        """Tokens of `text` as message content for this model (the vocabulary only)."""
        return len(self.worker.vocab.tokenize(text, special=False))

    def summarise(self, text: str, fits: int, cancel: threading.Event | None = None) -> str:
        """`text` summarised part by part on this model, within about `fits` tokens: the overflow
        choice for a message too long for the context. Each part is half the context; the parts'
        summaries share `fits`. Runs in the foreground (the user waits) and returns the
        conversation's KV sequence as it was.

        Raises:
            InputError: `fits` is too small for a useful summary of every part, or Stop.
        """
        vocab = self.worker.vocab
        ids = vocab.tokenize(text, special=False)
        part = max(64, self.worker.backend.n_ctx // 2)
        n = math.ceil(len(ids) / part)
        header = f"[a long message ({group(len(ids))} tokens) summarised in {n} parts]"
        out = min(SUMMARY_PIECE_MAX, (fits - self.count_text(header) - MARKER_ROOM) // n - 8)
        if out < 16:
            raise InputError(f"the message is too long to summarise within {fits} tokens ({len(ids)} tokens "
                             f"in {n} parts); keep its head and tail instead")
        params = GenerateParams(_SUMMARISE.sampling, max_tokens=out)
        summaries = []
        for k in range(n):
            piece = vocab.detokenize(ids[k * part:(k + 1) * part])
            ask = (f"Part {k + 1} of {n} of a long text. Summarise it in at most {max(10, out * 2 // 3)} words:"
                   f"\n\n{piece}")
            summaries.append(self._complete([Message("system", _SUMMARISE_SYSTEM), Message("user", ask)],
                                            params, cancel).strip() or "(nothing)")
            if cancel is not None and cancel.is_set():
                raise InputError("stopped while summarising the message; nothing was sent")
        return header + "\n\n" + "\n\n".join(f"Part {k + 1}: {s}" for k, s in enumerate(summaries))

    def _complete(self, messages: list[Message], params: GenerateParams, cancel: threading.Event | None) -> str:
        """One answer to `messages` outside any conversation: the foreground KV sequence is saved
        first and put back after, as a background summary does (engine/chat/summaries.py)."""
        def run(worker: Worker, job: Job) -> None:
            saved = worker.backend.save_sequence()
            try:
                prompt = Session(worker.backend, worker.template, messages).prompt()
                for item in generate(worker.backend, prompt, params, job.cancel, worker.prefill_piece()):
                    if isinstance(item, TurnResult):
                        job.emit(item)
            finally:
                if not worker.backend.restore_sequence(saved):
                    log.warning("could not restore the KV sequence after summarising a message; "
                                "the next turn re-evaluates")

        results = [item for item in self.worker.submit(run, FOREGROUND, cancel) if isinstance(item, TurnResult)]
        return results[-1].text if results else ""

    def uncached_tokens(self, history: list[Message], user: Message, shared: bool = True) -> int:
        """Tokens this model would evaluate for the next turn: the prompt minus its cached prefix
        (none when the context's state may not serve this turn: `shared` False, another domain's).
        The cache is read as its thread published it after its last job: the context may be in use."""
        prompt = self.session(history).prompt(user)
        kv = self.worker.view.kv_tokens
        return len(prompt) - (common_prefix(kv, prompt) if shared else 0)

    def offload(self) -> dict[str, object] | None:
        return self.worker.offload

    def confidence(self, done: TurnDone, sampled: bool, warn: float | None) -> dict[str, object] | None:
        """Per-token probabilities, flagged below the catalog's threshold for this model, or the
        user's own (`warn`)."""
        entry = self.entry
        # The catalog's thresholds were calibrated on greedy answers; sampled answers pick less
        # likely tokens and score lower, so they are not flagged until calibrated per mode.
        threshold = entry.warn_threshold if entry and not sampled else 0.0
        if warn:  # the user's own threshold applies to every answer
            threshold = warn
        pieces = [self.worker.vocab.token_bytes(t) for t in done.token_ids]  # not the model's: it may be busy
        return confidence_report(pieces, done.logprobs, threshold)

    def after_turn(self, done: TurnDone) -> None:
        """The turn's cells to the chat's cold file while the user reads (engine/kv/tiers.py)."""
        kv, cid = self.kv, done.conversation_id
        if kv is None:
            return
        try:
            self.worker.submit(lambda w, job: kv.checkpoint(w.backend, cid), BACKGROUND)
        except ModelUnloaded:
            pass  # unloaded meanwhile: its state went to the tiers then

    def stream(self, history: list[Message], user: Message, params: GenerateParams,
               cancel: threading.Event | None, window_moved: bool = False, *, conversation_id: int,
               read_ahead: bool = False, domain: str = WINDOW_DOMAIN
               ) -> Generator[Chunk | ReasoningChunk | TurnResult, None, None]:
        """The answer to `user` after `history`, on this model's thread. `read_ahead`: once the
        answer is out, evaluate the markers that open the next user turn (see `_read_ahead`).
        `domain`: the turn's trust domain (`KVTiers.prepare`)."""
        def run(worker: Worker, job: Job) -> None:
            session = self.session(history, params, on_model=True)
            try:
                prompt = session.prompt(user)
            except (NoVision, ImageError) as exc:
                raise InputError(str(exc)) from exc
            fmt = worker.template.reasoning
            inside = fmt is not None and opens_block(session.generation_text, fmt)
            # Another conversation in the context: park it, bring this one's state from RAM or disk.
            tiers = self.kv
            restore = tiers.prepare(worker.backend, conversation_id, prompt, domain) if tiers else None
            shift = None
            if window_moved:  # the oldest turns left the window: shift the cache, else re-evaluate
                shift = "kv" if apply_shift(worker.backend, prompt) else "reeval"
            try:
                piece = worker.prefill_piece()
                mode = params.speculative or "off"
                drafting = Drafting(mode, worker.speculation.tuner(conversation_id, mode), worker.draft,
                                    worker.draft_note)
                for item in generate(worker.backend, prompt, params, job.cancel, piece, reasoning=fmt, inside=inside,
                                     drafting=drafting):
                    if isinstance(item, TurnResult):
                        if read_ahead:  # before the end is told: a client's next request finds it done
                            item.stats.read_ahead = self._read_ahead(worker, job, history, user, item, params)
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
            yield self._stopped_before_start(history, user, params)
            return
        yield from self.worker.submit(run, FOREGROUND, cancel)

    def _read_ahead(self, worker: Worker, job: Job, history: list[Message], user: Message,
                    result: TurnResult, params: GenerateParams) -> int:
        """Once the answer's text is out (before its end is reported): evaluate what the next turn
        of this conversation starts with whatever the client says (the end-of-turn and user-turn
        markers), so that a client coming back evaluates that much less (~6 tokens, ~40 ms of its
        TTFT on demo-small, 2 cores). Skipped when a foreground job is waiting (it would delay that
        one), after a stop, and on sliding-window caches (which cannot always roll back, should the
        next turn differ). How many tokens it evaluated."""
        backend = worker.backend
        if (job.cancel.is_set() or job.preempt.is_set()
                or result.stats.finish_reason in ("cancelled", "context_full")
                or (backend.n_swa > 0 and not backend.params.swa_full)):
            return 0
        answer = answer_message(result, backend.identity)
        # After calls, a tool's result comes next (the client runs the tool meanwhile).
        session = self.session(history + [user, answer], params, on_model=True)
        ahead = session.next_prefix("tool" if result.tool_calls else "user")
        kv = backend.kv_tokens
        rest = ahead[len(kv):]
        if ahead[:len(kv)] != kv or not 0 < len(rest) <= READ_AHEAD_MAX or len(ahead) >= backend.n_ctx:
            return 0
        try:
            return backend.eval(rest, stop=job.preempt.is_set)
        except (ContextFull, DecodeError):
            log.info("reading the next turn's markers ahead failed; the next turn evaluates them")
            return 0

    def _stopped_before_start(self, history: list[Message], user: Message, params: GenerateParams) -> TurnResult:
        prompt = self.session(history, params).prompt(user)  # the vocabulary only, beside the model's thread
        kv = self.worker.view.kv_tokens
        cached = common_prefix(kv, prompt)
        return TurnResult([], "", [], GenerationStats(len(prompt), 0, cached, 0, 0.0, 0.0, 0.0, "cancelled",
                                                "append" if cached else "fresh"))


def answer_message(result: TurnResult, identity: str | None, level: str | None = None) -> Message:
    """The assistant message a result makes: its answer, and its thinking with the ids sampled for
    it (the context holds them before the answer's)."""
    ids = {identity: result.token_ids} if identity else {}
    if not result.reasoning_ids and not result.reasoning:
        return Message("assistant", result.text, ids, None, level)
    return Message("assistant", result.text, ids, None, level, reasoning=result.reasoning,
                   reasoning_ids={identity: result.reasoning_ids} if identity else {})


class RemoteTarget:
    """The endpoint the user configured: it calls tools and may think, but its tokens,
    probabilities and memory are its own."""

    level = "L3"
    capabilities = Capabilities(tools=True, reasoning=True)

    def __init__(self, client: RemoteClient):
        self.client = client

    @property
    def identity(self) -> None:
        return None

    def offload(self) -> None:
        return None

    def confidence(self, done: TurnDone, sampled: bool, warn: float | None) -> None:
        return None

    def after_turn(self, done: TurnDone) -> None:
        pass

    @property
    def model_id(self) -> str:
        return f"L3:{self.client.model_name}"

    def fit(self, system: list[Message], turns: list[Message], user: Message, params: GenerateParams,
            first_kept: int = 0) -> Window:
        """The window within the endpoint's configured context, counted with tiktoken: an
        estimate (the remote tokenizer is unknown), labelled so."""
        n_ctx = self.client.config.n_ctx
        reserve = min(params.max_tokens, n_ctx // 4)
        try:
            window = fit_window(estimate_prompt, n_ctx, system, turns, user, reserve, first_kept, estimated=True,
                                floor=answer_floor(n_ctx))
        except TooLong as exc:
            n_user = self.count_text(user.text_for_model)
            raise MessageTooLong(n_user, max(0, n_user - (exc.needed - exc.limit)), n_ctx, estimated=True,
                                 where="the L3 model") from exc
        window.max_answer = min(params.max_tokens, window.answer_room)
        return window

    @staticmethod
    def count_text(text: str) -> int:
        return estimate_tokens(text)

    def stream(self, history: list[Message], user: Message, params: GenerateParams,
               cancel: threading.Event | None, window_moved: bool = False, *, conversation_id: int,
               read_ahead: bool = False, domain: str = WINDOW_DOMAIN
               ) -> Generator[Chunk | ReasoningChunk | TurnResult, None, None]:
        # Images go as data URLs, only where the user says the endpoint's model reads them
        # (l3.images); the router keeps image turns off L3 otherwise (TierSet.vision_tier).
        url = image_data_url if self.client.config.images else None
        try:
            messages = [remote_message(m, url) for m in history + [user]]
        except (NoVision, OSError) as exc:
            raise InputError(str(exc)) from exc
        yield from self.client.stream_chat(messages, params, cancel)


def remote_message(m: Message, image_url: Callable[[str], str] | None = None) -> dict:
    """A message as an OpenAI endpoint takes it: an answer's tool calls and a result's call id
    too; a user message's images as `image_url` content parts (`image_url(digest)` → a URL),
    each where it stands in the text."""
    out: dict[str, object] = {"role": m.role, "content": m.text_for_model}
    if m.images and m.role == "user":
        if image_url is None:
            raise NoVision("the L3 model does not read images (setting l3.images): choose a tier that does")
        out["content"] = content_parts(m, image_url)
    if m.tool_calls:
        out["tool_calls"] = m.tool_calls
        out["content"] = m.text_for_model or None
    if m.role == "tool":
        out["tool_call_id"] = m.tool_call_id or ""
    return out


def content_parts(m: Message, image_url: Callable[[str], str]) -> list[dict[str, object]]:
    """OpenAI content parts: text and images in the user's order (the images first where the
    text the model reads was rewritten, as a local model gets them: engine/chat/session.py)."""
    text, images = m.text_for_model, sorted(m.images or (), key=lambda i: int(i["at"]))
    cuts = [0] * len(images) if m.model_text is not None else [max(0, min(len(text), int(i["at"]))) for i in images]
    parts: list[dict[str, object]] = []
    start = 0
    for cut, image in zip(cuts, images):
        if text[start:cut]:
            parts.append({"type": "text", "text": text[start:cut]})
        parts.append({"type": "image_url", "image_url": {"url": image_url(str(image["digest"]))}})
        start = cut
    if text[start:] or not parts:
        parts.append({"type": "text", "text": text[start:]})
    return parts


def image_data_url(digest: str) -> str:
    """A kept image as a data URL, its bytes as the user sent them (a photo stays a JPEG)."""
    path = image_store().path(digest)
    if path is None:
        raise NoVision("this chat's images are not available: one is no longer in the data folder")
    mime = MIME.get(path.suffix.lower().lstrip("."), "application/octet-stream")
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


MIME = {"jpg": "image/jpeg", "png": "image/png", "webp": "image/webp", "gif": "image/gif", "bmp": "image/bmp",
        "tif": "image/tiff"}
