"""What the model sees each turn: the context budget, the window, and overflow.

The prompt is the system block (always kept), then the most recent whole turns, then the new
user message, within n_ctx minus a reserve for the answer. When the next turn would not fit, the
oldest whole turns leave the window (they stay in SQLite) — enough of them that overflow happens
at occasional shift points, not on every turn — and the KV cache is shifted rather than
re-evaluated where llama.cpp allows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.inference.backend import Backend
from engine.inference.generate import common_prefix
from engine.chat.session import Message, Session

WARN_LEVEL = 0.8  # the UI warns when the window is this full
REFILL = 0.6  # after an overflow the window is refilled only to this share of the budget


@dataclass
class Window:
    messages: list[Message]  # system block + kept turns (without the new user message)
    first_kept: int  # index into the conversation's turn messages of the first message kept
    prompt_tokens: int  # with the new user message and the assistant header
    budget: int  # n_ctx - reserve
    n_ctx: int
    estimated: bool = False  # counts from tiktoken (a remote model), not the model's tokenizer

    @property
    def water_level(self) -> float:
        return self.prompt_tokens / self.n_ctx

    def as_dict(self) -> dict:
        return {"n_ctx": self.n_ctx, "used": self.prompt_tokens, "budget": self.budget,
                "water_level": round(self.water_level, 3), "warn": self.water_level >= WARN_LEVEL,
                "first_kept": self.first_kept, "estimated": self.estimated}


def turn_starts(messages: list[Message]) -> list[int]:
    """Indices where a turn (a user message and what answers it) begins."""
    starts = [i for i, m in enumerate(messages) if m.role == "user" and (i == 0 or messages[i - 1].role != "user")]
    return starts or [0]


def session_counter(session: Session) -> Callable[[list[Message]], int]:
    """Exact prompt length under a local model's tokenizer and chat template."""
    return lambda messages: len(session.render(messages, add_generation_prompt=True))


def fit_window(count: Callable[[list[Message]], int], n_ctx: int, system: list[Message], turns: list[Message],
               user: Message, reserve: int, first_kept: int = 0, estimated: bool = False) -> Window:
    """The window for the next answer: system block + the most recent whole turns that fit.

    `count(messages)` is the prompt length of `messages` plus the answer header. `first_kept` is
    where the previous window started: the window never moves back (that would undo a shift), and
    when it must move forward it moves far enough to leave room (REFILL).

    Raises:
        ValueError: the system block and the new message alone exceed n_ctx - reserve.
    """
    budget = n_ctx - reserve

    def size(start: int) -> int:
        return count(system + turns[start:] + [user])

    starts = [s for s in turn_starts(turns) if s >= first_kept] or [len(turns)]
    if starts[0] > first_kept:
        starts.insert(0, first_kept)
    current = size(starts[0])
    if current <= budget:
        return Window(system + turns[starts[0]:], starts[0], current, budget, n_ctx, estimated)
    target = int(budget * REFILL)
    chosen, used = len(turns), size(len(turns))
    for start in starts[1:]:  # oldest first: keep as much as fits the refill target
        n = size(start)
        if n <= target:
            chosen, used = start, n
            break
    if used > budget:
        raise ValueError(f"the message alone needs {used} tokens; the context holds {budget} for the prompt")
    return Window(system + turns[chosen:], chosen, used, budget, n_ctx, estimated)


def find_shift(kv: list[int], prompt: list[int]) -> tuple[int, int] | None:
    """(n_keep, n_discard) such that dropping kv[n_keep:n_keep+n_discard] leaves a prefix of
    `prompt` — a window that lost its oldest turns — or None if no single cut does that."""
    n_keep = common_prefix(kv, prompt)
    if n_keep >= len(kv) or n_keep == 0:
        return None
    rest = prompt[n_keep:]
    if not rest:
        return None
    first = rest[0]
    for start in range(n_keep + 1, len(kv)):
        if kv[start] != first:
            continue
        tail = kv[start:]
        if tail == rest[: len(tail)]:
            return n_keep, start - n_keep
    return None


def apply_shift(backend: Backend, prompt: list[int]) -> bool:
    """After the window lost its oldest turns: drop that range from the KV cache and slide the
    rest down, if one cut makes the cache a prefix of `prompt` and llama.cpp can shift this cache.
    False means the caller's prefill re-evaluates from the common prefix instead."""
    cut = find_shift(backend.kv_tokens, prompt)
    return cut is not None and backend.shift_out(*cut)
