"""When to speculate, and how far: measured per model and per chat, so nobody has to tune it.

A verification pass of k draft tokens costs more than one plain step and yields 1 to k + 1 tokens.
Whether it wins depends on the machine (on two CPU cores a 4-token pass costs 2.8 plain steps for
a 135M model; on a GPU a 7B model's costs nearly one) and on the text (a quote is copied, open
chat is not). So both are measured as the answer goes:
- `Costs` (per model): a plain step's time, and what each draft token adds to a pass, as moving
  averages, a pass's draft time included (a draft model's own steps);
- `Tuner` (per chat): how often each kind of draft is accepted, token by token.
Each pass then verifies the draft length k that maximises expected tokens per second,
    E(k) / cost(k),  E(k) = 1 + a + a^2 + ... + a^k  (a: the acceptance of that kind of draft),
and none where one plain step is faster. Auto probes a kind it has written off again every
PROBE_EVERY drafts, so a chat that turns to quoting gets the speed-up back. The modes "ngram" and
"draft" always verify (at least one token), for whoever asks for them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from engine.inference.ngram import NgramIndex

MODES = ("auto", "off", "ngram", "draft")
MAX_DRAFT = 16  # tokens verified in one pass at most: Stop waits for one pass
PRIOR_ACCEPT = 0.5  # a kind of draft not yet measured in this chat
PRIOR_EXTRA = 0.7  # a draft token's cost, in plain steps, before a pass is measured (2 CPU cores, 135M)
PROBE_EVERY = 24  # drafts auto lets go unverified before it tries that kind again
PROBE_LEN = 4
SMOOTH = 0.2  # weight of the newest reading in the moving averages
CHATS_KEPT = 32  # per-chat state (acceptance, the n-gram index) for this many recent chats


def _ema(old: float | None, new: float, weight: float = SMOOTH) -> float:
    return new if old is None else (1 - weight) * old + weight * new


@dataclass
class Costs:
    """A model's measured decode costs: seconds per plain step, and per draft token in a pass
    (by kind: an n-gram draft costs its verification; a draft model's, its own steps too)."""

    step_s: float | None = None
    extra_s: dict[str, float] = field(default_factory=dict)

    def note_step(self, seconds: float) -> None:
        self.step_s = _ema(self.step_s, seconds)

    def note_pass(self, kind: str, k: int, seconds: float) -> None:
        if self.step_s is None or k <= 0:
            return
        self.extra_s[kind] = _ema(self.extra_s.get(kind), max(0.0, seconds - self.step_s) / k)

    def of_pass(self, kind: str, k: int) -> float:
        step = self.step_s or 1.0
        return step + k * self.extra_s.get(kind, PRIOR_EXTRA * step)


def expected_tokens(accept: float, k: int) -> float:
    """Tokens a pass of k draft tokens yields when each is accepted with probability `accept`
    given the ones before it (the pass's own sampled token included)."""
    return sum(accept ** i for i in range(k + 1))


@dataclass
class Tuner:
    """One chat on one model: acceptance by kind of draft, and the chat's n-gram index."""

    costs: Costs
    mode: str
    accept: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # drafts let go since that kind's last pass
    index: NgramIndex = field(default_factory=NgramIndex)
    note: str = ""  # why it is on or off, as last decided

    def length(self, key: str, kind: str, available: int) -> int:
        """How many of `available` draft tokens (of match kind `key`) to verify: 0 = a plain step."""
        if available <= 0:
            return 0
        available = min(available, MAX_DRAFT)
        a = self.accept.get(key, PRIOR_ACCEPT)
        best_k, best_rate = 0, 1.0 / self.costs.of_pass(kind, 0)
        for k in range(1, available + 1):
            rate = expected_tokens(a, k) / self.costs.of_pass(kind, k)
            if rate > best_rate:
                best_k, best_rate = k, rate
        if self.mode != "auto":  # asked for: always verify, as far as pays most (at least 1)
            self.note = f"{self.mode}: on (asked for in Settings)"
            return max(1, best_k)
        if best_k:
            gain = best_rate * self.costs.of_pass(kind, 0)
            self.note = f"auto: on ({key} drafts {a:.0%} accepted, {gain:.2f}× plain expected)"
            self.skipped[key] = 0
            return best_k
        skipped = self.skipped.get(key, 0) + 1
        if skipped >= PROBE_EVERY:  # measure it again: the chat may have turned to quoting
            self.skipped[key] = 0
            return min(available, PROBE_LEN)
        self.skipped[key] = skipped
        self.note = f"auto: off (plain is faster here: {key} drafts {a:.0%} accepted)"
        return 0

    def judged(self, key: str, accepted: int, drafted: int) -> None:
        """A pass's outcome: the first `accepted` of `drafted` tokens were kept. Positions after the
        first rejected one were never judged, so they teach nothing."""
        a = self.accept.get(key, PRIOR_ACCEPT)
        for i in range(min(drafted, accepted + 1)):
            a = _ema(a, 1.0 if i < accepted else 0.0, 0.1)
        self.accept[key] = a


class Speculation:
    """A model's speculation: its mode, its measured costs and its chats' tuners. Held by the
    model's worker (engine/inference/runtime.py) and used on its thread; `mode` may be changed by
    another (a live setting)."""

    def __init__(self, mode: str = "auto"):
        self.mode = mode
        self.costs = Costs()
        self._chats: OrderedDict[object, Tuner] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"speculative mode must be one of {', '.join(MODES)}, not {mode!r}")
        self._mode = mode

    def tuner(self, chat: object) -> Tuner:
        """The tuner of `chat` (a conversation id; None: one-off answers share one)."""
        with self._lock:
            tuner = self._chats.pop(chat, None) or Tuner(self.costs, self.mode)
            tuner.mode = self.mode
            self._chats[chat] = tuner
            while len(self._chats) > CHATS_KEPT:
                self._chats.popitem(last=False)
            return tuner
