"""The streaming loop: evaluate only what the KV cache lacks, then sample token by token.

`generate()` yields `Chunk`s (and a reasoning model's `ReasoningChunk`s) and ends with one
`TurnResult`. Stats are measured here, at the source; persistence and UI wrap this from outside.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Sequence

from engine.inference.answer import Answer
from engine.inference.backend import Backend
from engine.inference.errors import ContextFull
from engine.inference.events import Chunk, GenerateParams, GenerationStats, ReasoningChunk, StopFlag, TurnResult
from engine.inference.media import whole_spans
from engine.inference.reasoning import ReasoningFormat, tag_tail
from engine.inference.tokens import Drafting


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading token ids `a` and `b` share, images whole (engine/inference/media.py): a
    prefix that would end inside an image ends before it."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return whole_spans(n, a, b)


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
    cancel: StopFlag | None = None, piece: int | None = None, *,
    reasoning: ReasoningFormat | None = None, inside: bool = False, drafting: Drafting = Drafting(),
) -> Iterator[Chunk | ReasoningChunk | TurnResult]:
    """Stream an answer to `prompt` (the full token sequence of the conversation so far).

    `cancel` is checked between prompt pieces of `piece` tokens (default n_batch) and between
    decoded tokens. `reasoning`: the model thinks in this format (`inside`: the prompt opened the
    block), so its thinking streams as `ReasoningChunk`s, apart from the answer. `drafting`: what the
    answer may draft with (engine/inference/tokens.py); none: one token a pass.

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
    answer = Answer(backend, params, reasoning, inside, drafting)
    yield from answer.stream(prompt, cancel)
    thought = answer.reasoning_ids
    if inside and thought:  # the block's opening tag is the prompt's: its ids start the thinking's
        thought = prompt[len(prompt) - tag_tail(backend.token_bytes, prompt, reasoning.open):] + thought
    yield TurnResult(answer.ids, answer.text, answer.logprobs, answer.stats(prompt, cached, mode, t0, t_prompt),
                     answer.reasoning, thought, answer.tool_calls)
