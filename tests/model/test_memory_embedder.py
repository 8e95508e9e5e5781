"""The real embedder (bundled all-MiniLM-L6-v2) with real sqlite-vec: retrieval by meaning."""

import threading

import pytest

from engine.memory import Embedder, MemoryService
from engine.storage import Database

FACTS = {
    "cat": "My cat is called Miso and she is three years old.",
    "peanuts": "I am allergic to peanuts.",
    "units": "I prefer answers in metric units.",
    "birthday": "My daughter's birthday is on the 3rd of May.",
    "job": "I work as a nurse at the city hospital.",
    "wifi": "The wifi password at home is on the fridge.",
    "zh_peanuts": "我对花生过敏。",
    "zh_cat": "我的猫叫米索，今年三岁。",
    "zh_home": "我住在上海，喜欢喝绿茶。",
    "zh_birthday": "我女儿的生日是五月三日。",
}


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    """One model load for the module; what a search said while it was loading is kept."""
    emb = Embedder()
    # The load waits for the search below: "while it was loading" is a state, not a race against
    # a machine fast enough to load first.
    searched, load = threading.Event(), emb._load
    emb._load = lambda: (searched.wait(60), load())
    db = Database(tmp_path_factory.mktemp("loading") / "m.db")
    svc = MemoryService(db, emb).start()
    try:
        emb.status_while_loading = svc.search("what is my cat called?").status
    finally:
        searched.set()
    assert emb.wait(180), emb.state
    svc.close()
    db.close()
    return emb


@pytest.fixture(params=["sqlite-vec", "numpy"])
def memory(request, tmp_path, embedder):
    db = Database(tmp_path / "m.db", driver="sqlean" if request.param == "sqlite-vec" else "sqlite3")
    svc = MemoryService(db, embedder, vector_backend=request.param).start()
    ids = {key: svc.add(text, pin=key in ("peanuts", "zh_peanuts")) for key, text in FACTS.items()}
    assert svc.flush(120)
    yield svc, ids
    svc.close()
    db.close()


def test_search_is_skipped_while_the_model_loads(embedder):
    assert embedder.status_while_loading == "skipped: embedder loading"
    assert embedder.ready and embedder.load_seconds > 0
    v = embedder.embed(["hello", "你好"])
    assert v.shape == (2, 384) and v.dtype.name == "float32"
    assert abs(float((v * v).sum(axis=1)[0]) - 1.0) < 1e-5


def test_runs_on_sqlite_vec_when_sqlean_is_installed(tmp_path, embedder):
    db = Database(tmp_path / "m.db")
    svc = MemoryService(db, embedder)
    assert (db.driver, svc.vector_backend) == ("sqlean", "sqlite-vec")
    db.close()


@pytest.mark.parametrize("query,key", [
    ("What's the name of my pet?", "cat"),               # no shared keyword: found by meaning
    ("what do I do for a living", "job"),
    ("how do I get online at my house", "wifi"),
    ("which measurement system should you use", "units"),
    ("我女儿什么时候过生日", "zh_birthday"),
    ("我能吃花生酱吗", "zh_peanuts"),
])
def test_finds_english_and_chinese_memories_by_meaning(memory, query, key):
    svc, ids = memory
    hits = svc.search(query, k=3)
    assert hits.status == "ok"
    assert hits and hits[0].id == ids[key], [(h.text, h.score) for h in hits]
    assert hits[0].score >= svc.thresholds(query)[1]


@pytest.mark.parametrize("query", ["What is the capital of France?", "Write a python function to sort a list",
                                   "今天天气怎么样"])
def test_unrelated_queries_retrieve_nothing(memory, query):
    svc, _ = memory
    assert svc.search(query, k=3) == []


def test_messages_are_cited_across_conversations(memory):
    svc, _ = memory
    db = svc.db
    trip = db.create_conversation()
    q_id = db.add_message(trip, "user", "We booked a ryokan in Kyoto for the second week of April.")
    a_id = db.add_message(trip, "assistant", "Lovely! Kyoto in April is cherry blossom season.")
    other = db.create_conversation()
    o_id = db.add_message(other, "user", "Can you help me fix a flaky unit test in pytest?")
    for cid, mid in ((trip, q_id), (trip, a_id), (other, o_id)):
        row = next(m for m in db.messages(cid) if m["id"] == mid)
        svc.index_message(cid, mid, row["role"], row["content"], row["created"])
    assert svc.flush(120)
    hits = svc.search("Where am I travelling to in spring?", k=3)
    assert hits and isinstance(hits[0].source, dict), [(h.text, h.score) for h in hits]
    assert hits[0].source["conversation_id"] == trip and hits[0].source["message_id"] in (q_id, a_id)
    assert hits[0].source["date"] == next(m for m in db.messages(trip) if m["id"] == hits[0].source["message_id"])["created"]
    # Already in the window: not retrieved again.
    again = svc.search("Where am I travelling to in spring?", k=3, exclude_message_ids=[q_id, a_id])
    assert all(not isinstance(h.source, dict) or h.source["conversation_id"] != trip for h in again)


def test_forget_removes_a_memory_from_results(memory):
    svc, ids = memory
    assert svc.search("What's the name of my pet?", k=1)[0].id == ids["cat"]
    svc.forget(ids["cat"])
    assert ids["cat"] not in [h.id for h in svc.search("What's the name of my pet?", k=3, min_score=-1)]
    assert [m.text for m in svc.pinned()] == [FACTS["peanuts"], FACTS["zh_peanuts"]]
