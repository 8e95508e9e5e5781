"""The summary chain's background jobs on a fake backend (tests/fake_backend.py): a chat turn
pre-empts a summary within one prompt piece, the next run goes on from what it had read, a summary
pre-empted MAX_PREEMPTIONS times runs to the end, and unloading the model never leaves a summary waiter hanging."""

import threading
import time

from engine.chat.summaries import MAX_PREEMPTIONS
from engine.inference.generate import common_prefix
from engine.inference.runtime import FOREGROUND
from engine.config.ownership import hand_over
from tests.fake_backend import Answer, Gate, dones, fakes, make_assistant, send, wait_until  # noqa: F401

SUMMARY_MARK = "You summarise conversations"  # in every summary prompt (engine/chat/summaries.py)
SUMMARY = "The user greeted the assistant."


def in_summary(backend, call) -> bool:
    """A piece of a summary's prompt: the mark is in what it evaluates or, for a run going on from
    a pre-empted one, in the context it restored."""
    return SUMMARY_MARK in backend.text(backend.kv_tokens + call)



def summary_setup(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")), summary_every=1)
    fake = fakes.backend("m")
    fakes.script("m").when(SUMMARY_MARK, Answer(SUMMARY))
    runs: list[list[int]] = []  # pieces started by each summary run (tokens each)

    def record(backend, index, part, call):
        if in_summary(backend, call):
            if index == 0:
                runs.append([])
            runs[-1].append(len(part))

    fake.on_piece.append(record)
    return a, fake, a.manager.loaded()[0], runs


def in_background(a, fn):
    """fn() on a thread of its own that drives `a` meanwhile (its owner: engine/config/ownership.py) and
    hands it back to this one when it ends."""
    result = {}
    here = threading.current_thread()

    def run():
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            result["error"] = exc
        finally:
            hand_over(a, here)

    t = threading.Thread(target=run)
    hand_over(a, t)
    t.start()
    return t, result


def test_a_turn_pre_empts_a_summary_within_one_prompt_piece(fakes, make_assistant):
    a, fake, worker, runs = summary_setup(fakes, make_assistant)
    gate = Gate(lambda b, index, part, call: index == 2 and in_summary(b, call))
    fake.on_piece.append(gate)
    cid = a.new_conversation()
    for text in ("hello", "how are you", "fine thanks"):  # the third turn queues a summary of the first
        send(a, cid, text)
    kv = fake.kv
    handle = a.summary_chain.jobs[cid]
    assert gate.reached.wait(5)  # the summary is reading its third piece
    thread, result = in_background(a, lambda: send(a, cid, "one more question"))
    wait_until(lambda: worker.current is not None and worker.current.preempt.is_set())
    gate.release()
    thread.join(5)
    (done,) = dones(result["value"])
    # The summary finished the piece in flight, then yielded: three pieces read, not its whole prompt.
    assert runs[0] == [32, 32, 32]
    # It gave the context back: the turn read only its own new tokens.
    assert done.stats.cache_mode == "append" and done.stats.prompt_tokens_cached == len(kv)
    turn_prompts = [p for p in list(fake.prompts) if SUMMARY_MARK not in fake.text(p)]
    assert turn_prompts[-1][:len(kv)] == kv
    assert handle.done.wait(5) and handle.preemptions == 1
    assert a.summaries(cid)[0]["text"] == SUMMARY
    # The second run went on from the 96 tokens the first had read: the prompt was read once (but
    # for its start, which the conversation's context held already).
    summary_prompt = next(p for p in fake.prompts if SUMMARY_MARK in fake.text(p))
    assert sum(runs[0]) + sum(runs[1]) == len(summary_prompt) - common_prefix(turn_prompts[0], summary_prompt)


def test_a_summary_pre_empted_twice_runs_to_the_end(fakes, make_assistant):
    a, fake, worker, runs = summary_setup(fakes, make_assistant)
    gate = Gate(lambda b, index, part, call: index == 2 and in_summary(b, call), times=MAX_PREEMPTIONS + 1)
    fake.on_piece.append(gate)
    cid = a.new_conversation()
    # Long enough that each of the three runs, going on from the last, still has a third piece to read.
    for text in ("hello " * 40, "how are you " * 30, "fine thanks " * 30):
        send(a, cid, text)
    handle = a.summary_chain.jobs[cid]
    for k in range(MAX_PREEMPTIONS + 1):
        assert gate.reached.wait(5), f"summary run {k + 1} never started"
        n_prompts = len(fake.prompts)
        thread, result = in_background(a, lambda: send(a, cid, f"question {k}"))
        wait_until(lambda: worker.current is not None and worker.current.preempt.is_set())
        gate.release()
        thread.join(5)
        assert "value" in result, result.get("error")
        answered = [fake.text(p) for p in fake.prompts[n_prompts:]]
        if k < MAX_PREEMPTIONS:  # it yielded: the turn was answered first, the summary not at all
            assert len(runs[k]) == 3 and not any(SUMMARY_MARK in t for t in answered)
        else:  # it no longer yields: the whole summary is written before the turn is answered
            assert [SUMMARY_MARK in t for t in answered[:2]] == [True, False]
            assert a.summaries(cid)[0]["text"] == SUMMARY
    assert handle.preemptions == MAX_PREEMPTIONS and handle.done.is_set()
    # Each run went on from the last: together they read the summary's prompt once (but for its
    # start, which the conversation's context held), the last one only what was left.
    summary_prompt = next(p for p in fake.prompts if SUMMARY_MARK in fake.text(p))
    first_turn = next(p for p in fake.prompts if SUMMARY_MARK not in fake.text(p))
    read = [sum(r) for r in runs[:MAX_PREEMPTIONS + 1]]
    assert sum(read) == len(summary_prompt) - common_prefix(first_turn, summary_prompt) and read[-1] > 0


def test_unloading_the_model_ends_a_queued_summary_so_nobody_waits_for_it(fakes, make_assistant):
    a, fake, worker, runs = summary_setup(fakes, make_assistant)
    cid = a.new_conversation()
    send(a, cid, "hello")
    send(a, cid, "how are you")
    started = threading.Event()

    def busy(w, job):  # the model is busy when the summary is queued: it waits in the queue
        started.set()
        while not job.cancel.is_set():
            time.sleep(0.005)

    for event in a.send(cid, "fine thanks"):
        if dones([event]):
            worker.submit(busy, FOREGROUND)  # before the turn's generator queues the summary
    handle = a.summary_chain.jobs[cid]
    assert started.wait(5) and not handle.done.is_set()
    a.manager.close()  # drains the queue: the summary never runs
    assert handle.done.is_set() and handle.summary_id is None
    t0 = time.monotonic()
    a.wait_for_summaries(timeout=5)
    assert time.monotonic() - t0 < 1.0
    assert runs == [] and a.summaries(cid) == []


def test_the_turn_whose_window_moves_carries_the_summary_of_what_left(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")), n_ctx=512, summary_every=1)
    fake = fakes.backend("m")
    fakes.script("m").when(SUMMARY_MARK, Answer(SUMMARY))
    cid = a.new_conversation()
    for i in range(10):
        (done,) = dones(send(a, cid, f"Question {i}: " + " ".join(["please"] * 6)))
        if done.stats.context["first_kept"] > 0:
            break
    else:
        raise AssertionError("the window never moved")
    # The window moved on this turn: it waited for the summary and carries it (pre-empted or not).
    assert done.stats.context_shift is not None and done.stats.summary_used
    turn_prompts = [p for p in list(fake.prompts) if SUMMARY_MARK not in fake.text(p)]
    assert f"Summary of the earlier conversation: {SUMMARY}" in fake.text(turn_prompts[-1])
    assert not any(f"Question {k}:" in fake.text(turn_prompts[-1]) for k in range(done.stats.context["first_kept"] // 2))


def test_stop_ends_a_turns_wait_for_its_summary(fakes, make_assistant):
    """A turn whose window moves waits for the summary of what leaves it (the summary stops
    yielding meanwhile); Stop ends that wait within a poll, and the summary yields again."""
    a = make_assistant(str(fakes.model_file("m")), summary_every=1)
    fake = fakes.backend("m")
    fakes.script("m").when(SUMMARY_MARK, Answer(SUMMARY))
    cid = a.new_conversation()
    a.configure(summary_every=0)  # three turns nobody summarises yet
    for i in range(3):
        dones(send(a, cid, f"Question {i}"))
    a.configure(summary_every=1)
    held = Gate(lambda b, piece, part, call: SUMMARY_MARK in b.text(call))
    fake.on_piece.append(held)
    stop = threading.Event()
    thread, result = in_background(a, lambda: a.summary_chain.catch_up(a.conversation(cid), a.config.summary_every, cancel=stop))
    assert held.reached.wait(5)  # the summary it queued runs, held mid-piece
    handle = a.summary_chain.jobs[cid]
    assert handle.urgent.is_set() and thread.is_alive()
    t0 = time.monotonic()
    stop.set()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - t0 < 1.0 and "error" not in result
    assert not handle.urgent.is_set()  # nobody waits for it now: it yields to chat requests again
    held.release()
    assert handle.done.wait(5) and a.db.summaries(cid)


def test_a_turn_stopped_before_the_model_was_asked_ends_without_queuing(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    cid = a.new_conversation()
    (first,) = dones(send(a, cid, "Hello"))
    asked = len(fake.prompts)
    stop = threading.Event()
    stop.set()  # pressed while memories were retrieved or the window fitted
    (done,) = dones(send(a, cid, "Another question", cancel=stop))
    assert done.stats.finish_reason == "cancelled" and done.stats.prompt_tokens_evaluated == 0
    assert done.stats.prompt_tokens_cached == len(fake.kv) and len(fake.prompts) == asked
    (after,) = dones(send(a, cid, "And now?"))  # the next turn reads only what is new
    assert after.stats.prompt_tokens_cached >= len(fake.prompts[asked - 1]) - 1
