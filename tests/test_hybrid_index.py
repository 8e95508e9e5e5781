"""The hybrid index both the memory and the documents search (engine/retrieval): the two vector
paths, the keyword tables, the fusion, and the indexing thread class."""

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from engine.docs.chunks import Chunk
from engine.docs.store import DocStore
from engine.memory import MemoryStore
from engine.retrieval import RRF_K, Candidates, HybridIndex, IndexWorker, Rules, fuse
from engine.retrieval.index import KEYWORD_RANKED
from engine.retrieval.terms import keyword_terms
from engine.retrieval.vectors import COARSE_CANDIDATES, NumpyIndex
from engine.storage import Database
from tests.memory_fakes import DIM, axis, fake_model, open_service, service  # noqa: F401 - fixtures


# ---- the two vector paths
def clustered(n, seed=0, clusters=40):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, DIM)).astype(np.float32)
    labels = rng.integers(0, clusters, n)
    vecs = centers[labels] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True), centers


@pytest.mark.parametrize("n", [60, 3000])
def test_numpy_and_sqlite_vec_paths_give_the_same_results(tmp_path, n):
    vecs, centers = clustered(n)
    db = Database(tmp_path / "a.db")
    vec_store = MemoryStore(db, "m", DIM, vector_backend="sqlite-vec")
    vec_store.insert_many([("message", f"t{i}", 1, i, "user", 0, "2024") for i in range(n)], vecs)
    db.close()
    # The numpy path on the stdlib driver reads what the sqlean connection wrote.
    plain = Database(tmp_path / "a.db", driver="sqlite3")
    np_store = MemoryStore(plain, "m", DIM)
    db = Database(tmp_path / "a.db")
    vec_store = MemoryStore(db, "m", DIM)
    rng = np.random.default_rng(1)
    for q in range(20):
        query = centers[q % len(centers)] + 0.5 * rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        a, b = vec_store.vector_search(query, 20), np_store.vector_search(query, 20)
        assert [i for i, _ in a] == [i for i, _ in b]
        assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-6)
        if n <= COARSE_CANDIDATES:  # small stores are searched exactly
            exact = np.argsort(-(vecs @ query), kind="stable")[:20] + 1
            assert [i for i, _ in a] == exact.tolist()


def test_numpy_index_follows_other_connections_and_sqlite_vec_catches_up(tmp_path, fake_model):
    base = Database(tmp_path / "a.db")
    vec_store = MemoryStore(base, "m", DIM)
    plain = Database(tmp_path / "a.db", driver="sqlite3")
    np_store = MemoryStore(plain, "m", DIM)
    assert np_store.vector_search(axis(1), 5) == []
    # Written through the stdlib connection: vec0 does not see it until the next sync.
    (mid,) = np_store.insert_many([("note", "written without sqlite-vec", None, None, None, 0, "2024")],
                                  axis(1)[None, :])
    assert vec_store.vector_search(axis(1), 5) == []
    assert vec_store.index.sync() == (1, 0)
    assert vec_store.vector_search(axis(1), 5) == [(mid, pytest.approx(1.0))]
    (other,) = vec_store.insert_many([("note", "written with sqlite-vec", None, None, None, 0, "2024")],
                                     axis(1, 1)[None, :])
    assert [i for i, _ in np_store.vector_search(axis(1), 5)] == [mid, other]  # data_version changed
    vec_store.delete([mid])
    assert [i for i, _ in np_store.vector_search(axis(1), 5)] == [other]


def test_vectors_of_another_model_are_re_embedded(tmp_path, fake_model):
    svc = open_service(tmp_path / "m.db", "sqlite-vec").start()
    svc.add("the kettle is descaled monthly")
    assert svc.flush(20)
    svc.close()
    other = MemoryStore(svc.db, "another-model", DIM)
    assert other.pending_count() == 1 and other.vector_search(axis(1), 5) == []
    svc.db.close()


def test_numpy_index_add_replace_remove_keeps_rows_dense(tmp_path):
    db = Database(tmp_path / "a.db", driver="sqlite3")
    store = MemoryStore(db, "m", DIM)
    index: NumpyIndex = store.index
    ids = store.insert_many([("note", f"n{i}", None, None, None, 0, "2024") for i in range(5)],
                            np.stack([axis(*([0] * i + [1])) for i in range(5)]))
    assert len(index) == 0  # loaded on first use
    assert store.vector_search(axis(1), 1)[0][0] == ids[0] and len(index) == 5
    store.set_vectors([ids[0]], axis(0, 0, 0, 0, 0, 1)[None, :])  # replaced, not appended
    store.delete([ids[1], ids[3]])
    assert len(index) == 3
    assert store.vector_search(axis(0, 0, 0, 0, 0, 1), 1)[0][0] == ids[0]
    assert {i for i, _ in store.vector_search(axis(1, 1, 1, 1, 1), 10)} == {ids[0], ids[2], ids[4]}


# ---- keywords: trigram, CJK, short queries
def test_trigram_keyword_search_cjk_and_short_terms(service):
    zh = service.add("我们讨论了数据库迁移的问题")
    cat = service.add("我的猫叫米索")
    en = service.add("Quarterly report for the Zurich office")
    go = service.add("I write Go at work")
    assert service.store.keyword_search("数据库", 5) == [zh]
    assert service.store.keyword_search("关于数据库迁移有什么结论", 5)[0] == zh  # no spaces: 3-char pieces
    assert service.store.keyword_search("zurich", 5) == [en]  # case-insensitive substring
    assert service.store.keyword_search("猫", 5) == [cat]  # 1 character: LIKE fallback
    assert service.store.keyword_search("go", 5) == [go]
    assert service.store.keyword_search("the of", 5) == []  # stopwords only
    assert service.store.keyword_search('"; DROP TABLE memories; --', 5) == []
    assert keyword_terms("What is my favourite colour? 我最喜欢")[0] == ["favourite", "colour", "我最喜", "最喜欢"]


