"""Local documents, measured: retrieval on the bilingual labelled set, indexing throughput, search
latency and RAM at 10 000 files / 100 000 chunks, and chat TTFT while indexing runs.

    .venv/bin/python bench/docs.py                   # everything (~10 min on 2 cores)
    .venv/bin/python bench/docs.py --only eval       # eval | index | scale | ttft
    .venv/bin/python bench/docs.py --scale-files 1000 --scale-chunks 10000

eval: tests/data/docs_eval (18 files, en + zh, PDF/Word/Markdown/text/HTML; 72 paraphrased
questions). recall@3 by file: the question's file is among the files of the top 3 excerpts; page@3:
one of them is the file *and* the PDF page. Hybrid against vectors only and keywords only, same run.
index: the real pipeline (hash, parse, chunk, embed, write) on copies of the corpus.
scale: files and chunks written with random unit vectors (embedding 100 000 chunks would take
~20 min here); searches embed the query for real, so p50/p95 include it.
ttft: demo-small answering short questions, idle and while a folder is being indexed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("ASSISTANT_HOME", tempfile.mkdtemp(prefix="bench-docs-"))
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from engine.docs.chunks import Chunk  # noqa: E402
from engine.docs.service import DocumentService  # noqa: E402
from engine.memory.embedder import Embedder  # noqa: E402
from engine.storage import Database  # noqa: E402

EVAL = ROOT / "tests" / "data" / "docs_eval"


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 1e6


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


# ---- eval --------------------------------------------------------------------------------------

def run_eval(embedder: Embedder, tmp: Path) -> None:
    questions = [json.loads(line) for line in (EVAL / "questions.jsonl").read_text().splitlines() if line.strip()]
    svc = DocumentService(Database(tmp / "eval.db"), embedder)
    report = svc.add([EVAL / "corpus"]).result()
    print(f"\n## Retrieval on the labelled set ({len(questions)} questions, {report.indexed} files, "
          f"{report.chunks} chunks)\n")
    modes = {"hybrid": None, "vectors only": "vectors", "keywords only": "keywords"}
    rows = []
    for label, mode in modes.items():
        res = score(svc, questions, mode)
        rows.append((label, res))
    groups = ["all", "en", "zh", "fact", "list", "cross", "pdf"]
    print("| search | " + " | ".join(f"recall@3 {g}" for g in groups) + " | page@3 (PDF) |")
    print("|---" * (len(groups) + 2) + "|")
    for label, res in rows:
        cells = []
        for g in groups:
            hit, n = res["file"].get(g, (0, 0))
            cells.append(f"{hit}/{n} ({hit / n:.0%})" if n else "-")
        hit, n = res["page"]
        print(f"| {label} | " + " | ".join(cells) + f" | {hit}/{n} ({hit / n:.0%}) |")
    misses = rows[0][1]["misses"]
    if misses:
        print("\nhybrid misses: " + ", ".join(misses))
    svc.close()


def score(svc: DocumentService, questions: list[dict], mode: str | None) -> dict:
    store = svc.store
    saved = (store.keyword_search, store.pair_search, store.vector_search)
    if mode == "vectors":
        store.keyword_search = store.pair_search = lambda q, n: []
    elif mode == "keywords":
        store.vector_search = lambda q, n: []
    counts: dict[str, list[int]] = {}
    page = [0, 0]
    misses = []
    try:
        for q in questions:
            hits = svc.search(q["question"], k=3)
            top = hits[:3]
            ok = any(Path(h.source["path"]).name == q["file"] for h in top)
            groups = ["all", q["lang"], q["kind"]] + (["pdf"] if q["file"].endswith(".pdf") else [])
            for g in groups:
                c = counts.setdefault(g, [0, 0])
                c[0] += ok
                c[1] += 1
            if q.get("page"):
                page[1] += 1
                page[0] += any(Path(h.source["path"]).name == q["file"] and h.source["page"] == q["page"] for h in top)
            if not ok:
                misses.append(q["id"])
    finally:
        store.keyword_search, store.pair_search, store.vector_search = saved
    return {"file": {g: tuple(c) for g, c in counts.items()}, "page": tuple(page), "misses": misses}


# ---- indexing throughput -----------------------------------------------------------------------

def run_index(embedder: Embedder, tmp: Path, copies: int) -> None:
    folder = tmp / "copies"
    for i in range(copies):
        shutil.copytree(EVAL / "corpus", folder / f"c{i}")
        for f in (folder / f"c{i}").iterdir():  # different bytes per copy: nothing is deduplicated
            if f.suffix in (".md", ".txt", ".html"):
                with open(f, "a", encoding="gbk" if "gbk" in f.name or "branch" in f.name else "utf-8") as out:
                    out.write(f"\n\ncopy {i}\n")
    svc = DocumentService(Database(tmp / "index.db"), embedder)
    before = rss_mb()
    t0 = time.perf_counter()
    report = svc.add([folder]).result()
    seconds = time.perf_counter() - t0
    pages = sum(f["pages"] or 0 for f in svc.files())
    t1 = time.perf_counter()
    again = svc.add([folder]).result()
    rescan = time.perf_counter() - t1
    print(f"\n## Indexing throughput ({copies} copies of the corpus; parse + chunk + embed + write)\n")
    print("| files | PDF pages | chunks | seconds | files/s | pages/s | chunks/s | unchanged re-run | RSS growth |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {report.indexed} | {pages} | {report.chunks} | {seconds:.1f} | {report.indexed / seconds:.1f} | "
          f"{pages / seconds:.1f} | {report.chunks / seconds:.1f} | {again.unchanged} files in {rescan * 1000:.0f} ms | "
          f"{rss_mb() - before:.0f} MB |")
    svc.close()


# ---- scale -------------------------------------------------------------------------------------

WORDS = ("budget travel policy kettle warranty garden harbour museum ticket safety glove reactor "
         "ferry bridge recipe flour oven meeting minutes release feature bug sync export route "
         "summit trail cabin permit invoice refund account laptop printer network backup archive "
         "report quarter revenue cost staff office holiday schedule river valley lantern orchard").split()
ZH = "预算差旅政策水壶保修花园港口博物馆门票安全手套会议纪要发布功能同步导出路线山顶小屋许可发票退款账户网络备份报告季度收入成本员工办公室假期日程河流山谷灯笼果园"


def synthetic_text(rng: random.Random, n: int) -> str:
    if rng.random() < 0.3:
        return "".join(rng.choice(ZH) for _ in range(n // 2)) + "。"
    return " ".join(rng.choice(WORDS) + (str(rng.randint(0, 999)) if rng.random() < 0.1 else "")
                    for _ in range(n // 6)) + "."


def run_scale(embedder: Embedder, tmp: Path, files: int, chunks: int, queries: list[str]) -> None:
    rng = random.Random(7)
    db = Database(tmp / "scale.db")
    svc = DocumentService(db, embedder)
    root = svc.store.add_root(str(tmp / "scale"), "default")
    per_file = chunks // files
    t0 = time.perf_counter()
    for f in range(files):
        pieces = [Chunk(synthetic_text(rng, 420), (i // 3) + 1, None, None, i) for i in range(per_file)]
        vecs = np.asarray(rng_vectors(rng, per_file, embedder.dim))
        svc.store.write_file(root, str(tmp / "scale" / f"f{f:05}.pdf"), kind="pdf", size=1000, mtime_ns=f,
                             sha256=None, chunks=pieces, vecs=vecs, pages=per_file // 3 + 1)
    write_s = time.perf_counter() - t0
    counts = svc.store.counts()
    before = rss_mb()
    t1 = time.perf_counter()
    svc.store.index.load()
    load_s = time.perf_counter() - t1
    index_mb = rss_mb() - before
    for q in queries[:5]:
        svc.search(q)  # warm
    times = []
    for q in queries * max(1, 200 // len(queries)):
        t = time.perf_counter()
        svc.search(q)
        times.append((time.perf_counter() - t) * 1000)
    db_mb = sum(p.stat().st_size for p in tmp.glob("scale.db*")) / 1e6
    print(f"\n## Scale: {counts['files']} files, {counts['chunks']} chunks (random vectors, real query embedding)\n")
    print("| searches | p50 ms | p95 ms | max ms | vector index load | index RAM | process RSS | database on disk | write rate |")
    print("|---|---|---|---|---|---|---|---|---|")
    print(f"| {len(times)} | {statistics.median(times):.1f} | {pct(times, 0.95):.1f} | {max(times):.1f} | "
          f"{load_s:.2f} s | {index_mb:.0f} MB | {rss_mb():.0f} MB | {db_mb:.0f} MB | "
          f"{counts['chunks'] / write_s:.0f} chunks/s |")
    svc.close()
    db.close()


def rng_vectors(rng: random.Random, n: int, dim: int) -> np.ndarray:
    v = np.random.default_rng(rng.randint(0, 1 << 30)).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


# ---- TTFT while indexing -----------------------------------------------------------------------

def run_ttft(tmp: Path, turns: int, copies: int) -> None:
    from engine.api import Assistant, GenerateParams, SamplingParams, TurnDone

    folder = tmp / "ttft-docs"
    for i in range(copies):
        shutil.copytree(EVAL / "corpus", folder / f"c{i}")
    a = Assistant.from_settings(model="demo-small", n_ctx=2048, memory=False, cascade=False, docs=True)
    params = GenerateParams(SamplingParams(temperature=0.0), max_tokens=8)
    a.documents_ready(120)

    def measure(label: str, busy, first: int) -> list[float]:
        # Each phase asks its own questions: the KV tiers' prefix index would otherwise serve a
        # repeated question from the state the idle phase left (1 token evaluated instead of ~16).
        out = []
        for t in range(first, first + turns):
            cid = a.new_conversation()
            for item in a.send(cid, f"Question {t}: name a colour of the sky.", params, docs=False):
                if isinstance(item, TurnDone):
                    out.append(item.stats.ttft_ms)
            time.sleep(0.3)  # the indexer resumes between turns, as while a user reads
            if busy is not None and not busy():
                print(f"  ({label}: indexing finished after {t - first + 1} turns)")
                break
        return out

    try:
        for item in a.send(a.new_conversation(), "warm up", params, docs=False):
            pass
        idle = measure("idle", None, 100)
        future = a.add_documents([str(folder)], wait=False)
        while a.documents_progress()["state"] != "indexing":
            time.sleep(0.05)
        busy = measure("indexing", lambda: not future.done(), 200)
        progress = future.result()
    finally:
        a.close()
    print(f"\n## Chat TTFT while indexing (demo-small, {len(idle)} + {len(busy)} turns; "
          f"indexing {progress.indexed} files / {progress.chunks} chunks in the background)\n")
    print("| | median TTFT ms | p95 TTFT ms |")
    print("|---|---|---|")
    print(f"| idle | {statistics.median(idle):.0f} | {pct(idle, 0.95):.0f} |")
    print(f"| while indexing | {statistics.median(busy):.0f} | {pct(busy, 0.95):.0f} |")
    print(f"| ratio | {statistics.median(busy) / statistics.median(idle):.2f}x | "
          f"{pct(busy, 0.95) / pct(idle, 0.95):.2f}x |")


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--only", choices=["eval", "index", "scale", "ttft"])
    p.add_argument("--copies", type=int, default=10, help="corpus copies for the throughput run")
    p.add_argument("--scale-files", type=int, default=10_000)
    p.add_argument("--scale-chunks", type=int, default=100_000)
    p.add_argument("--turns", type=int, default=12)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-docs-data-"))
    embedder = Embedder().start()
    assert embedder.wait(300), embedder.state
    questions = [json.loads(line)["question"] for line in (EVAL / "questions.jsonl").read_text().splitlines() if line]
    try:
        if args.only in (None, "eval"):
            run_eval(embedder, tmp)
        if args.only in (None, "index"):
            run_index(embedder, tmp, args.copies)
        if args.only in (None, "scale"):
            run_scale(embedder, tmp, args.scale_files, args.scale_chunks, questions)
        if args.only in (None, "ttft"):
            embedder.close()
            run_ttft(tmp, args.turns, args.copies)
    finally:
        embedder.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
