"""Turn logic through the real engine.api.Assistant on scripted fake backends (tests/fake_backend.py):
KV bookkeeping, the cascade, window overflow, Stop in decode and in prefill, failed decodes, and the
degraded start. Every count is exact: the fake records each piece it evaluates."""

import math
import threading

import pytest

from engine.api import Chunk, InputError, Retracted, TurnFold
from engine.chat.window import REFILL
from engine.kv.snapshot import common_prefix
from tests.fake_backend import (MIB, VRAM_MB, Answer, dones, fakes, make_assistant,  # noqa: F401
                                send)

FIRST = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
# What a turn after an answer adds: the answer's end marker, then the new user turn.
NEXT = "<|im_end|>\n" + FIRST


def tokens(fake, text: str) -> list[int]:
    return fake.vocab.tokenize(text, special=True)



# ---- KV bookkeeping

def test_each_turn_evaluates_only_its_new_tokens(fakes, make_assistant):
    # Plain decoding: speculation also evaluates the drafts it rejects (tests/test_speculation_fake.py)
    a = make_assistant(str(fakes.model_file("m")), speculative="off")
    fake = fakes.backend("m")
    cid = a.new_conversation("Be brief.")
    texts = ["hi", "how are you?", "tell me more about that", "ok thanks"]
    kv = []
    for i, text in enumerate(texts):
        start = fake.evaluated
        (done,) = dones(send(a, cid, text))
        prompt = fake.prompts[-1]
        if i == 0:
            assert prompt == tokens(fake, "<|im_start|>system\nBe brief.<|im_end|>\n" + FIRST.format(text))
        else:  # the cache held the whole conversation so far: only the new turn is read
            assert prompt == kv + tokens(fake, NEXT.format(text))
        new = len(prompt) - len(kv)
        s = done.stats
        assert (s.prompt_tokens_evaluated, s.prompt_tokens_cached) == (new, len(kv))
        assert s.cache_mode == ("fresh" if i == 0 else "append")
        # prompt pieces + every answer token but the end-of-turn one, which is sampled, never read
        assert fake.evaluated - start == new + len(done.token_ids) == new + s.completion_tokens
        kv = fake.kv
        assert kv == prompt + done.token_ids
    assert [len(tokens(fake, NEXT.format(t))) for t in texts[1:]] == [len(t) + 21 for t in texts[1:]]


# ---- cascade

@pytest.mark.parametrize("reader_leaves_early", [False, True], ids=["plain", "reader-leaves-before-finish"])
def test_a_weak_l1_answer_is_superseded_and_re_asked_on_l2(fakes, make_assistant, reader_leaves_early):
    l1, l2 = fakes.model_file("l1"), fakes.model_file("l2")
    fakes.script("l1").enqueue(Answer("Maybe.", logprob=math.log(0.2)))
    fakes.script("l2").enqueue(Answer("Surely.", logprob=-0.01))
    a = make_assistant(tiers={"L1": str(l1), "L2": str(l2)}, cascade=True, cascade_threshold=0.5)
    w1 = a.manager.find_loaded(str(l1))
    stop = threading.Event()
    left = threading.Event()
    seen = {}
    if reader_leaves_early:
        # Hold the L1 job after its TurnResult (the worker's _finish has not run): the reader takes
        # the result, leaves, and the re-ask on L2 starts with the same caller's event.
        publish = w1.publish
        calls = []

        def late_publish(conversation_id=None):
            calls.append(conversation_id)
            if len(calls) > 1:  # the first publishes before the TurnResult goes out; hold the one after
                assert left.wait(5)
            publish(conversation_id)

        w1.publish = late_publish
    cid = a.new_conversation()
    events = []
    for e in a.send(cid, "Hello there, how are you today?", cancel=stop):
        events.append(e)
        if isinstance(e, Retracted):
            job = w1.current
            seen = {"job_running": job is not None, "job_cancelled": job is not None and job.cancel.is_set(),
                    "caller_stopped": stop.is_set()}
            left.set()
    (taken,) = [e for e in events if isinstance(e, Retracted)]
    (second,) = dones(events)  # the answer taken back streams as Retracted, never as a TurnDone
    first = taken.answer
    assert (first.level, first.text, taken.next_level) == ("L1", "Maybe.", "L2")
    assert first.confidence == pytest.approx(0.2)
    assert (second.level, second.text) == ("L2", "Surely.")
    assert second.route_reason == taken.reason == "cascade: L1 confidence 0.20 < 0.50"
    assert second.stats.finish_reason == "stop"  # the re-ask did not start cancelled
    assert not stop.is_set()
    if reader_leaves_early:
        # The reader's leaving stopped its own job only, never the caller's event.
        assert seen == {"job_running": True, "job_cancelled": True, "caller_stopped": False}
    assert "".join(e.text for e in events if isinstance(e, Chunk)) == "Maybe.Surely."
    fold = TurnFold()
    for e in events:
        fold.take(e)
    assert (fold.text, fold.final, fold.answers) == ("Surely.", second, [first, second])
    # The record keeps the weak answer, superseded; the models never see it again.
    assert [(m["role"], m["content"], m["superseded"]) for m in a.transcript(cid)] == [
        ("user", "Hello there, how are you today?", False), ("assistant", "Maybe.", True),
        ("assistant", "Surely.", False)]
    b2 = fakes.backend("l2")
    assert b2.prompts == [tokens(b2, FIRST.format("Hello there, how are you today?"))]
    (done,) = dones(send(a, cid, "hi", route="L1"))
    b1 = fakes.backend("l1")
    assert b1.text(b1.prompts[-1]).count("Surely.") == 1 and "Maybe." not in b1.text(b1.prompts[-1])
    assert done.level == "L1"