def test_common_keywords_rank_the_newest_matches_by_terms_matched(tmp_path):
    store = MemoryStore(Database(tmp_path / "a.db"), "m", DIM)
    rows = [("note", f"a common phrase number {i}", None, None, None, 0, "2024") for i in range(KEYWORD_RANKED + 50)]
    both = store.insert_many(rows[:-10] + [("note", "common and zanzibar", None, None, None, 0, "2024")]
                             + rows[-10:])[-11]
    assert store.keyword_search("common zanzibar", 3)[0] == both  # BM25 skipped: > KEYWORD_RANKED matches
    assert store.keyword_search("common", 2) == [len(rows) + 1, len(rows)]  # ties: newest first
    assert store.keyword_search("zanzibar", 3) == [both]  # few matches: BM25


# ---- one fusion for both indexes
def row(text, group=None):
    return SimpleNamespace(text=text, group=group)


def rules(**kw):
    return Rules(floors=lambda text: (0.5, 0.3), describe=lambda r: (r.group, "test"), **kw)


def test_fusion_floors_and_keyword_matches_without_a_vector():
    found = Candidates(vector=[(1, 0.9), (2, 0.4)], keyword=[2, 3], cosine={1: 0.9, 2: 0.4}, embedded=True)
    rows = {1: row("one"), 2: row("two"), 3: row("three")}
    # 2 is below the meaning floor (0.5) but matched a keyword (floor 0.3); 3 has no vector yet.
    assert [h.id for h in fuse(found, rows, 5, rules())] == [2, 1]  # the memory: a vector is needed
    hits = fuse(found, rows, 5, rules(needs_vector=False))  # the documents: its keyword rank counts
    assert [h.id for h in hits] == [2, 1, 3] and hits[2].score is None
    assert hits[0].rrf == pytest.approx(1 / (RRF_K + 2) + 1 / (RRF_K + 1), abs=1e-6)
    assert hits[0].vector_rank == 2 and hits[0].keyword_rank == 1
    low = Candidates(vector=[(4, 0.1)], pairs=[4], cosine={4: 0.1}, embedded=True)
    assert fuse(low, {4: row("四")}, 5, rules()) == []  # below even the keyword floor
    assert [h.id for h in fuse(low, {4: row("四")}, 5, rules(exempt=frozenset({4})))] == [4]


def test_fusion_caps_groups_drops_shown_and_repeated_text_and_boosts():
    found = Candidates(vector=[(i, 0.9 - i / 100) for i in range(1, 6)], cosine={i: 0.9 - i / 100 for i in range(1, 6)})
    rows = {1: row("Alpha b", "f"), 2: row("kettle", "f"), 3: row("lamp", "f"), 4: row("alpha  B", "g"),
            5: row("shown text", "g")}
    capped = rules(group=lambda r: r.group, per_group=2, shown=("the shown text here",))
    assert [h.id for h in fuse(found, rows, 5, capped)] == [1, 2]  # 3: third of f; 4: 1's text; 5: shown
    boosted = rules(boost=lambda text: 2.0 if text == "lamp" else 0.0)
    assert [h.id for h in fuse(found, rows, 2, boosted)] == [3, 1]


def test_the_memory_and_the_documents_share_one_index(tmp_path):
    db = Database(tmp_path / "a.db")
    docs, memory = DocStore(db, "m", DIM), MemoryStore(db, "m", DIM)
    assert isinstance(docs, HybridIndex) and isinstance(memory, HybridIndex)
    root = docs.add_root(str(tmp_path), "default")
    docs.write_file(root, str(tmp_path / "a.md"), kind="markdown", size=1, mtime_ns=1, sha256=None,
                    chunks=[Chunk("团建的地点在香山公园", None, None, 1, 0)], vecs=axis(1)[None, :])
    (mid,) = memory.insert("note", ["团建的地点在香山公园"])
    assert docs.pair_search("香山在哪里", 5) == [1] and memory.pair_search("香山在哪里", 5) == []  # no pair table
    assert docs.keyword_search("香山公园", 5) == [1] and memory.keyword_search("香山公园", 5) == [mid]
    assert docs.pending_count() == 0 and memory.pending_count() == 1
    docs.close()
    memory.close()
    db.close()


# ---- the indexing thread
def test_index_worker_runs_queued_jobs_before_it_stops_and_outlives_a_failing_job():
    done, idle_rounds = [], []

    def run(job):
        if job == "bad":
            raise ValueError("a bad job")
        done.append(job)

    worker = IndexWorker("test-indexer", run, lambda: idle_rounds.append(1) or True, idle_s=0.05)
    worker.put("before start")  # queued: runs once the thread starts
    worker.start()
    for job in ("bad", "a", "b"):
        worker.put(job)
    assert worker.wait_for(lambda: worker.outstanding == 0 and not worker.dirty, 20)
    assert done == ["before start", "a", "b"] and idle_rounds
    gate = threading.Event()
    worker._run_job = lambda job: gate.wait(20) and done.append(job)
    worker.put("queued before the stop")
    threading.Timer(0.2, gate.set).start()
    worker.stop(20)  # the stop waits behind the queued job: close stores what is queued
    assert done[-1] == "queued before the stop" and not worker.running
