"""app/background.py's Runner: jobs run in order on the named thread, their results and errors
come back on the GUI thread, and a closed Runner runs what was queued, then its last job, and
refuses more."""

from __future__ import annotations

import threading

import pytest

from app.background import Runner


def test_jobs_run_in_order_on_the_named_thread_and_answer_on_the_gui_thread(qtbot):
    runner = Runner("test-runner")
    gui = threading.get_ident()
    ran, answered = [], []
    gate = threading.Event()
    runner.run(gate.wait)  # the next jobs queue behind this one
    for i in range(5):
        runner.run(lambda i=i: ran.append((i, threading.current_thread().name)) or i * i,
                   lambda result: answered.append((result, threading.get_ident())))
    assert not ran
    gate.set()
    qtbot.waitUntil(lambda: len(answered) == 5, timeout=10_000)
    assert ran == [(i, "test-runner") for i in range(5)]
    assert answered == [(i * i, gui) for i in range(5)]
    runner.close()


def test_an_error_goes_to_on_error_on_the_gui_thread_and_the_future(qtbot):
    runner = Runner("test-runner")
    errors = []

    def fail():
        raise ValueError("no")

    future = runner.run(fail, lambda _r: errors.append("done?"), lambda exc: errors.append((exc, threading.get_ident())))
    qtbot.waitUntil(lambda: bool(errors), timeout=10_000)
    assert isinstance(errors[0][0], ValueError) and errors[0][1] == threading.get_ident()
    with pytest.raises(ValueError):
        future.result(0)
    assert runner.run(lambda: 7).result(10) == 7  # the thread goes on after a failed job
    runner.close()


def test_to_gui_from_the_runner_thread_keeps_the_order(qtbot):
    runner = Runner("test-runner")
    seen = []

    def stream():
        for i in range(50):
            runner.to_gui(seen.append, i)

    runner.run(stream)
    qtbot.waitUntil(lambda: len(seen) == 50, timeout=10_000)
    assert seen == list(range(50))
    runner.close()


def test_close_runs_what_was_queued_then_last_and_refuses_more():
    runner = Runner("test-runner")
    order = []
    gate = threading.Event()
    runner.run(gate.wait)
    runner.run(lambda: order.append("queued"))
    threading.Timer(0.2, gate.set).start()
    runner.close(lambda: order.append(("last", threading.current_thread().name)))
    assert order == ["queued", ("last", "test-runner")]
    with pytest.raises(RuntimeError, match="closed"):
        runner.run(lambda: None)
    runner.close()  # twice is harmless