# ---- the window

@pytest.mark.parametrize("can_shift", [True, False], ids=["kv-shift", "reeval"])
def test_overflow_drops_the_oldest_whole_turns_and_reads_only_what_changed(fakes, make_assistant, can_shift):
    a = make_assistant(str(fakes.model_file("m", can_shift=can_shift)), n_ctx=512)
    fake = fakes.backend("m")
    # Eight different words: the same word eight times is 48 byte-tokens of one 6-token block,
    # which the repetition guard rightly cuts (engine/inference/repetition.py).
    words = "one two three four five six seven eight nine "
    fakes.script("m").enqueue(*[Answer(f"Reply {i}: " + words) for i in range(8)])
    cid = a.new_conversation("Be brief.")
    system = tokens(fake, "<|im_start|>system\nBe brief.<|im_end|>\n")
    budget = 512 - 64  # n_ctx minus the answer's reserve (max_tokens)
    kv, moves = [], []
    for i in range(8):
        text = f"Question {i}: " + " ".join(["please"] * 6)
        n_calls = len(fake.calls)
        (done,) = dones(send(a, cid, text))
        prompt, ctx, s = fake.prompts[-1], done.stats.context, done.stats
        assert ctx["used"] == len(prompt) <= budget and ctx["budget"] == budget
        assert prompt[:len(system)] == system  # the system block always stays
        shifts = [c for c in fake.calls[n_calls:] if c[0] == "shift_out"]
        if s.context_shift is None:
            assert not shifts
            if kv:
                assert prompt == kv + tokens(fake, NEXT.format(text))
            assert s.prompt_tokens_evaluated == len(prompt) - len(kv)
        else:
            moves.append((i, ctx["first_kept"]))
            assert ctx["used"] <= int(budget * REFILL)  # refilled low: shifts stay occasional
            kept = a.conversation(cid).messages[ctx["first_kept"]:]
            assert kept[0].role == "user"  # whole turns leave, never half of one
            after_system = fake.text(prompt[len(system):])
            assert after_system.startswith(f"<|im_start|>user\n{kept[0].content}<|im_end|>")
            if can_shift:
                (_, keep, discard, ok), = shifts
                assert ok and s.context_shift == "kv"
                shifted = kv[:keep] + kv[keep + discard:]
                assert prompt[:len(shifted)] == shifted
                # only the new turn is read: the kept turns slid down in the cache
                assert s.prompt_tokens_evaluated == len(prompt) - len(shifted) == len(tokens(fake, NEXT.format(text)))
            else:
                assert s.context_shift == "reeval"
                # Rolled back to what the old and new windows share (the system block and the
                # start of a user turn) and read the rest again.
                common = common_prefix(kv, prompt)
                assert common == len(system) + len(tokens(fake, "<|im_start|>user\nQuestion "))
                assert s.prompt_tokens_cached == common
                assert s.prompt_tokens_evaluated == len(prompt) - common
        kv = fake.kv
        assert kv == prompt + done.token_ids
    assert len(moves) >= 1 and moves[0][1] > 0
    assert [mv for _, mv in moves] == sorted(mv for _, mv in moves)  # the window only moves forward
    assert len(a.transcript(cid)) == 16  # every turn stays in the record


# ---- Stop

