"""Routed chat over the two demo models (L1 = demo-small, L2 = demo-int4) and a loopback L3."""

import threading

import pytest

from engine.inference.backend import LoadParams
from engine.api import Assistant, EngineConfig, InputError, Retracted, TurnDone
from engine.inference.manager import ModelManager, ram_bytes
from engine.config.paths import db_path
from engine.inference.remote import RemoteConfig
from engine.inference.runtime import BACKGROUND, FOREGROUND
from engine.storage import Database

from .helpers import THREADS, greedy
from .l3_server import LoopbackServer

DESIGN = "Design a scalable architecture for a chat service with millions of users, covering storage, caching and failover."
TIERS = {"L1": "demo-small", "L2": "demo-int4"}
# demo-int4 is a base model, kept off auto routes by default; these tests are about the routing
# mechanics between two real models, so `base_models=True` lets it stand for an L2 chat model.


def dones(items):
    return [x for x in items if isinstance(x, TurnDone)]


def ask(assistant, cid, text, route="auto", max_tokens=16):
    return dones(assistant.send(cid, text, greedy(max_tokens), route=route))


@pytest.fixture
def two_tier(model_paths):
    a = Assistant(Database(db_path()), EngineConfig(tiers=TIERS, base_models=True, load=LoadParams(n_ctx=2048, n_threads=THREADS)))
    yield a
    a.close()


def test_auto_routing_sends_greeting_to_l1_and_design_to_l2(two_tier):
    cid = two_tier.new_conversation()
    [hello] = ask(two_tier, cid, "你好")
    assert (hello.level, hello.model) == ("L1", "demo-small") and hello.fallback is None
    cid2 = two_tier.new_conversation()
    [design] = ask(two_tier, cid2, DESIGN)
    # The router wants L3 for a design question; with no L3 configured the nearest tier answers.
    assert (design.level, design.model) == ("L2", "demo-int4")
    assert design.fallback == "L3 not configured → L2"
    rows = two_tier.db.messages(cid2)
    assert rows[-1]["level"] == "L2" and rows[-1]["stats"]["fallback"] == "L3 not configured → L2"


def test_user_override_per_message_and_per_conversation(two_tier):
    cid = two_tier.new_conversation()
    [d] = ask(two_tier, cid, "你好", route="L2")
    assert d.level == "L2" and d.route_reason == "user override"
    two_tier.set_conversation_route(cid, "L2")
    [d] = ask(two_tier, cid, "谢谢")
    assert d.level == "L2" and d.route_reason == "conversation override"
    [d] = ask(two_tier, cid, "谢谢", route="L1")  # the message's own override wins
    assert d.level == "L1"
    two_tier.set_conversation_route(cid, "auto")
    with pytest.raises(InputError):
        two_tier.set_conversation_route(cid, "L9")


def test_cascade_uses_the_models_calibration(model_paths):
    a = Assistant(Database(db_path()), EngineConfig(tiers=TIERS, base_models=True, load=LoadParams(n_ctx=1024, n_threads=THREADS), cascade=True))
    try:
        assert a.cascade_threshold == a._primary.model.entry.confidence_threshold == 0.09
    finally:
        a.close()


def test_cascade_reasks_weak_l1_answer_on_l2(model_paths):
    a = Assistant(Database(db_path()), EngineConfig(tiers=TIERS, base_models=True, load=LoadParams(n_ctx=2048, n_threads=THREADS), cascade=True, cascade_threshold=0.999))
    try:
        cid = a.new_conversation()
        events = list(a.send(cid, "hi there!", greedy(16), route="auto"))
        (taken,) = [e for e in events if isinstance(e, Retracted)]
        (second,) = dones(events)
        first = taken.answer
        assert first.level == "L1" and first.confidence < 0.999 and taken.next_level == "L2"
        assert second.level == "L2" and second.route_reason == taken.reason and taken.reason.startswith("cascade")
        assert events.index(taken) < events.index(second)
        rows = {r["id"]: r for r in a.db.messages(cid)}
        assert rows[first.message_id]["superseded_by"] == second.message_id  # both kept in the record
        # The answer taken back is out of the context the models see next.
        assert [m.id for m in a.conversation(cid).messages] == [rows[first.message_id]["id"] - 1, second.message_id]
        a._conversations.clear()
        assert [m.id for m in a.conversation(cid).messages][-1] == second.message_id
    finally:
        a.close()


