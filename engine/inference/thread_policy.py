"""How many CPU threads a model runs now: its calibrated best, fewer while other programs compete.

llama.cpp's threads meet at a barrier after every operation of a forward pass. When another
program takes one of the CPUs, one thread is descheduled and all the others wait for it, hundreds
of times per token: on two cores with one busy program, two threads decoded 7× slower than one
(issue 38). Less spinning does not help (OMP_WAIT_POLICY=PASSIVE made quiet decode 3× slower and
left the collapse: docs/benchmarks.md). So the count follows the CPUs other programs leave free:

    free = usable CPUs − other programs' use (a time-weighted average) − our other models' threads
    cap  = floor(free + MARGIN), at least 1; decode = min(best decode, cap), batch likewise

A lower cap applies at once (a slow token costs more than a wrong guess); a higher one only after
it has held for `up_hold` seconds, and that hold doubles when a raise is undone soon after (never
flap). Each change is logged with its reason. A manual count (Settings) is never changed.

The policy is pure: a clock and a load meter are passed in, so tests drive it with fakes.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, replace
from typing import Callable

log = logging.getLogger(__name__)

TICK_S = 0.25      # the load is read at most this often (a reading costs ~0.1 ms)
MIN_SPAN_S = 0.1   # a shorter reading is ignored
TAU_S = 0.5        # the load average's time constant: a 2 s idle gap replaces it almost whole
MARGIN = 0.4       # a CPU counts as free while others use ≤ 0.4 of it
UP_HOLD_S = 3.0    # a higher cap must hold this long before threads are added
FLAP_S = 10.0      # a cut this soon after a raise doubles the hold ...
MAX_HOLD_S = 60.0  # ... up to this; a minute without a change resets it


@dataclass(frozen=True)
class ThreadState:
    """What a model's threads are now, and why: published whole, read by any thread."""

    decode: int          # threads for one-token steps
    batch: int           # threads for prompt batches
    best_decode: int     # the quiet machine's best (calibrated, or the default)
    best_batch: int
    cpus: int            # the CPUs this process may use
    others: float = 0.0  # other programs' CPU use, in CPUs (time-weighted)
    reason: str = "calibrated"  # "calibrated" | "default" (not measured) | "busy" | "manual"

    @property
    def reduced(self) -> bool:
        return self.decode < self.best_decode or self.batch < self.best_batch

    def describe(self) -> str:
        """One line in English for logs and the terminal ("2 threads; 1 while ..."); the window words
        its own from the fields."""
        def n(k: int) -> str:
            return f"{k} thread{'s' if k != 1 else ''}"
        counts = n(self.decode) + (f" ({self.batch} for prompts)" if self.batch != self.decode else "")
        if self.reason == "manual":
            return f"{counts}, set in Settings"
        if self.reduced:
            return (f"{counts} while other programs use {self.others:.1f} of {self.cpus} CPUs "
                    f"({n(self.best_decode)} when quiet)")
        how = "calibrated for this model" if self.reason != "default" else "one per core"
        return f"{counts} ({how}; fewer while other programs are busy)"


def cap(cpus: int, others: float, ours: int = 0) -> int:
    """The most threads worth running on `cpus` CPUs when other programs use `others` of them and
    this process's other models run `ours` threads."""
    return max(1, math.floor(cpus - others - ours + MARGIN))


class Claims:
    """Threads each of this process's models is running now: two models decoding at once share
    the CPUs, and the load meter (other programs only) cannot see one from the other."""

    def __init__(self):
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}

    def hold(self, key: int, n: int) -> None:
        with self._lock:
            self._held[key] = n

    def release(self, key: int) -> None:
        with self._lock:
            self._held.pop(key, None)

    def others(self, key: int) -> int:
        with self._lock:
            return sum(n for k, n in self._held.items() if k != key)


CLAIMS = Claims()  # the process's


class ThreadPolicy:
    """Decides a model's thread counts between evaluations.

    Args:
        best_decode, best_batch: the quiet machine's best counts.
        cpus: the CPUs this process may use.
        meter: `read() -> (other programs' CPUs, seconds since the last read)`.
        clock: monotonic seconds.
        reason: the state's reason while nothing is reduced ("calibrated" or "default").
        manual: a fixed count: never changed.
        claims: this process's models' threads (default CLAIMS); `key` is this model's.
        name: the model, for log lines.
    """

    def __init__(self, best_decode: int, best_batch: int, cpus: int, meter, clock: Callable[[], float], *,
                 reason: str = "calibrated", manual: bool = False, claims: Claims = CLAIMS,
                 key: int | None = None, name: str = "model"):
        self._meter, self._clock, self._claims = meter, clock, claims
        self._key = key if key is not None else id(self)
        self._name, self._base_reason, self.manual = name, "manual" if manual else reason, manual
        self.state = ThreadState(best_decode, best_batch, best_decode, best_batch, cpus, 0.0, self._base_reason)
        self._next_tick = clock()  # the meter's first reading spans the load: it may act at once
        self._load: float | None = None
        self._up_since: float | None = None
        self._hold = UP_HOLD_S
        self._last_up = self._last_change = -math.inf

    def begin(self) -> ThreadState | None:
        """Call before an evaluation: the new state when the counts should change, else None."""
        if self.manual:
            return None
        change = self._tick()
        self._claims.hold(self._key, self.state.decode)
        return change

    def _tick(self) -> ThreadState | None:
        now = self._clock()
        if now < self._next_tick:
            return None
        self._next_tick = now + TICK_S
        others, span = self._meter.read()
        # The kernel counts CPU time in 10 ms ticks: over a few ms, one tick of another program's
        # time reads as every CPU busy.
        if span < MIN_SPAN_S:
            return None
        # A time-weighted average: a long reading (an idle gap, a long prompt piece) counts for more.
        weight = 1.0 if self._load is None else 1.0 - math.exp(-span / TAU_S)
        self._load = others if self._load is None else self._load + weight * (others - self._load)
        return self._decide(now, span, cap(self.state.cpus, self._load, self._claims.others(self._key)))

    def end(self) -> None:
        """Call when the model stops evaluating (its threads no longer compete with our others)."""
        self._claims.release(self._key)

    def _decide(self, now: float, span: float, cap: int) -> ThreadState | None:
        s = self.state
        want = (min(s.best_decode, cap), min(s.best_batch, cap))
        if now - self._last_change > MAX_HOLD_S:
            self._hold = UP_HOLD_S
        if want == (s.decode, s.batch):
            self._up_since = None
            self.state = replace(s, others=self._load)
            return None
        if want[0] < s.decode or want[1] < s.batch:
            if now - self._last_up < FLAP_S:
                self._hold = min(self._hold * 2, MAX_HOLD_S)
            self._up_since = None
            why = f"other programs use {self._load:.1f} of {s.cpus} CPUs"
        else:
            if self._up_since is None:  # the reading itself saw `span` seconds of it (an idle gap)
                self._up_since = now - span
            if now - self._up_since < self._hold:
                self.state = replace(s, others=self._load)
                return None
            self._up_since, self._last_up = None, now
            why = f"other programs use {self._load:.1f} of {s.cpus} CPUs for {self._hold:.0f} s"
        reason = "busy" if want != (s.best_decode, s.best_batch) else self._base_reason
        self.state = replace(s, decode=want[0], batch=want[1], others=self._load, reason=reason)
        self._last_change = now
        log.info("%s: threads %d → %d (decode), %d → %d (prompt): %s", self._name, s.decode, want[0], s.batch,
                 want[1], why)
        return self.state
