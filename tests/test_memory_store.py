"""Memory store and service mechanics, without torch: a deterministic stand-in model
(tests/memory_fakes.py).

The stand-in only checks the machinery (fusion, forget, dedup, bad input; both vector paths and
the keyword tables: tests/test_hybrid_index.py); retrieval *quality* is tested with the real
embedder in tests/model/test_memory_embedder.py.
"""

import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import engine.memory.embedder as embedder_mod
from engine.cli.main import main as assistant_main
from engine.memory import Embedder, MemoryInputError, MemoryNotFound, MemoryService, MemoryStore, parse_remember
from engine.memory.embedder import INDEXING, QUERY, EmbedderNotReady
from engine.memory.chunking import chunk_text
from engine.memory.service import MAX_MEMORY_CHARS
from engine.retrieval import RRF_K
from engine.storage import Database
from tests.memory_fakes import DIM, axis, conversation_with, fake_model, open_service, service  # noqa: F401 - fixtures


def test_database_reports_its_driver_and_vector_path(tmp_path):
    db = Database(tmp_path / "a.db")
    assert db.driver == "sqlean" and db.vec_version.startswith("v")
    assert MemoryStore(db, "m", DIM).vector_backend == "sqlite-vec"
    db.close()
    plain = Database(tmp_path / "a.db", driver="sqlite3")
    assert plain.driver == "sqlite3" and plain.vec_version is None
    assert MemoryStore(plain, "m", DIM).vector_backend == "numpy"
    with pytest.raises(ValueError):
        MemoryStore(plain, "m", DIM, vector_backend="sqlite-vec")
    with pytest.raises(ValueError):
        Database(tmp_path / "b.db", driver="postgres")
    assert "0005_memory" in plain.migrations_applied() and plain.integrity_check() == "ok"


def test_auto_keeps_vectors_in_ram_while_they_fit_the_budget(tmp_path):
    db = Database(tmp_path / "a.db")
    store = MemoryStore(db, "m", DIM, "auto")
    assert store.vector_backend == "numpy"  # empty: fits any budget
    store.set_vectors(store.insert("note", ["a", "b"]), np.ones((2, DIM), dtype=np.float32))
    assert MemoryStore(db, "m", DIM, "auto", ram_budget_mb=1).vector_backend == "numpy"
    assert MemoryStore(db, "m", DIM, "auto", ram_budget_mb=1e-6).vector_backend == "sqlite-vec"
    assert MemoryStore(db, "other-model", DIM, "auto", ram_budget_mb=1e-6).vector_backend == "numpy"
    db.close()
    plain = Database(tmp_path / "a.db", driver="sqlite3")  # no sqlite-vec: numpy whatever the size
    assert MemoryStore(plain, "m", DIM, "auto", ram_budget_mb=1e-6).vector_backend == "numpy"
    plain.close()


# ---- fusion, thresholds, dedup
def test_rrf_fuses_vector_and_keyword_ranks(service, fake_model):
    fake_model.table.update({
        "alpha note about gardening": axis(0.9, 0.436),
        "beta note mentions zucchini once": axis(0.8, 0.6),
        "zucchini zucchini": axis(0.5, 0.866),
        "where are the zucchini": axis(1, 0),
    })
    ids = {t: service.add(t) for t in list(fake_model.table)[:3]}
    assert service.flush(20)
    hits = service.search("where are the zucchini", k=3, min_score=0.0)
    assert hits.status == "ok"
    # Vector ranks: alpha 1, beta 2, zz 3. Keyword (BM25): zz 1, beta 2. Fused: zz, beta, alpha.
    assert [h.id for h in hits] == [ids["zucchini zucchini"], ids["beta note mentions zucchini once"],
                                    ids["alpha note about gardening"]]
    assert [(h.vector_rank, h.keyword_rank) for h in hits] == [(3, 1), (2, 2), (1, None)]
    assert hits[0].rrf == pytest.approx(1 / (RRF_K + 3) + 1 / (RRF_K + 1), abs=1e-6)
    assert hits[2].rrf == pytest.approx(1 / (RRF_K + 1), abs=1e-6)
    assert [h.score for h in hits] == pytest.approx([0.5, 0.8, 0.9], abs=1e-3)
    # The threshold applies to cosine; a keyword match lowers it to the model's keyword_min_score.
    strict = service.search("where are the zucchini", k=3, min_score=0.95)
    assert [h.id for h in strict] == [ids["zucchini zucchini"], ids["beta note mentions zucchini once"]]