def test_sticky_when_kv_is_warm_on_l2(two_tier):
    cid = two_tier.new_conversation()
    for q in ("Explain how a hash map works.", "How does it handle collisions?"):
        [d] = ask(two_tier, cid, q, max_tokens=48)
        assert d.level == "L2"
    [thanks] = ask(two_tier, cid, "thanks!")
    assert thanks.level == "L2" and thanks.route_reason.startswith("sticky"), thanks.route_reason
    assert thanks.stats.cache_mode == "append"


def test_l3_end_to_end_then_falls_back_when_server_stops(model_paths):
    server = LoopbackServer(model_paths["demo-small"])
    a = Assistant(Database(db_path()), EngineConfig(tiers=TIERS, base_models=True, load=LoadParams(n_ctx=2048, n_threads=THREADS), remote=RemoteConfig(server.url, retries=1, backoff_s=0.05)))
    try:
        cid = a.new_conversation()
        [d1] = ask(a, cid, DESIGN)
        assert d1.level == "L3" and d1.model.startswith("L3:") and d1.text and d1.fallback is None
        server.stop()
        [d2] = ask(a, cid, DESIGN + " Also add monitoring.")
        assert d2.level == "L2" and d2.fallback == "L3 unreachable → L2"
        rows = a.db.messages(cid)
        assert [r["role"] for r in rows] == ["user", "assistant", "user", "assistant"]
        assert rows[1]["level"] == "L3" and rows[3]["level"] == "L2"
    finally:
        server.stop()
        a.close()


def test_manager_evicts_lru_and_never_loads_twice(model_paths):
    params = LoadParams(n_ctx=1024, n_threads=THREADS)
    probe = ModelManager(params=params)
    sizes = [ram_bytes(probe.plan_for(probe.resolve(m), gpu=False)) for m in ("demo-small", "demo-int4")]
    manager = ModelManager(budget_bytes=max(sizes) + 1, params=params)  # room for one model at a time
    try:
        w1 = manager.get("demo-small")
        assert manager.get("demo-small") is w1  # never two copies
        # Each load records how far its plan was from llama.cpp's real allocation.
        assert abs(w1.plan_error["kv"]) < 0.05 and abs(w1.plan_error["weights"]) < 0.05
        w2 = manager.get("demo-int4")
        assert manager.evictions == 1 and [w.model.id for w in manager.loaded()] == ["demo-int4"]
        assert w1._closed and not w2._closed
    finally:
        manager.close()


def test_foreground_preempts_queued_background_jobs(model_paths):
    manager = ModelManager(params=LoadParams(n_ctx=512, n_threads=THREADS))
    try:
        worker = manager.get("demo-small")
        order, started = [], threading.Event()

        def background_running(w, job):
            started.set()
            job.preempt.wait(60)  # a background job yields when a foreground one arrives
            order.append(("bg-running", job.preempt.is_set()))

        def make(name):
            return lambda w, job: order.append((name, None))

        running = worker.submit(background_running, BACKGROUND)
        assert started.wait(60)  # running, not still queued: the two below queue behind it
        queued_bg = worker.submit(make("bg-queued"), BACKGROUND)
        fg = worker.submit(make("fg"), FOREGROUND)
        for job in (running, queued_bg, fg):
            list(job)
        assert order == [("bg-running", True), ("fg", None), ("bg-queued", None)]
    finally:
        manager.close()
