"""The streaming loop: evaluate only what the KV cache lacks, then sample token by token.

`generate()` yields `Chunk`s and ends with one `TurnResult`. Stats are measured here, at
the source; persistence and UI wrap this from outside.
"""

from __future__ import annotations

import codecs
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Generator, Iterator

from engine.inference.backend import Backend, ContextFull, SamplingParams
from engine.inference.repetition import RepetitionGuard


@dataclass(frozen=True)
class GenerateParams:
    sampling: SamplingParams = SamplingParams()
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    repetition_guard: bool = True  # end a looping answer (engine/inference/repetition.py)


@dataclass(frozen=True)
class Chunk:
    text: str  # may be "" while a multi-byte character or a possible stop string is pending
    token: int
    logprob: float  # natural log of the sampled token's probability, raw model distribution


@dataclass
class GenerationStats:
    prompt_tokens: int
    prompt_tokens_evaluated: int
    prompt_tokens_cached: int
    completion_tokens: int
    ttft_ms: float
    prompt_tps: float
    decode_tps: float
    # "stop" | "length" | "cancelled" | "stop_string" | "context_full" | "repetition" (the answer
    # looped: it ends after the first occurrence of the repeated block, see dropped_tokens)
    finish_reason: str
    cache_mode: str  # "append" | "rollback" (kept a prefix) | "reeval" (rollback impossible) | "fresh"
    prompt_ms: float = 0.0
    decode_ms: float = 0.0
    tokens_estimated: bool = False  # remote models: counts from tiktoken, not the model's tokenizer
    context_shift: str | None = None  # window moved this turn: "kv" (cache shifted) | "reeval"
    restored_from: str | None = None  # KV state came from "hot" | "warm" | "cold" (engine/kv/tiers.py)
    restore_ms: float = 0.0  # time to restore it (included in ttft_ms)
    park_ms: float = 0.0  # copying the previous conversation's state to RAM first (included in ttft_ms)
    dropped_tokens: int = 0  # "repetition": sampled tokens cut as repeats (streamed, not kept)
    read_ahead: int = 0  # tokens of the next turn's opening evaluated after the answer (engine/chat/targets.py)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class TurnResult:
    token_ids: list[int]  # the answer's content ids exactly as sampled (no end-of-turn token)
    text: str
    logprobs: list[float] = field(default_factory=list)
    stats: GenerationStats | None = None