def test_dedup_against_window_and_between_hits(service, fake_model):
    fake_model.table.update({"my cat is called Miso": axis(1, 0.1), "My  cat is called miso": axis(1, 0.1),
                             "cat name?": axis(1, 0)})
    a = service.add("my cat is called Miso")
    b = service.add("My  cat is called miso")  # the same text, other spacing and case
    assert service.flush(20)
    hits = service.search("cat name?", k=3, min_score=0.5)
    assert len(hits) == 1 and hits[0].id in (a, b)
    assert service.search("cat name?", k=3, min_score=0.5,
                          exclude_texts=["earlier: My cat is called Miso, you said."]) == []
    assert len(service.search("cat name?", k=3, min_score=0.5, exclude_texts=["Miso"])) == 1
    fake_model.table["cat food brand is Purrfect"] = axis(1, 0.2)
    pin = service.add("cat food brand is Purrfect", pin=True)
    assert service.flush(20)
    assert pin in [h.id for h in service.search("cat name?", k=3, min_score=0.5)]
    assert pin not in [h.id for h in service.search("cat name?", k=3, min_score=0.5, include_pinned=False)]


def test_search_skipped_until_embedder_ready_and_indexing_never_waits(tmp_path, fake_model):
    fake_model.gate.clear()
    svc = open_service(tmp_path / "m.db", "sqlite-vec").start()
    try:
        assert svc.search("anything").status == "skipped: embedder loading"
        assert svc.status()["retrieval"] == "skipped: embedder loading"
        cid, (mid,) = conversation_with(svc.db, "the blue heron nests by the lake")
        svc.index_message(cid, mid, "user", "the blue heron nests by the lake")  # returns at once
        memory_id = svc.add("heron facts")
        assert not svc.flush(0.5)  # vectors wait for the model …
        assert svc.store.keyword_search("heron", 5)  # … keywords do not
        assert svc.store.pending_count() == 2
        fake_model.gate.set()
        assert svc.embedder.wait(20) and svc.flush(20)
        assert svc.store.pending_count() == 0
        hits = svc.search("blue heron", k=2, min_score=0.0)
        assert hits.status == "ok" and {h.id for h in hits} >= {memory_id}
    finally:
        svc.close()
        svc.db.close()


def test_failed_embedder_is_reported(tmp_path, monkeypatch):
    def broken(path, device, threads):
        raise OSError("model files missing")

    monkeypatch.setattr(embedder_mod, "_load_sentence_transformer", broken)
    svc = open_service(tmp_path / "m.db", "numpy").start()
    assert not svc.embedder.wait(20)
    assert svc.search("x").status == "skipped: embedder failed: OSError: model files missing"
    svc.add("still stored")
    assert not svc.flush(2) and svc.list()[0].text == "still stored"
    svc.close()
    svc.db.close()


# ---- forget, messages, sources
def test_forget_removes_row_keywords_and_vector_at_once(service, fake_model):
    keep = service.add("the spare key is under the flowerpot")
    gone = service.add("the spare key is in the mailbox")
    assert service.flush(20)
    assert {h.id for h in service.search("spare key", k=5, min_score=-1)} == {keep, gone}
    service.forget(gone)
    assert [h.id for h in service.search("spare key", k=5, min_score=-1)] == [keep]
    assert service.store.keyword_search("mailbox", 5) == []
    assert service.store.vectors([gone])[0] == []
    assert gone not in [i for i, _ in service.store.vector_search(service.embedder.embed(["x"])[0], 50)]
    with pytest.raises(MemoryNotFound):
        service.forget(gone)
    with service.store.transaction() as conn:  # FTS5's own check raises if the index disagrees
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')")
    assert service.db.integrity_check() == "ok"


