"""What the model sees each turn: the context budget, the window, and overflow.

The prompt is the system block (always kept), then the most recent whole turns, then the new
user message, within n_ctx minus a reserve for the answer. When the next turn would not fit, the
oldest whole turns leave the window (they stay in SQLite) — enough of them that overflow happens
at occasional shift points, not on every turn — and the KV cache is shifted rather than
re-evaluated where llama.cpp allows it. A message that fits only without any earlier turn and with
less room for the answer than asked is still answered: the reserve shrinks down to `answer_floor`.
A longer one is `TooLong`; `head_tail` shortens it to what fits (the turn code offers that, or a
summary, when the user chose so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.inference.backend import Backend
from engine.inference.generate import common_prefix
from engine.chat.session import Message, Session

WARN_LEVEL = 0.8  # the UI warns when the window is this full
REFILL = 0.6  # after an overflow the window is refilled only to this share of the budget
# The least room an answer keeps when a long message takes the rest: 256 tokens answer a question
# about a paste in a paragraph or two; n_ctx/16 keeps a small context (2048 → 128) mostly for the
# message. Below this the answer would be cut mid-sentence, so the message is too long instead.
ANSWER_FLOOR = 256
MARKER_ROOM = 24  # tokens kept free for head_tail's "[… N tokens cut …]" line and joins


def answer_floor(n_ctx: int) -> int:
    """The smallest answer reserve a long message may leave (ANSWER_FLOOR or n_ctx/16)."""
    return max(1, min(ANSWER_FLOOR, n_ctx // 16))


class TooLong(ValueError):
    """The system block and the message alone need `needed` tokens; `limit` is n_ctx minus the
    answer floor."""

    def __init__(self, needed: int, limit: int):
        super().__init__(f"the message alone needs {needed} tokens; the context holds {limit} for the prompt")
        self.needed, self.limit = needed, limit


@dataclass
class Window:
    messages: list[Message]  # system block + kept turns (without the new user message)
    first_kept: int  # index into the conversation's turn messages of the first message kept
    prompt_tokens: int  # with the new user message and the assistant header
    budget: int  # n_ctx - reserve
    n_ctx: int
    estimated: bool = False  # counts from tiktoken (a remote model), not the model's tokenizer
    max_answer: int | None = None  # the turn's max_tokens, capped to the room the prompt leaves
    # A message shortened to fit: {"mode": "head_tail" | "summarise", "tokens", "kept"} (tokens).
    overflow: dict | None = None

    @property
    def water_level(self) -> float:
        return self.prompt_tokens / self.n_ctx

    @property
    def answer_room(self) -> int:
        return self.n_ctx - self.prompt_tokens

    def as_dict(self) -> dict:
        return {"n_ctx": self.n_ctx, "used": self.prompt_tokens, "budget": self.budget,
                "water_level": round(self.water_level, 3), "warn": self.water_level >= WARN_LEVEL,
                "first_kept": self.first_kept, "estimated": self.estimated, "max_answer": self.max_answer,
                "overflow": self.overflow}


def turn_starts(messages: list[Message]) -> list[int]:
    """Indices where a turn (a user message and what answers it) begins."""
    starts = [i for i, m in enumerate(messages) if m.role == "user" and (i == 0 or messages[i - 1].role != "user")]
    return starts or [0]


def session_counter(session: Session) -> Callable[[list[Message]], int]:
    """Exact prompt length under a local model's tokenizer and chat template."""
    return lambda messages: len(session.render(messages, add_generation_prompt=True))


def fit_window(count: Callable[[list[Message]], int], n_ctx: int, system: list[Message], turns: list[Message],
               user: Message, reserve: int, first_kept: int = 0, estimated: bool = False,
               floor: int | None = None) -> Window:
    """The window for the next answer: system block + the most recent whole turns that fit.

    `count(messages)` is the prompt length of `messages` plus the answer header. `first_kept` is
    where the previous window started: the window never moves back (that would undo a shift), and
    when it must move forward it moves far enough to leave room (REFILL).

    With a `floor` (the targets pass `answer_floor(n_ctx)`), when even the system block and the
    message alone exceed n_ctx - reserve, the reserve shrinks to what is left, down to `floor`:
    the window then holds no earlier turn and its budget is exactly the prompt.

    Raises:
        TooLong: the system block and the new message alone exceed n_ctx - reserve (n_ctx - floor
            with a floor).
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
    if used > budget:  # every earlier turn is out: only the answer's room can shrink now
        limit = budget if floor is None else n_ctx - min(reserve, floor)
        if used > limit:
            raise TooLong(used, limit)
        return Window(system, len(turns), used, used, n_ctx, estimated)
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


def head_tail(text: str, fits: int, count: Callable[[str], int]) -> tuple[str, int]:
    """`text` cut to its head and tail within `fits` tokens (as `count` measures them), the middle
    replaced by a marker saying how many tokens left; and that number (0: it fitted as it was)."""
    total = count(text)
    if total <= fits:
        return text, 0
    keep = max(0, fits - MARKER_ROOM)
    chars = int(len(text) * keep / total)
    for _ in range(8):  # tokens per character vary along the text: measure and correct
        half = chars // 2
        head = _cut_at_space(text[:half], from_end=True)
        tail = _cut_at_space(text[len(text) - (chars - half):], from_end=False) if chars - half else ""
        cut = total - count(head) - count(tail)
        result = f"{head}\n\n[… {group(cut)} tokens cut …]\n\n{tail}"
        n = count(result)
        if n <= fits or chars == 0:
            return result, cut
        chars = max(0, int(chars * fits / n) - 16)
    return result, cut


def group(n: int) -> str:
    """1234 → "1 234": thousands grouped with a space, readable in every language."""
    return f"{n:,}".replace(",", " ")


def _cut_at_space(part: str, from_end: bool, within: int = 64) -> str:
    """Cut on whitespace near the cut point when there is some, so no word is split."""
    if from_end:
        i = part.rfind(" ", max(0, len(part) - within))
        j = part.rfind("\n", max(0, len(part) - within))
        k = max(i, j)
        return part[:k] if k > 0 else part
    cands = [x for x in (part.find(" ", 0, within), part.find("\n", 0, within)) if x >= 0]
    return part[min(cands) + 1:] if cands else part