def _stop_hold(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing chars of `text` could be the start of a stop string (held back)."""
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), hold, -1):
            if text.endswith(s[:k]):
                hold = k
                break
    return hold


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading token ids `a` and `b` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def prefill(backend: Backend, prompt: list[int], stop: Callable[[], bool] | None = None,
            piece: int | None = None) -> tuple[int, str, bool]:
    """Bring the KV cache to hold `prompt` with fresh logits for its last token.

    `stop()` is asked between pieces of `piece` tokens; when it says so, the cache keeps exactly
    the part evaluated so far (the next turn reuses it) and nothing can be sampled.

    Returns (tokens reused from the cache, cache_mode, complete).
    """
    if len(prompt) >= backend.n_ctx:
        raise ContextFull(len(prompt) + 1, backend.n_ctx)
    kv = backend.kv_tokens
    common = common_prefix(kv, prompt)
    # The last prompt token must be (re)evaluated to get the logits we sample from.
    keep = min(common, len(prompt) - 1)
    if keep == 0:
        mode = "fresh"  # nothing reusable (empty cache, or another conversation's)
    elif keep == len(kv):
        mode = "append"
    else:
        mode = "rollback"
    if not backend.keep_prefix(keep):
        keep, mode = 0, "reeval"
    rest = prompt[keep:]
    done = backend.eval(rest, piece, stop)
    return keep, mode, done == len(rest)


def generate(
    backend: Backend, prompt: list[int], params: GenerateParams = GenerateParams(),
    cancel: threading.Event | None = None, piece: int | None = None,
) -> Iterator[Chunk | TurnResult]:
    """Stream an answer to `prompt` (the full token sequence of the conversation so far).

    `cancel` is checked between prompt pieces of `piece` tokens (default n_batch) and between
    decoded tokens.

    Raises:
        ContextFull: the prompt alone does not fit the context.
    """
    t0 = time.perf_counter()
    cached, mode, complete = prefill(backend, prompt, cancel.is_set if cancel is not None else None, piece)
    t_prompt = time.perf_counter()
    if not complete:  # stopped while reading the prompt: nothing to sample from
        n_eval = len(backend.kv_tokens) - cached
        ms = round((t_prompt - t0) * 1000, 2)
        yield TurnResult([], "", [], GenerationStats(len(prompt), n_eval, cached, 0, ms, 0.0, 0.0, "cancelled",
                                               mode, prompt_ms=ms))
        return
    answer = _Answer(backend, params)
    yield from answer.stream(prompt, cancel)
    yield TurnResult(answer.ids, answer.text, answer.logprobs, answer.stats(prompt, cached, mode, t0, t_prompt))


class _Answer:
    """An answer as it is sampled: its ids and text, how much of the text has been streamed, why it
    ended, and when its tokens came."""

    def __init__(self, backend: Backend, params: GenerateParams):
        self.backend, self.params = backend, params
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.ends: list[int] = []  # text length after each token, to cut ids at a stop string or a loop
        self.text, self.emitted = "", 0
        self.finish = "length"
        self.guard = RepetitionGuard() if params.repetition_guard else None
        self.dropped = 0
        self.t_first: float | None = None
        self.t_last: float | None = None
        self.n_sampled = 0

    def stream(self, prompt: list[int], cancel: threading.Event | None) -> Iterator[Chunk]:
        """Sample token by token until the answer ends; yield the text as it may be shown."""
        backend = self.backend
        sampler = backend.make_sampler(self.params.sampling)
        max_tokens = min(self.params.max_tokens, backend.n_ctx - len(prompt))
        while len(self.ids) < max_tokens:
            if cancel is not None and cancel.is_set():
                self.finish = "cancelled"
                break
            if self.ids:
                backend.eval([self.ids[-1]])
            token, logprob = backend.sample(sampler)
            self.t_last = time.perf_counter()
            self.n_sampled += 1
            if self.t_first is None:
                self.t_first = self.t_last
            if backend.is_eog(token):
                self.finish = "stop"
                break
            if (yield from self._add(token, logprob)):
                break
        else:
            if len(self.ids) >= backend.n_ctx - len(prompt):
                self.finish = "context_full"
        if self.finish not in ("stop_string", "repetition"):  # the cut text needs no pending bytes
            self.text += self.decoder.decode(b"", final=True)
            if len(self.text) > self.emitted:  # held-back text; token -1 marks a flush, not a token
                yield Chunk(self.text[self.emitted:], -1, 0.0)

    def _add(self, token: int, logprob: float) -> Generator[Chunk, None, bool]:
        """Take one sampled token; yield what of the text may be shown now. True: the answer ends."""
        self.ids.append(token)
        self.logprobs.append(logprob)
        before = len(self.text)
        self.text += self.decoder.decode(self.backend.token_bytes(token))
        self.ends.append(len(self.text))
        stops = self.params.stop
        if stops:
            hit = min((i for i in (self.text.find(s, max(0, self.emitted - len(s))) for s in stops) if i >= 0),
                      default=-1)
            if hit >= 0:
                # Keep the tokens wholly before the stop string; the model never sees the rest.
                self._cut(sum(1 for e in self.ends if e <= hit), hit, "stop_string")
                yield Chunk(self.text[self.emitted:], token, logprob)
                self.emitted = len(self.text)
                return True
            safe = len(self.text) - _stop_hold(self.text, stops)
        else:
            safe = len(self.text)
        keep = self.guard.feed(token, self.text[before:]) if self.guard is not None else None
        if keep is not None:
            # A loop: keep its first occurrence. Repeats already streamed stay on screen until
            # the TurnResult (trimmed) replaces the streamed text; held-back text up to the cut
            # still goes out, as a flush (token -1).
            self.dropped = len(self.ids) - keep
            cut = self.ends[keep - 1] if keep else 0
            self._cut(keep, cut, "repetition")
            if cut > self.emitted:
                yield Chunk(self.text[self.emitted:], -1, 0.0)
            self.emitted = max(self.emitted, cut)
            return True
        yield Chunk(self.text[self.emitted:safe], token, logprob)
        self.emitted = max(self.emitted, safe)
        return False

    def _cut(self, keep: int, at: int, finish: str) -> None:
        del self.ids[keep:], self.logprobs[keep:]
        self.text, self.finish = self.text[:at], finish

    def stats(self, prompt: list[int], cached: int, mode: str, t0: float, t_prompt: float) -> GenerationStats:
        t_end = time.perf_counter()
        n_eval = len(prompt) - cached
        t_first, t_last = self.t_first, self.t_last
        decode_s = (t_last - t_first) if (t_first is not None and t_last is not None) else 0.0
        return GenerationStats(
            prompt_tokens=len(prompt),
            prompt_tokens_evaluated=n_eval,
            prompt_tokens_cached=cached,
            completion_tokens=len(self.ids),
            ttft_ms=round(((t_first or t_end) - t0) * 1000, 2),
            prompt_tps=round(n_eval / (t_prompt - t0), 1) if t_prompt > t0 else 0.0,
            # Tokens after the first, over the time after the first: the steady decode rate.
            decode_tps=round((self.n_sampled - 1) / decode_s, 1) if decode_s > 0 else 0.0,
            finish_reason=self.finish,
            cache_mode=mode,
            prompt_ms=round((t_prompt - t0) * 1000, 2),
            decode_ms=round(decode_s * 1000, 2),
            dropped_tokens=self.dropped,
        )