def test_index_message_chunks_sources_and_superseded(service, fake_model):
    long = " ".join(f"Sentence {i} talks about the lighthouse keeper." for i in range(60))
    cid, (m1, m2) = conversation_with(service.db, long, "The ferry leaves at 7:40 from pier 3.")
    service.index_message(cid, m1, "user", long, created="2024-05-01T10:00:00+00:00")
    service.index_message(cid, m2, "assistant", "The ferry leaves at 7:40 from pier 3.")
    service.index_message(cid, m2, "assistant", "The ferry leaves at 7:40 from pier 3.")  # again: replaced
    service.index_message(cid, m2, "system", "ignored")
    assert service.flush(20)
    chunks = service.list(("message",))
    assert len([c for c in chunks if c.message_id == m1]) == len(chunk_text(long)) > 1
    assert len([c for c in chunks if c.message_id == m2]) == 1
    hits = service.search("ferry pier", k=1, min_score=0.0)
    assert hits[0].source == {"conversation_id": cid, "message_id": m2, "date": chunks[-1].created}
    assert service.search("lighthouse keeper", k=1, min_score=0.0)[0].source["date"] == "2024-05-01T10:00:00+00:00"
    assert service.search("ferry pier", k=3, min_score=-1, exclude_message_ids=[m2])[0].source["message_id"] == m1
    service.db.supersede(m2, m1)  # a superseded answer never reaches a prompt, retrieval included
    assert all(h.source["message_id"] != m2 for h in service.search("ferry pier", k=5, min_score=-1))
    with pytest.raises(MemoryInputError):
        service.index_message(cid, m1, "tool", "x")


def test_start_drops_chunks_of_deleted_conversations(tmp_path, fake_model):
    svc = open_service(tmp_path / "m.db", "sqlite-vec").start()
    cid, (mid,) = conversation_with(svc.db, "the owl hoots at midnight")
    svc.index_message(cid, mid, "user", "the owl hoots at midnight")
    assert svc.flush(20)
    with svc.db.transaction() as conn:  # the cascade bypasses the store
        conn.execute("DELETE FROM conversations WHERE id = ?", [cid])
    assert svc.search("owl midnight", min_score=-1) == []  # filtered at once
    svc.close()
    svc.db.close()
    again = open_service(tmp_path / "m.db", "sqlite-vec").start()
    assert again.flush(20) and again.list(("message",)) == []  # and pruned on the next start
    again.close()


def assert_not_stored(svc, message_id, word):
    assert [c for c in svc.list(("message",)) if c.message_id == message_id] == []
    assert svc.store.keyword_search(word, 5) == []
    with svc.store.transaction() as conn:  # FTS5's own check raises if the index disagrees
        conn.execute("INSERT INTO memories_fts (memories_fts) VALUES ('integrity-check')")


def test_a_message_deleted_while_its_index_job_waits_is_never_stored(service):
    text = "the lighthouse key hangs behind the blue door"
    cid, (mid,) = conversation_with(service.db, text)
    # Holding the database lock keeps the indexer from writing until the delete is done, as a
    # busy indexer (a long message, a batch being embedded) does in the app.
    with service.db._lock:
        service.index_message(cid, mid, "user", text)
        service.db.delete_conversation(cid)
        service.forget_message(mid)  # what Assistant.delete_conversation does
    assert service.flush(20)
    assert_not_stored(service, mid, "lighthouse")


def test_an_answer_superseded_while_its_index_job_waits_is_never_stored(service):
    cid, (_, weak) = conversation_with(service.db, "which lamp?", "the red lantern by the gate")
    better = service.db.add_message(cid, "assistant", "the green one")
    with service.db._lock:
        service.index_message(cid, weak, "assistant", "the red lantern by the gate")
        service.db.supersede(weak, better)
        service.forget_message(weak)
    assert service.flush(20)
    assert_not_stored(service, weak, "lantern")


@pytest.mark.parametrize("text", ["🎉 party on Friday 🎉🎉", "我对花生过敏。", "שלום עולם, זה זיכרון",
                                  "مرحبا بالعالم", "mixed 中文 and English ✓", "lone \ud800 surrogate"])
def test_unusual_text_round_trips(service, text):
    memory_id = service.add(text)
    stored = service.store.get(memory_id).text
    assert stored == text.encode("utf-8", errors="replace").decode("utf-8").strip()
    assert service.flush(20)
    probe = stored.split()[-1][:4] if len(stored.split()[-1]) >= 3 else stored[:3]
    assert memory_id in service.store.keyword_search(probe, 5)
    assert memory_id in [h.id for h in service.search(stored, k=3, min_score=0.5)]


