"""The documents index on real files, the real SQLite and the real bundled embedder: incremental
runs, edits and deletions, skipped files with reasons, crash safety, search, collections, pausing
for chat turns, the folder watcher."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engine.api import Documents, Settings
from engine.docs.pdf_writer import pdf_bytes
from engine.docs.service import DocumentService, DocumentsError
from engine.memory.embedder import INDEXING, EmbedInterrupted, Embedder
from engine.storage import Database

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def embedder():
    emb = Embedder().start()
    assert emb.wait(120), emb.state
    yield emb
    emb.close()


@pytest.fixture
def docs(tmp_path, embedder):
    db = Database(tmp_path / "a.db")
    service = DocumentService(db, embedder)
    yield service
    service.close()
    db.close()


def write_corpus(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.md").write_text(
        "# Travel policy\n\nTrain tickets are refunded in second class only.\n\n"
        "## Meals\n\nThe daily meal allowance abroad is 48 euros.\n", encoding="utf-8")
    (folder / "notes").mkdir(exist_ok=True)
    (folder / "notes" / "minutes.txt").write_text(
        "会议纪要：北京办公室的年度团建定在十月十二日，地点是香山公园。\n", encoding="utf-8")
    (folder / "manual.pdf").write_bytes(pdf_bytes([
        "The Zephyr kettle boils one litre in ninety seconds.",
        "Descale the Zephyr kettle every month with citric acid.",
        "The warranty of the Zephyr kettle lasts three years."]))
    (folder / "blob.txt").write_bytes(b"\x00\x01\x02\x03binary\xff\xfe" * 20)
    (folder / "empty.md").write_text("", encoding="utf-8")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4\nthis is not a pdf at all")
    (folder / "image.png").write_bytes(b"\x89PNG\r\n")  # not a document type: not even listed
    return folder


def paths_of(hits) -> list[str]:
    return [Path(h.source["path"]).name for h in hits]


def test_add_reports_the_issue_json_shape_and_skips_bad_files_with_reasons(docs, tmp_path):
    folder = write_corpus(tmp_path / "docs")
    report = docs.add([folder]).result().to_dict()
    assert set(report) == {"indexed", "unchanged", "removed", "chunks", "seconds", "skipped"}
    assert report["indexed"] == 3 and report["unchanged"] == 0 and report["removed"] == 0
    assert report["chunks"] >= 5 and isinstance(report["seconds"], float)
    reasons = {Path(s["path"]).name: s["reason"] for s in report["skipped"]}
    assert reasons == {"blob.txt": "not a text file (binary or unknown encoding)", "empty.md": "empty file",
                       "broken.pdf": "damaged or not a real PDF"}
    listed = {Path(f["path"]).name: f for f in docs.files()}
    assert "image.png" not in listed
    assert listed["broken.pdf"]["status"] == "skipped" and listed["broken.pdf"]["chunks"] == 0
    assert listed["manual.pdf"]["pages"] == 3 and listed["manual.pdf"]["status"] == "indexed"
    # Again: nothing is read, the skipped ones are still reported.
    again = docs.add([folder]).result().to_dict()
    assert (again["indexed"], again["unchanged"], again["chunks"]) == (0, 6, 0)
    assert {Path(s["path"]).name for s in again["skipped"]} == set(reasons)


def test_edits_replace_old_text_and_deletions_remove_it(docs, tmp_path):
    folder = write_corpus(tmp_path / "docs")
    docs.add([folder]).result()
    assert "policy.md" in paths_of(docs.search("meal allowance abroad euros"))
    policy = folder / "policy.md"
    policy.write_text("# Travel policy\n\nThe daily per diem for trips abroad is 61 dollars.\n", encoding="utf-8")
    os.utime(policy, ns=(time.time_ns(), time.time_ns() + 10**9))
    report = docs.add([folder]).result()
    assert (report.indexed, report.unchanged) == (1, 5)
    texts = " ".join(h.text for h in docs.search("daily allowance abroad", k=10))
    assert "61 dollars" in texts and "48 euros" not in texts
    assert not [h for h in docs.search("48 euros", k=10) if "48 euros" in h.text]
    (folder / "manual.pdf").unlink()
    report = docs.add([folder]).result()
    assert report.removed == 1 and report.indexed == 0
    assert "manual.pdf" not in paths_of(docs.search("Zephyr kettle warranty", k=10))
    assert not docs.store.read("SELECT 1 FROM doc_chunks c LEFT JOIN doc_files f ON f.id = c.file_id"
                               " WHERE f.id IS NULL")


def test_a_touched_or_copied_file_with_the_same_bytes_is_not_read_again(docs, tmp_path, monkeypatch):
    folder = write_corpus(tmp_path / "docs")
    docs.add([folder]).result()
    os.utime(folder / "policy.md", ns=(time.time_ns(), time.time_ns() + 5 * 10**9))
    parsed = []
    import engine.docs.indexer as indexer_mod
    real = indexer_mod.parse
    monkeypatch.setattr(indexer_mod, "parse", lambda *a, **kw: parsed.append(a[0]) or real(*a, **kw))
    report = docs.add([folder]).result()
    assert report.indexed == 0 and report.unchanged == 6 and parsed == []


def test_pdf_hits_carry_their_page_and_text_files_their_line_and_heading(docs, tmp_path):
    docs.add([write_corpus(tmp_path / "docs")]).result()
    hit = docs.search("how long is the kettle guaranteed", k=3)[0]
    assert Path(hit.source["path"]).name == "manual.pdf" and hit.source["page"] == 3 and "three years" in hit.text
    hit = next(h for h in docs.search("meal allowance when travelling abroad") if h.source["path"].endswith("policy.md"))
    at = hit.source
    assert at["page"] is None and at["heading"] == "Meals" and at["line"] == 5  # the "## Meals" line
    zh = docs.search("团建的地点在哪里")
    assert zh and Path(zh[0].source["path"]).name == "minutes.txt"


def test_collections_filter_search_and_remove(docs, tmp_path):
    a = write_corpus(tmp_path / "a")
    b = tmp_path / "b"
    b.mkdir()
    (b / "kettle.md").write_text("# Kettles\n\nThe Zephyr kettle warranty lasts five years in Norway.\n")
    docs.add([a], "work").result()
    docs.add([b], "home").result()
    assert {c["name"] for c in docs.collections()} == {"work", "home"}
    assert {h.source["collection"] for h in docs.search("Zephyr kettle warranty", collection="home")} == {"home"}
    assert docs.remove(collection="work") == {"roots": 1, "files": 6}
    assert {h.source["collection"] for h in docs.search("Zephyr kettle warranty")} == {"home"}
    assert docs.remove(path=str(b / "kettle.md")) == {"roots": 0, "files": 1}
    with pytest.raises(DocumentsError, match="not in the documents index"):
        docs.remove(path=str(b / "kettle.md"))
    with pytest.raises(DocumentsError, match="no collection"):
        docs.remove(collection="nope")


def test_list_questions_take_more_than_two_chunks_of_one_file(docs, tmp_path):
    folder = tmp_path / "list"
    folder.mkdir()
    rules = "\n\n".join(f"## Rule {i}\n\nSafety rule number {i}: " + "wear gloves and goggles in the lab. " * 8
                        for i in range(1, 9))
    (folder / "lab.md").write_text("# Lab safety rules\n\n" + rules, encoding="utf-8")
    docs.add([folder]).result()
    plain = docs.search("safety rule about goggles", k=4)
    listing = docs.search("list all the safety rules", k=4)
    assert len(plain) <= 2  # at most PER_FILE chunks of one file for an ordinary question
    assert len(listing) > 4 and len({h.source["path"] for h in listing}) == 1


def test_a_failed_write_leaves_no_half_file_and_the_next_run_indexes_it(docs, tmp_path, monkeypatch):
    folder = write_corpus(tmp_path / "docs")
    calls = {"n": 0}
    real = docs.store._put_vectors

    def failing(conn, ids, vecs):
        calls["n"] += 1
        if calls["n"] == 2:  # the second file: its chunks are inserted, then the write fails
            raise OSError("disk full")
        return real(conn, ids, vecs)

    monkeypatch.setattr(docs.store, "_put_vectors", failing)
    with pytest.raises(Exception, match="disk full"):
        docs.add([folder]).result()
    files = docs.files()
    assert len([f for f in files if f["status"] == "indexed"]) == 1
    chunked = docs.store.read("SELECT file_id, count(*) FROM doc_chunks GROUP BY file_id")
    assert chunked == [(files[0]["id"], files[0]["chunks"])] or all(
        f["chunks"] == dict(chunked).get(f["id"], 0) for f in files)
    assert docs.roots()[0]["scanned"] is None  # the run did not finish: resumed at the next start
    monkeypatch.setattr(docs.store, "_put_vectors", real)
    report = docs.add([folder]).result()
    assert report.indexed == 2 and docs.roots()[0]["scanned"] is not None


KILLED_INDEXER = """
import sys, time
from engine.storage import Database
from engine.memory.embedder import Embedder
from engine.docs.service import DocumentService
emb = Embedder().start(); emb.wait(120)
svc = DocumentService(Database(sys.argv[1]), emb)
print("go", flush=True)
svc.add([sys.argv[2]]).result()
print("finished", flush=True)
"""


def test_sigkill_mid_indexing_leaves_whole_files_and_the_next_start_resumes(tmp_path, embedder):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(120):
        (folder / f"note{i:03}.md").write_text(f"# Note {i}\n\n" + f"Item {i} of the archive. " * 60)
    db_file = tmp_path / "k.db"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_INDEXER, str(db_file), str(folder)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "go"
    probe = Database(db_file)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and probe.read("SELECT count(*) FROM doc_files")[0][0] < 5:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    probe.close()
    db = Database(db_file)
    done = db.read("SELECT count(*) FROM doc_files")[0][0]
    assert 5 <= done < 120
    # Every file row has exactly its chunks, vectors and keyword entries; nothing else exists.
    assert not db.read("SELECT f.id FROM doc_files f WHERE f.chunks != "
                       "(SELECT count(*) FROM doc_chunks c WHERE c.file_id = f.id)")
    assert not db.read("SELECT c.id FROM doc_chunks c LEFT JOIN doc_files f ON f.id = c.file_id WHERE f.id IS NULL")
    assert not db.read("SELECT c.id FROM doc_chunks c LEFT JOIN doc_vectors v ON v.chunk_id = c.id"
                       " WHERE v.chunk_id IS NULL")
    with db.transaction() as conn:
        conn.execute("INSERT INTO doc_chunks_fts (doc_chunks_fts) VALUES ('integrity-check')")
    service = DocumentService(db, embedder).start(resume=True)
    try:
        assert service.flush(120)
        assert db.read("SELECT count(*), sum(status = 'indexed') FROM doc_files")[0] == (120, 120)
        assert service.roots()[0]["scanned"] is not None
    finally:
        service.close()
        db.close()


def test_the_indexer_pauses_while_a_chat_turn_runs(docs, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(30):
        (folder / f"n{i}.md").write_text(f"# N{i}\n\nparagraph {i} " * 40)
    docs.start()
    with docs.turn():
        future = docs.add([folder])
        deadline = time.monotonic() + 60
        while docs.progress()["state"] != "paused" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert docs.progress()["state"] == "paused"
        before = docs.store.counts()["files"]
        time.sleep(0.5)
        assert docs.store.counts()["files"] == before  # nothing written during the turn
    assert future.result(60).indexed == 30


LONG_ZH = "北京办公室的年度团建定在十月十二日，地点是香山公园，请大家准时到达集合地点。" * 6


def wait_for_running_batch(embedder, deadline_s: float = 30) -> None:
    deadline = time.monotonic() + deadline_s
    while embedder._running is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert embedder._running is not None, "no interruptible batch started"


def test_an_interrupted_batch_raises_and_the_same_batch_later_gives_the_same_vectors(embedder):
    assert embedder.runtime_used == "onnx"  # `make test` exports the bundled embedder
    texts = [f"{i} {LONG_ZH}" for i in range(16)]  # ~1.4 s of one core: long enough to catch
    outcome = {}

    def run():
        try:
            outcome["vecs"] = embedder.embed(texts, INDEXING, interruptible=True)
        except EmbedInterrupted as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run)
    worker.start()
    wait_for_running_batch(embedder)
    assert embedder.interrupt()
    worker.join(30)
    assert "error" in outcome and "vecs" not in outcome
    assert not embedder.interrupt()  # nothing running now
    again = embedder.embed(texts, INDEXING, interruptible=True)
    assert again.shape == (16, embedder.dim)
    assert np.allclose(again[:2], embedder.embed(texts[:2]), atol=1e-5)


def test_a_turn_stops_the_running_embedding_batch_and_indexing_finishes_after_it(docs, tmp_path, embedder,
                                                                              monkeypatch):
    folder = tmp_path / "zh"
    folder.mkdir()
    for i in range(4):
        (folder / f"z{i}.md").write_text("\n\n".join(f"{j} {LONG_ZH}" for j in range(12)), encoding="utf-8")
    stopped = []
    interrupt = embedder.interrupt
    monkeypatch.setattr(embedder, "interrupt", lambda: stopped.append(interrupt()) or stopped[-1])
    docs.start()
    future = docs.add([folder])
    wait_for_running_batch(embedder)
    with docs.turn():
        assert stopped == [True]
        deadline = time.monotonic() + 60
        while docs.progress()["state"] != "paused" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert docs.progress()["state"] == "paused"
        assert embedder._running is None  # no batch shares the cores with the turn
    report = future.result(120)
    assert report.indexed == 4 and not report.skipped
    assert docs.status()["pending_vectors"] == 0  # the stopped batch was sent again
    hits = docs.search("香山公园 团建", k=3)
    assert hits.status == "ok" and paths_of(hits)[0].startswith("z")


def test_the_watcher_reindexes_a_changed_file(docs, tmp_path):
    folder = write_corpus(tmp_path / "w")
    docs.add([folder]).result()
    docs.start()
    docs.watch()
    assert docs.watcher.error is None
    docs.watcher.debounce_s = 0.2
    (folder / "new.md").write_text("# Fresh\n\nThe orchard has exactly seventeen pear trees.\n")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(f["path"].endswith("new.md") for f in docs.files()):
        time.sleep(0.1)
    assert docs.flush(60)
    assert "new.md" in paths_of(docs.search("how many pear trees are in the orchard"))


def test_documents_facade_and_bad_requests(tmp_path, monkeypatch):
    monkeypatch.setenv("ASSISTANT_HOME", str(tmp_path / "home"))
    folder = write_corpus(tmp_path / "docs")
    with Documents.open(Settings()) as d:
        report = d.add_documents([str(folder)], "papers")
        assert json.loads(json.dumps(report))["indexed"] == 3
        hits = d.search_documents("Zephyr kettle descaling", collection="papers")
        assert hits and {"path", "page", "text", "score"} <= set(hits[0]) and hits[0]["page"] == 2
        with pytest.raises(DocumentsError):
            d.add_documents([], "papers")
        with pytest.raises(DocumentsError):
            d.add_documents([str(folder)], "  ")
        missing = d.add_documents([str(tmp_path / "nowhere")])
        assert missing["skipped"] == [{"path": str(tmp_path / "nowhere"), "reason": "not found"}]


def test_cancel_stops_the_running_and_queued_jobs_and_a_restart_does_not_resume_them(docs, tmp_path, embedder):
    first, second = tmp_path / "one", tmp_path / "two"
    for folder in (first, second):
        folder.mkdir()
        for i in range(40):
            (folder / f"n{i}.md").write_text(f"# N{i}\n\n" + f"paragraph {i} about {folder.name}. " * 50)
    docs.start()
    with docs.turn():  # holds the first job at its first file, so both are in flight
        running = docs.add([first])
        queued = docs.add([second])
        deadline = time.monotonic() + 60
        while docs.progress()["state"] != "paused" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert docs.progress()["state"] == "paused"  # the first job holds at its first file, its root made
        docs.cancel()
    assert running.result(30).cancelled and queued.result(30).cancelled
    roots = {Path(r["path"]).name: r for r in docs.roots()}
    assert set(roots) == {"one"} and roots["one"]["stopped"] and roots["one"]["scanned"] is None
    assert docs.status()["files"] < 40
    docs.close()
    again = DocumentService(docs.db, embedder).start(resume=True)
    try:
        time.sleep(1.0)
        assert again.progress()["state"] == "idle" and again.store.counts()["files"] < 40
        report = again.add([first]).result(60)  # adding it again finishes it
        assert again.store.counts()["indexed"] == 40 and report.indexed + report.unchanged == 40
        assert not again.roots()[0]["stopped"] and again.roots()[0]["scanned"]
    finally:
        again.close()
