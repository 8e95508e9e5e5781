"""The CPU thread policy's decisions (engine/inference/thread_policy.py), driven by a fake clock and
a fake load: when it cuts threads, when it adds them back, that it never flaps, and what it says."""

from __future__ import annotations

import logging

import pytest

from engine.inference.thread_policy import FLAP_S, MAX_HOLD_S, TICK_S, UP_HOLD_S, Claims, ThreadPolicy, cap


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Load:
    """Other programs' CPUs, as LoadMeter.read() reports them over the span since the last read."""

    def __init__(self, clock: Clock):
        self.clock, self.others, self.last = clock, 0.0, clock.t

    def read(self) -> tuple[float, float]:
        span, self.last = self.clock.t - self.last, self.clock.t
        return self.others, span


def policy(best=(2, 2), cpus=2, **kw):
    clock = Clock()
    load = Load(clock)
    p = ThreadPolicy(best[0], best[1], cpus, load, clock, claims=kw.pop("claims", Claims()), **kw)
    return p, clock, load


def run(p: ThreadPolicy, clock: Clock, seconds: float, step: float = 0.01) -> list:
    """Evaluations every `step` seconds for `seconds`: the changes the policy made."""
    changes = []
    for _ in range(round(seconds / step)):
        clock.t += step
        if (c := p.begin()) is not None:
            changes.append((round(clock.t, 2), c.decode, c.batch))
    return changes


def test_the_cap_counts_free_cpus_with_a_margin():
    assert cap(2, 0.0) == 2
    assert cap(2, 0.3) == 2  # background noise keeps every thread
    assert cap(2, 0.67) == 1  # one busy program's share while our two threads run
    assert cap(2, 1.0) == 1
    assert cap(2, 2.0) == 1  # never below one
    assert cap(16, 1.0) == 15
    assert cap(8, 0.0, ours=4) == 4  # another of our models runs four


def test_quiet_keeps_the_calibrated_counts():
    p, clock, load = policy(best=(4, 8), cpus=8)
    load.others = 0.2
    assert run(p, clock, 5.0) == []
    assert (p.state.decode, p.state.batch, p.state.reason) == (4, 8, "calibrated")


def test_a_busy_program_cuts_threads_within_a_tick_and_says_why(caplog):
    p, clock, load = policy()
    run(p, clock, 1.0)
    load.others = 0.67
    with caplog.at_level(logging.INFO, logger="engine.inference.thread_policy"):
        changes = run(p, clock, 1.0)
    assert [c[1:] for c in changes] == [(1, 1)]
    assert changes[0][0] - 101.0 <= 2 * TICK_S + 0.01
    assert p.state.reason == "busy" and p.state.reduced
    assert "other programs use" in caplog.text and "2 → 1" in caplog.text
    assert "1 thread while other programs use" in p.state.describe()


def test_threads_come_back_only_after_the_machine_stays_quiet():
    p, clock, load = policy()
    load.others = 1.0
    run(p, clock, 1.0)
    assert p.state.decode == 1
    load.others = 0.0
    changes = run(p, clock, UP_HOLD_S + 1.0)
    assert [c[1:] for c in changes] == [(2, 2)]
    when = changes[0][0] - 101.0
    assert UP_HOLD_S <= when <= UP_HOLD_S + 1.0  # the load average settles first, then the hold
    assert p.state.reason == "calibrated" and not p.state.reduced


def test_a_short_lull_does_not_add_threads():
    p, clock, load = policy()
    load.others = 1.0
    run(p, clock, 1.0)
    for _ in range(5):  # quiet for under the hold, busy again: never raised
        load.others = 0.0
        assert run(p, clock, UP_HOLD_S / 2) == []
        load.others = 1.0
        run(p, clock, 1.0)
    assert p.state.decode == 1


def test_an_undone_raise_doubles_the_hold():
    p, clock, load = policy()
    holds = []
    for _ in range(4):  # a program busy again each time just after the threads came back
        load.others = 1.0
        run(p, clock, 2.0)
        load.others = 0.0
        start, changes = clock.t, []
        while not changes and clock.t - start < MAX_HOLD_S + 5:
            changes = run(p, clock, 0.1)
        holds.append(changes[0][0] - start if changes else None)
    assert holds[0] < UP_HOLD_S + 1.0
    assert all(b is not None and b > a * 1.5 for a, b in zip(holds, holds[1:])), holds  # each waits longer


def test_the_hold_resets_after_a_calm_minute():
    p, clock, load = policy()
    for _ in range(3):
        load.others = 1.0
        run(p, clock, 1.0)
        load.others = 0.0
        run(p, clock, 20.0)
    run(p, clock, MAX_HOLD_S + 1.0, step=0.1)
    load.others = 1.0
    run(p, clock, 1.0)
    load.others = 0.0
    changes = run(p, clock, UP_HOLD_S + 1.0)
    assert changes, "after a calm minute a raise waits the base hold again"
    assert FLAP_S > UP_HOLD_S


def test_an_idle_gap_replaces_the_load_average():
    p, clock, load = policy()
    run(p, clock, 1.0)
    load.others = 1.0  # while we were idle, another program ran flat out
    clock.t += 30.0
    change = p.begin()
    assert change is not None and change.decode == 1


def test_a_quiet_idle_gap_gives_the_threads_back_at_once():
    p, clock, load = policy()
    load.others = 1.0
    run(p, clock, 1.0)
    assert p.state.decode == 1
    load.others = 0.0  # the other program ended while nobody chatted
    clock.t += 30.0
    change = p.begin()
    assert change is not None and (change.decode, change.batch) == (2, 2)


def test_a_reading_over_a_few_milliseconds_is_not_trusted():
    # The kernel counts CPU time in 10 ms ticks: right after a load, one tick of another program's
    # time over a 5 ms span reads as two CPUs busy. The first tick waits, and short spans are ignored.
    p, clock, load = policy()
    load.others = 2.0  # what such a reading says
    clock.t += 0.005
    assert p.begin() is None
    clock.t += TICK_S
    load.last = clock.t - 0.01  # another reader took the meter's reading a moment ago
    assert p.begin() is None and p.state.decode == 2


def test_a_manual_count_is_never_changed():
    p, clock, load = policy(best=(3, 3), cpus=4, manual=True)
    load.others = 4.0
    assert run(p, clock, 2.0) == []
    assert p.state.reason == "manual" and "set in Settings" in p.state.describe()


def test_two_of_our_models_share_the_cpus():
    claims = Claims()
    a, clock_a, _ = policy(best=(4, 4), cpus=4, claims=claims, key=1)
    b, clock_b, _ = policy(best=(4, 4), cpus=4, claims=claims, key=2)
    run(a, clock_a, 1.0)
    assert a.state.decode == 4
    changes = run(b, clock_b, 1.0)  # a holds four threads while it evaluates
    assert changes and b.state.decode == 1
    a.end()
    run(b, clock_b, UP_HOLD_S + 1.0)
    assert b.state.decode == 4


@pytest.mark.parametrize("best", [(1, 1), (1, 2)])
def test_never_below_one_thread(best):
    p, clock, load = policy(best=best)
    load.others = 2.0
    run(p, clock, 2.0)
    assert p.state.decode >= 1 and p.state.batch >= 1