@pytest.mark.parametrize("text,why", [("", "empty"), ("   \n", "empty"), ("a\x00b", "NUL"),
                                      ("x" * 1_000_000, "too long"), ("x" * (MAX_MEMORY_CHARS + 1), "too long")])
def test_bad_memory_text_is_refused_with_a_reason(service, text, why):
    with pytest.raises(MemoryInputError, match=why):
        service.add(text)
    assert service.list() == []


def test_huge_message_and_query_stay_bounded(service):
    cid, (mid,) = conversation_with(service.db, "x")
    service.index_message(cid, mid, "user", "lorem ipsum " * 16_000)  # 192 000 characters
    assert service.flush(60)
    assert 400 <= len(service.list(("message",))) <= 500
    assert service.search("ipsum " * 200_000, k=3, min_score=-1).status == "ok"
    with pytest.raises(MemoryInputError):
        service.index_message(cid, mid, "user", "x" * 200_001)


def test_concurrent_indexing_and_search(service):
    cid, mids = conversation_with(service.db, *[f"message {i}" for i in range(40)])

    def writer(part):
        for mid in mids[part::4]:
            service.index_message(cid, mid, "user", f"note {mid} about topic {mid % 5} and more words")

    threads = [threading.Thread(target=writer, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for _ in range(20):
        assert service.search("topic 3", k=3, min_score=-1).status == "ok"
    for t in threads:
        t.join()
    assert service.flush(30)
    assert service.store.counts()["message"] == 40 and service.store.pending_count() == 0
    assert service.db.integrity_check() == "ok"


# ---- pure helpers
@pytest.mark.parametrize("text,fact", [
    ("Please remember that my cat is called Miso.", "my cat is called Miso"),
    ("remember: dentist on Friday", "dentist on Friday"),
    ("Can you remember that I'm vegetarian?", "I'm vegetarian"),
    ("记住我对花生过敏。", "我对花生过敏"),
    ("请记住：我住在上海", "我住在上海"),
    ("帮我记一下，明天下午三点开会", "明天下午三点开会"),
    ("Do you remember my cat?", None), ("remember when we met?", None), ("记住了吗？", None),
    ("你还记得我的猫吗", None), ("remember that", None), ("Note that the API changed", None),
])
def test_parse_remember(text, fact):
    assert parse_remember(text) == fact


def test_chunks_cover_the_text_within_budget_with_overlap():
    text = " ".join(f"word{i}" for i in range(700)) + "。" + "数据库迁移" * 200
    chunks = chunk_text(text, size=500, overlap=100)
    widths = [sum(2 if ord(c) > 0x2E80 else 1 for c in ch) for ch in chunks]
    assert max(widths) <= 500 and len(chunks) > 5
    assert all(a[-20:] in text and b[:10] in a for a, b in zip(chunks, chunks[1:]))  # consecutive overlap
    assert chunks[0].startswith("word0 ") and text.endswith(chunks[-1])
    assert chunk_text("  short  ") == ["short"] and chunk_text(" \n ") == []


# ---- CLI (in-process, stand-in model)
def run_cli(capsys, *argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        monkeypatch.setattr("sys.stdin", SimpleNamespace(buffer=io.BytesIO(stdin)))
    code = assistant_main(["memory", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_add_search_list_forget(capsys, monkeypatch, fake_model):
    assert run_cli(capsys, "add", "I am allergic to peanuts", "--pin")[0] == 0
    code, out, _ = run_cli(capsys, "add", "我住在上海", "--json")
    assert code == 0 and json.loads(out)["embedded"] is True
    code, out, _ = run_cli(capsys, "search", "allergic peanuts", "--json", "--min-score", "0")
    result = json.loads(out)
    assert code == 0 and result["status"] == "ok"
    assert result["hits"][0]["text"] == "I am allergic to peanuts" and result["hits"][0]["source"] == "pinned"
    assert set(result["hits"][0]) == {"id", "text", "score", "source", "kind"}
    code, out, _ = run_cli(capsys, "list", "--json")
    rows = json.loads(out)
    assert [r["text"] for r in rows] == ["I am allergic to peanuts", "我住在上海"]
    assert run_cli(capsys, "forget", str(rows[0]["id"]))[0] == 0
    code, _, err = run_cli(capsys, "forget", str(rows[0]["id"]))
    assert code == 4 and "no memory with id" in err and "Traceback" not in err


@pytest.mark.parametrize("argv,stdin,code,message", [
    (["add", ""], None, 2, "empty"),
    (["add", "-"], b"a\x00b", 2, "NUL"),
    (["add", "-"], b"x" * 1_000_000, 2, "too long"),
    (["add", "-"], b"\xff\xfe broken utf-8 but kept", 0, ""),
    (["search", "-"], b"x" * 1_000_000, 2, "too long"),
    (["search", ""], None, 2, "empty"),
    (["search", "x", "--k", "0"], None, 2, "--k"),
    (["forget", "abc"], None, 2, "whole number"),
    (["forget", "12345"], None, 4, "no memory"),
])
def test_cli_bad_input_exit_codes(capsys, monkeypatch, fake_model, argv, stdin, code, message):
    got, _, err = run_cli(capsys, *argv, stdin=stdin, monkeypatch=monkeypatch)
    assert got == code and message in err and "Traceback" not in err


def test_importing_the_memory_package_loads_no_torch():
    code = "import sys, engine.memory, engine.cli.memory; print(sorted({'torch', 'sentence_transformers'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent).stdout
    assert out.strip() == "[]"


def test_an_optional_embedder_not_downloaded_says_so(tmp_path, monkeypatch):
    from engine.config.settings import Settings

    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("ASSISTANT_MEMORY_EMBEDDER", "paraphrase-multilingual-MiniLM-L12-v2")
    db = Database(tmp_path / "a.db")
    svc = MemoryService.from_settings(db, Settings(tmp_path / "settings.json")).start()
    try:
        assert not svc.embedder.wait(20)
        status = svc.search("你好").status
        assert status.startswith("skipped: embedder failed") and "is not downloaded" in status
        assert svc.add("我对花生过敏") > 0  # memories are still kept (keyword search finds them)
    finally:
        svc.close()
        db.close()
    monkeypatch.setenv("ASSISTANT_MEMORY_EMBEDDER", "no-such-model")
    with pytest.raises(ValueError, match="unknown embedding model"):
        MemoryService.from_settings(Database(tmp_path / "b.db"), Settings(tmp_path / "settings.json"))


def test_one_thread_owns_the_embedder_and_queries_go_ahead_of_indexing(fake_model):
    """The model (an ONNX session in the app) is only ever called on the embedder's own thread;
    a search waiting behind an indexing batch goes before the batches queued after it."""
    emb = Embedder(runtime="torch").start()
    assert emb.wait(20)
    release = fake_model.hold = threading.Event()
    done = {}

    def embed(name, text, priority):
        done[name] = emb.embed([text], priority)

    def queued(n: int) -> None:  # until n requests wait behind the running batch (not a guessed sleep)
        deadline = time.monotonic() + 60
        while emb._requests.qsize() != n:
            assert time.monotonic() < deadline, f"{emb._requests.qsize()} requests queued, not {n}"
            time.sleep(0.005)

    first = threading.Thread(target=embed, args=("first", "batch one", INDEXING))
    first.start()
    deadline = time.monotonic() + 60
    while fake_model.order[-1:] != ["batch one"]:
        assert time.monotonic() < deadline, "the first batch never started"
        time.sleep(0.005)  # the first batch is running, held
    later = threading.Thread(target=embed, args=("later", "batch two", INDEXING))
    later.start()
    queued(1)  # queued behind it
    query = threading.Thread(target=embed, args=("query", "the query", QUERY))
    query.start()
    queued(2)
    release.set()
    for thread in (first, later, query):
        thread.join(20)
    assert fake_model.order[-3:] == ["batch one", "the query", "batch two"]
    assert fake_model.threads == {"memory-embedder"} and set(done) == {"first", "later", "query"}
    emb.close()
    with pytest.raises(EmbedderNotReady):
        emb.embed(["after close"])
