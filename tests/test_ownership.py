"""Each native object has one owner thread (engine/config/ownership.py), and the suite checks it: a call from
another thread raises WrongThread naming both. The slips issue 22 found, each as the call that used
to be made from the wrong thread: routing read a busy model's live KV list, the engine thread
tokenized on the model's own context, the server's event loop read the Assistant's tiers and a
thread pool called `embed`. The window's API-control thread is tests/app/test_api_server_threads.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from engine.config import ownership
from engine.chat.session import Message
from engine.chat.targets import LocalTarget
from engine.inference.backend import Backend, SamplingParams
from engine.inference.generate import common_prefix
from engine.inference.runtime import BACKGROUND
from engine.memory.embedder import Embedder
from engine.config.ownership import WrongThread, check_owner, hand_over, owned
from tests.fake_backend import Gate, dones, fakes, make_assistant, send, wait_until  # noqa: F401
from tests.server_util import KEY, serve  # noqa: F401

import httpx


class Thing:
    def __init__(self):
        ownership.adopt(self)

    @owned
    def touch(self) -> str:
        return threading.current_thread().name


def on_thread(fn, name: str = "elsewhere"):
    """fn() on a new thread named `name`: what it returned, or the exception it raised."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, name=name)
    t.start()
    t.join(10)
    return box.get("error", box.get("value"))


@pytest.fixture
def parked():
    """A thread that is alive and owns nothing until a test hands it something."""
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, name="model:parked", daemon=True)
    t.start()
    yield t
    stop.set()


# ---- the check itself

def test_a_call_from_another_thread_raises_naming_both_threads_and_only_while_the_check_is_on():
    thing = Thing()
    assert thing.touch() == "MainThread"
    err = on_thread(thing.touch, "intruder")
    assert isinstance(err, WrongThread)
    assert "Thing belongs to thread 'MainThread' but was called from thread 'intruder'" in str(err)
    ownership.enable(False)
    try:
        assert on_thread(thing.touch, "intruder") == "intruder"  # off (the default outside tests): no check
    finally:
        ownership.enable(True)


def test_an_object_handed_over_belongs_to_its_new_thread_and_one_handed_to_nobody_to_anyone(parked):
    thing = Thing()
    hand_over(thing, parked)
    with pytest.raises(WrongThread, match="'model:parked' but was called from thread 'MainThread'"):
        thing.touch()
    hand_over(thing, None)
    assert thing.touch() == "MainThread" and on_thread(thing.touch) == "elsewhere"
    check_owner(object())  # an object nobody adopted is nobody's


# ---- a model's backend: its thread's only

BACKEND_CALLS = {
    "tokenize": lambda b: b.tokenize("x", special=False), "tokenize_control": lambda b: b.tokenize_control("x"),
    "token_bytes": lambda b: b.token_bytes(1), "detokenize": lambda b: b.detokenize([1]),
    "token_text": lambda b: b.token_text(1), "is_eog": lambda b: b.is_eog(1), "kv_tokens": lambda b: b.kv_tokens,
    "reset": lambda b: b.reset(), "keep_prefix": lambda b: b.keep_prefix(0), "shift_out": lambda b: b.shift_out(0, 1),
    "save_sequence": lambda b: b.save_sequence(), "restore_sequence": lambda b: b.restore_sequence((b"", [])),
    "eval": lambda b: b.eval([1]), "make_sampler": lambda b: b.make_sampler(SamplingParams()),
    "sample": lambda b: b.sample(None), "first_logits": lambda b: b.first_logits(), "close": lambda b: b.close(),
}


@pytest.mark.parametrize("call", sorted(BACKEND_CALLS))
def test_every_call_that_touches_a_backends_context_raises_off_its_thread(call, parked):
    """The real Backend class (no model loaded: the check raises before anything native is read)."""
    backend = Backend.__new__(Backend)
    hand_over(backend, parked)
    with pytest.raises(WrongThread, match="Backend belongs to thread 'model:parked'"):
        BACKEND_CALLS[call](backend)


