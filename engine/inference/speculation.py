"""When to speculate, and how far: measured per model and per chat, so nobody has to tune it.

A verification pass of k draft tokens costs more than one plain step and yields 1 to k + 1 tokens.
Whether it wins depends on the machine and on the text. On two CPU cores a pass of n tokens costs
about n^0.73 plain steps for a 135M model (2: 1.8, 4: 2.8, 8: 4.6, 16: 7.5); on a GPU a 7B model's
costs nearly one. A quote is copied; open chat is not. So both are measured as the answer goes:
- `Costs` (per model): a plain step's time, and a pass's cost by its size, in plain steps, as
  moving averages (a draft model's own steps are part of its pass);
- `Tuner` (per chat, starting from what the model's other chats measured): how often each kind
  of draft is accepted, token by token. A kind is the match that proposed it ("ngram3") and
  whether the last pass was accepted whole ("ngram3+"): a copy in progress goes on far more often
  than one starts.
Each pass verifies the draft length k that maximises expected tokens per second,
    E(k) / cost(k + 1),  E(k) = 1 + a + a^2 + ... + a^k  (a: that kind's acceptance),
and none where one plain step is faster. Auto probes a kind it has written off again after
PROBE_EVERY drafts, so a chat that turns to quoting gets the speed-up back; each probe that leaves
it off doubles the wait (up to PROBE_MAX), so open chat, where probes keep failing, pays for few
(each one costs a pass of PROBE_LEN + 1 tokens for about one). The modes "ngram" and "draft" always
verify (at least one token), for whoever asks for them.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from engine.inference.ngram import NgramIndex

MODES = ("auto", "off", "ngram", "draft")
MAX_DRAFT = 32  # tokens verified in one pass at most: Stop waits for one pass (~0.2 s at 135M on 2 cores)
PRIOR_ACCEPT = 0.6  # a kind of draft not yet measured in this chat
PRIOR_ACCEPT_RUN = 0.9  # the same after a pass accepted whole
PRIOR_EXPONENT = 0.75  # a pass of n tokens costs n^this plain steps, until one is measured (2 CPU cores)
PASS_S = 0.25  # longest pass (seconds) worth its tokens: Stop waits for one (or two plain steps)
PROBE_EVERY = 16  # drafts auto lets go unverified before it tries that kind again
PROBE_MAX = 256  # the longest wait, after failed probes
PROBE_LEN = 4  # a probe's draft tokens: the first rejection ends what it teaches
SMOOTH = 0.2  # weight of the newest reading in the moving averages
ACCEPT_SMOOTH = 0.15  # per judged draft token
CHATS_KEPT = 32  # per-chat state (acceptance, the n-gram index) for this many recent chats


def _ema(old: float | None, new: float, weight: float = SMOOTH) -> float:
    return new if old is None else (1 - weight) * old + weight * new


@dataclass
class Costs:
    """A model's measured decode costs: seconds per plain step, and by kind of draft what a pass of
    n tokens (the pending one and n - 1 draft tokens) costs in plain steps, by n. A size not yet
    measured is read off its measured neighbours (log-log), or the prior curve n^PRIOR_EXPONENT:
    the curve is no power law (the marginal token gets cheaper as n grows), so no one exponent
    fitted to short passes may price long ones."""

    step_s: float | None = None
    ratio: dict[str, dict[int, float]] = field(default_factory=dict)

    def note_step(self, seconds: float) -> None:
        self.step_s = _ema(self.step_s, seconds)

    def note_pass(self, kind: str, k: int, seconds: float) -> None:
        if self.step_s is None or k <= 0 or seconds <= 0:
            return
        table = self.ratio.setdefault(kind, {})
        table[k + 1] = _ema(table.get(k + 1), seconds / self.step_s)

    def of_pass(self, kind: str, k: int) -> float:
        """A pass of k draft tokens, in plain steps (k 0: one plain step)."""
        n = k + 1
        if n == 1:
            return 1.0
        table = self.ratio.get(kind, {})
        if n in table:
            return table[n]
        below = max((m for m in table if m < n), default=None)
        above = min((m for m in table if m > n), default=None)
        if below is not None and above is not None:
            w = math.log(n / below) / math.log(above / below)
            return math.exp((1 - w) * math.log(table[below]) + w * math.log(table[above]))
        if below is not None:
            return table[below] * (n / below) ** PRIOR_EXPONENT
        if above is not None:
            return table[above] * (n / above) ** PRIOR_EXPONENT
        return n ** PRIOR_EXPONENT


def expected_tokens(accept: float, k: int) -> float:
    """Tokens a pass of k draft tokens yields when each is accepted with probability `accept`
    given the ones before it (the pass's own sampled token included)."""
    return sum(accept ** i for i in range(k + 1))


@dataclass
class Tuner:
    """One chat on one model: acceptance by kind of draft, and the chat's n-gram index."""

    costs: Costs
    mode: str
    model_accept: dict[str, float] = field(default_factory=dict)  # the model's, over its chats: a new chat's start
    accept: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)  # drafts let go since that kind's last pass
    wait: dict[str, int] = field(default_factory=dict)  # drafts to let go before probing that kind
    index: NgramIndex = field(default_factory=NgramIndex)
    note: str = ""  # why it is on or off, as last decided
    run: bool = False  # the last pass was accepted whole: a copy is in progress

    def length(self, key: str, kind: str, available: int) -> int:
        """How many of `available` draft tokens (of match kind `key`) to verify: 0 = a plain step."""
        if available <= 0:
            return 0
        available = min(available, MAX_DRAFT)
        a = self._accept(key)
        best_k, best_rate = 0, 1.0
        step = self.costs.step_s
        for k in range(1, available + 1):
            cost = self.costs.of_pass(kind, k)
            if k > 1 and step is not None and step * cost > max(PASS_S, 2 * step):
                break  # Stop waits for a whole pass: keep it short
            rate = expected_tokens(a, k) / cost
            if rate > best_rate:
                best_k, best_rate = k, rate
        if self.mode != "auto":  # asked for: always verify, as far as pays most (at least 1)
            self.note = f"{self.mode}: on (asked for in Settings)"
            return max(1, best_k)
        if best_k:
            self.note = f"auto: on ({key} drafts {a:.0%} accepted, {best_rate:.2f}× plain expected)"
            self.skipped[key], self.wait[key] = 0, PROBE_EVERY
            return best_k
        skipped = self.skipped.get(key, 0) + 1
        wait = self.wait.get(key, PROBE_EVERY)
        if skipped >= wait:  # measure it again: the chat may have turned to quoting
            self.skipped[key], self.wait[key] = 0, min(2 * wait, PROBE_MAX)  # reset if the probe turns it on
            return min(available, PROBE_LEN)
        self.skipped[key] = skipped
        self.note = f"auto: off (plain is faster here: {key} drafts {a:.0%} accepted)"
        return 0

    def judged(self, key: str, accepted: int, drafted: int) -> None:
        """A pass's outcome: the first `accepted` of `drafted` tokens were kept. Positions after the
        first rejected one were never judged, so they teach nothing."""
        a, m = self._accept(key), self.model_accept.get(key, self._accept(key))
        for i in range(min(drafted, accepted + 1)):
            a = _ema(a, 1.0 if i < accepted else 0.0, ACCEPT_SMOOTH)
            m = _ema(m, 1.0 if i < accepted else 0.0, ACCEPT_SMOOTH / 4)
        self.accept[key], self.model_accept[key] = a, m
        self.run = accepted == drafted

    def _accept(self, key: str) -> float:
        """This chat's acceptance of `key` drafts; in a new chat the model's, else a prior."""
        if key in self.accept:
            return self.accept[key]
        return self.model_accept.get(key, PRIOR_ACCEPT_RUN if key.endswith("+") else PRIOR_ACCEPT)


class Speculation:
    """A model's speculation: its measured costs and its chats' tuners. Held by the model's worker
    (engine/inference/runtime.py); `drafting` is called on its thread, per answer."""

    def __init__(self) -> None:
        self.costs = Costs()
        self.accept: dict[str, float] = {}  # acceptance by kind of draft over all chats
        self._chats: OrderedDict[object, Tuner] = OrderedDict()
        self._lock = threading.Lock()

    def tuner(self, chat: object, mode: str) -> Tuner:
        """The tuner of `chat` (a conversation id; None: one-off answers share one) in `mode`."""
        if mode not in MODES:
            raise ValueError(f"speculative mode must be one of {', '.join(MODES)}, not {mode!r}")
        with self._lock:
            tuner = self._chats.pop(chat, None) or Tuner(self.costs, mode, self.accept)
            tuner.mode = mode
            self._chats[chat] = tuner
            while len(self._chats) > CHATS_KEPT:
                self._chats.popitem(last=False)
            return tuner