def test_stop_during_decode_keeps_what_was_evaluated_and_the_next_turn_reuses_it(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    fakes.script("m").enqueue(Answer("This answer goes on and on ", stop=False))

    def stop_at_sixth(backend, n):
        if n == 5:
            a.stop()  # Stop pressed while the sixth token is being decoded

    fake.on_sample.append(stop_at_sixth)
    cid = a.new_conversation()
    (done,) = dones(send(a, cid, "talk"))
    fake.on_sample.clear()
    prompt = fake.prompts[-1]
    assert done.stats.finish_reason == "cancelled" and done.stats.completion_tokens == 6
    assert done.text == "This a" and len(done.token_ids) == 6
    # the sixth token was sampled (and shown) but never read back: at most the last one is missing
    assert fake.kv == prompt + done.token_ids[:-1]
    assert a.transcript(cid)[-1]["content"] == "This a"
    kv = fake.kv
    (nxt,) = dones(send(a, cid, "go on"))
    assert nxt.stats.cache_mode == "append" and nxt.stats.prompt_tokens_cached == len(kv)
    assert nxt.stats.prompt_tokens_evaluated == 1 + len(tokens(fake, NEXT.format("go on")))


def test_stop_during_prefill_keeps_the_pieces_read_and_the_next_turn_reuses_them(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    long_text = ("Please read all of this carefully. " * 9).strip()

    def stop_in_third_piece(backend, index, part, call):
        if index == 2 and len(call) > 100:
            a.stop()  # Stop pressed while the third 32-token piece is evaluated

    fake.on_piece.append(stop_in_third_piece)
    cid = a.new_conversation()
    (done,) = dones(send(a, cid, long_text))
    fake.on_piece.clear()
    prompt = tokens(fake, FIRST.format(long_text))
    assert done.stats.finish_reason == "cancelled" and done.text == "" and done.token_ids == []
    assert done.stats.prompt_tokens_evaluated == 96 and fake.evaluated == 96
    assert fake.kv == prompt[:96] and fake.prompts == []  # nothing was sampled
    (nxt,) = dones(send(a, cid, "short one"))
    assert nxt.stats.prompt_tokens_cached == 96 and nxt.stats.cache_mode == "append"
    assert nxt.stats.prompt_tokens_evaluated == len(fake.prompts[-1]) - 96
    assert fake.prompts[-1][:len(prompt)] == prompt


# ---- failed decodes

def test_a_prefill_failing_part_way_keeps_whole_pieces_and_the_next_turn_resyncs(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    cid = a.new_conversation()
    long_text = ("A message long enough for several pieces. " * 8).strip()
    fake.fail_after(3)
    with pytest.raises(InputError, match="the model stopped with an error"):
        send(a, cid, long_text)
    prompt = tokens(fake, FIRST.format(long_text))
    assert fake.kv == prompt[:96]  # three whole pieces; the failed one left nothing
    assert [m["role"] for m in a.transcript(cid)] == ["user"]  # no answer row: nothing was shown
    (done,) = dones(send(a, cid, "still there?"))
    assert done.stats.prompt_tokens_cached == 96
    assert done.stats.prompt_tokens_evaluated == len(fake.prompts[-1]) - 96
    assert fake.kv == fake.prompts[-1] + done.token_ids


def test_a_decode_failing_mid_answer_keeps_the_shown_part_and_the_next_turn_extends_it(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    fakes.script("m").enqueue(Answer("Interrupted answer."))
    cid = a.new_conversation()
    fake.fail_after(1 + 3)  # the prompt (one piece) and three decoded tokens; the fourth fails
    events = []
    with pytest.raises(InputError, match="the model stopped with an error"):
        for e in a.send(cid, "hi"):
            events.append(e)
    prompt = fake.prompts[-1]
    assert "".join(e.text for e in events) == "Inte"
    row = a.transcript(cid)[-1]
    assert (row["content"], row["stats"]["finish_reason"]) == ("Inte", "interrupted")
    assert fake.kv == prompt + tokens(fake, "Int")  # the fourth token was sampled, not read
    kv = fake.kv
    (done,) = dones(send(a, cid, "and?"))
    assert done.stats.cache_mode == "append" and done.stats.prompt_tokens_cached == len(kv)
    assert done.stats.prompt_tokens_evaluated == 1 + len(tokens(fake, NEXT.format("and?")))


# ---- degraded start

@pytest.mark.parametrize("l1_problem", ["missing", "broken"])
def test_degraded_mode_loads_l2_once_planned_for_the_gpu(fakes, make_assistant, tmp_path, l1_problem):
    l2 = fakes.model_file("l2")
    if l1_problem == "missing":
        l1 = str(tmp_path / "missing.gguf")
    else:
        l1 = str(fakes.model_file("l1", load_error="l1.gguf is damaged"))
    a = make_assistant(tiers={"L1": l1, "L2": str(l2)})
    assert a.degraded and a.degraded.startswith("L1 model unavailable")
    (w,) = a.manager.loaded()
    assert w.model.path == l2.resolve()
    assert w.plan.budget_bytes == VRAM_MB * MIB and w.plan.offload == "full"
    assert fakes.loads[-1] == ("l2", w.backend.params) and w.backend.params.n_gpu_layers == w.plan.n_layers + 1
    loads = len(fakes.loads)
    cid = a.new_conversation()
    for route in ("auto", "L1", "L2"):
        (done,) = dones(send(a, cid, "Hello there, how are you today?", route=route))
        assert done.model == w.model.id
    assert len(fakes.loads) == loads and a.manager.loaded() == [w]