def test_a_loaded_backend_is_its_model_threads_and_others_use_its_vocabulary(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    worker, fake = a.manager.loaded()[0], fakes.backend("m")
    with pytest.raises(WrongThread, match=f"thread 'model:{worker.model.id}' but was called from thread 'MainThread'"):
        fake.kv_tokens
    with pytest.raises(WrongThread):
        fake.tokenize("hello", special=False)
    assert worker.vocab.tokenize("hello", special=False) == list(b"hello")  # any thread: the vocabulary alone
    assert a.backend.n_ctx == 4096 and a.backend.identity == worker.vocab.identity  # facts: plain values
    [kv] = worker.submit(lambda w, job: job.emit(w.backend.kv_tokens))  # a job runs on the owner
    assert kv == []


# ---- the slips, each from the thread that made it

def held_in_a_job(fakes, stem: str, worker):
    """Hold `worker`'s thread in the middle of a background job evaluating 40 tokens; the gate."""
    gate = Gate(lambda backend, index, part, call: len(call) == 40)
    fakes.backend(stem).on_piece.append(gate)
    worker.submit(lambda w, job: w.backend.eval([ord("x")] * 40), BACKGROUND)
    assert gate.reached.wait(5)
    return gate


def test_routing_prices_a_switch_from_what_the_busy_target_published(fakes, make_assistant):
    """route() ran on the engine thread and read the L2 model's live KV list while a job changed it."""
    l1, l2 = fakes.model_file("l1"), fakes.model_file("l2")
    a = make_assistant(tiers={"L1": str(l1), "L2": str(l2)})
    cid, other = a.new_conversation(), a.new_conversation()
    dones(send(a, cid, "hi", route="L1"))  # warm on L1
    dones(send(a, other, "hello there", route="L2"))  # L2 loaded, holding another conversation
    w2 = a.manager.find_loaded(str(l2))
    published = w2.view.kv_tokens
    gate = held_in_a_job(fakes, "l2", w2)
    try:
        text = "Explain how photosynthesis works in plants and why leaves are green."
        decision = a.route(cid, text)  # the engine thread, while L2's thread is mid-job
        assert "L2" in (decision.level, decision.wanted), decision
        user = Message("user", text)
        history = a.conversation(cid).history()
        prompt = LocalTarget("L2", w2).session(history).prompt(user)
        # Priced from what L2's thread published after its last job, never its half-evaluated one.
        assert w2.view.kv_tokens == published
        assert LocalTarget("L2", w2).uncached_tokens(history, user) == len(prompt) - common_prefix(published, prompt)
    finally:
        gate.release()
    wait_until(lambda: not w2.busy)
    assert len(w2.view.kv_tokens) == len(published) + 40  # published once the job ended


def test_a_turn_renders_and_counts_on_the_engine_thread_while_the_model_decodes(fakes, make_assistant):
    """The engine thread tokenized (and read token bytes) on the very backend the model thread was
    decoding with, and both changed its caches; now it uses the vocabulary alone."""
    a = make_assistant(str(fakes.model_file("m")))
    worker, fake = a.manager.loaded()[0], fakes.backend("m")
    cid = a.new_conversation()
    dones(send(a, cid, "hello"))
    gate = held_in_a_job(fakes, "m", worker)

    def release_when_the_turn_waits():  # routed, fitted and rendered on this thread: its job is queued
        wait_until(lambda: worker.current is not None and worker.current.preempt.is_set())
        gate.release()

    releaser = threading.Thread(target=release_when_the_turn_waits)
    releaser.start()
    (done,) = dones(send(a, cid, "and what about tomorrow?"))
    releaser.join(5)
    assert done.text == "Answer 2." and done.stats.confidence["n_tokens"] == len(done.token_ids)
    assert "and what about tomorrow?" in fake.text(fake.prompts[-1])


def test_the_tiers_are_the_engine_threads_and_others_read_what_it_published(fakes, make_assistant):
    l1, l2 = fakes.model_file("l1"), fakes.model_file("l2")
    a = make_assistant(tiers={"L1": str(l1), "L2": str(l1)})
    before = a.published_tiers
    assert isinstance(on_thread(lambda: a.tiers), WrongThread)
    assert on_thread(lambda: dict(a.published_tiers)) == {"L1": str(l1), "L2": str(l1)}
    a.apply_setting("tier.L2", str(l2))  # the owner changes it: a new mapping is published whole
    assert dict(a.published_tiers) == {"L1": str(l1), "L2": str(l2)} and dict(before) == {"L1": str(l1), "L2": str(l1)}
    assert isinstance(on_thread(lambda: a.send(a.new_conversation(), "hi")), WrongThread)


def test_the_servers_event_loop_reads_only_the_published_tiers(serve, fakes):
    """/v1/models and every turn request read the Assistant's tiers on the event loop, while the
    "api-engine" thread owned it."""
    server = serve()
    r = httpx.get(server.url + "/models/L1", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert r.status_code == 200 and r.json()["x_tiers"] == ["L1"], r.text
    model = server.assistant.published_tiers["L1"]
    r = httpx.get(server.url + "/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert r.status_code == 200 and [m["id"] for m in r.json()["data"]][:4] == ["auto", "L1", "L2", "L3"]
    r = httpx.post(server.url + "/chat/completions", headers={"Authorization": f"Bearer {KEY}"}, timeout=30,
                   json={"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "Answer 1.", r.text
    # While the server runs its engine thread owns the Assistant; the thread that started it, again after.
    assert isinstance(on_thread(lambda: server.assistant.tiers), WrongThread)
    assert ownership.owner_of(server.assistant) is server.engine._thread
    server.stop()
    assert ownership.owner_of(server.assistant) is threading.main_thread() and server.assistant.tiers


# ---- embeddings: the owner's call (the API server runs them as jobs on its engine thread)

class StubEmbedder(Embedder):
    """An Embedder whose "model" loads at once and embeds a text as its length."""

    def _load(self) -> None:
        self._encode = lambda texts: np.array([[len(t), 0.0] + [0.0] * 382 for t in texts], dtype=np.float32)
        self._ready.set()
        self._done.set()


def test_embed_is_the_owners_call(fakes, make_assistant):
    """The server's thread pool called `embed` while another thread drove the Assistant."""
    a = make_assistant(str(fakes.model_file("m")))
    emb = StubEmbedder(dim=384).start()
    a.memory = type("Memory", (), {"embedder": emb, "status": lambda self: None})()  # what embed reads
    try:
        assert np.allclose(a.embed(["abcd"])[:, 0], 1.0)
        assert isinstance(on_thread(lambda: a.embed(["x"])), WrongThread)
    finally:
        a.memory = None
        emb.close()
