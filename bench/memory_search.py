"""Memory retrieval latency over a large store: sqlite-vec vs numpy, printed as a markdown table.

    .venv/bin/python bench/memory_search.py [--n 100000] [--queries 200] [--db PATH]

Builds a store of N synthetic chunks (varied English and Chinese sentences, three per chunk) in a
temporary database, or reuses --db. Embedding 100 000 chunks with the real model would take most of
an hour on a laptop CPU, so only the distinct sentences are embedded for real and a chunk's vector is
the normalised sum of its sentences' vectors plus a little noise: the same shape and spread as real
embeddings. Queries are embedded for real inside the timed loop: each time is a full
`MemoryService.search(query, k=3)` (query embedding + vector search + keyword search + fusion).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.memory import Embedder, MemoryService, MemoryStore  # noqa: E402
from engine.storage import Database  # noqa: E402

SUBJECTS = ("my sister|the new manager|our dentist|a neighbour|the landlord|my friend Alice|Bob from work|the kids|"
            "grandma|the cat|the python script|the database|the garden|my bike|the train to Berlin|the tax office|"
            "the wedding planner|our trip to Japan|the quarterly report|the router|the plumber|my running coach|"
            "the school bus|the bakery|the car insurance").split("|")
VERBS = ("called about|complained about|fixed|forgot|loves|asked me to check|wants to move|is worried about|"
         "paid for|scheduled|cancelled|wrote a note on|broke|recommended|cooked|photographed|returned|"
         "argued about|measured|painted").split("|")
OBJECTS = ("the invoice|a vegan lasagna|the broken window|a flight on Friday|the SQL migration|her birthday party|"
           "the blue sofa|a doctor's appointment|the wifi password|the holiday photos|a new laptop|"
           "the electricity bill|the hiking boots|a jazz concert|the insurance claim|tomato seedlings|"
           "the unit tests|a chess tournament|the parking permit|the piano lessons|the leaking roof|"
           "a sourdough starter|the marathon training plan|the kitchen tiles").split("|")
TAILS = ("next week.|yesterday evening.|because it was urgent.|again, sadly.|before the deadline.|and it went fine.|"
         "in the morning.|with a lot of patience.|for the third time.|without telling anyone.").split("|")
ZH_SUBJECTS = "我妹妹|新经理|我们的牙医|邻居|房东|我的朋友小王|孩子们|奶奶|那只猫|数据库|花园|我的自行车".split("|")
ZH_VERBS = "打电话说了|抱怨了|修好了|忘记了|很喜欢|让我检查|安排了|取消了|付了钱买|推荐了".split("|")
ZH_OBJECTS = "发票|素食千层面|坏掉的窗户|周五的航班|数据库迁移|生日聚会|蓝色沙发|医生预约|无线网络密码|电费账单|登山鞋|爵士音乐会".split("|")
QUERIES = ["Who fixed the broken window?", "when is the flight on Friday", "what did the landlord complain about",
           "jazz concert tickets", "did anyone pay the electricity bill", "my sister's birthday party",
           "problems with the SQL migration", "the tax office appointment", "what happened with the wifi password",
           "marathon training", "who recommended the hiking boots", "sourdough", "kitchen tiles colour",
           "谁修好了窗户", "周五的航班是什么时候", "数据库迁移有什么问题", "房东抱怨了什么", "电费账单付了吗",
           "Go", "猫"]


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = set()
    while len(out) < n:
        if rng.random() < 0.2:
            out.add(f"{rng.choice(ZH_SUBJECTS)}{rng.choice(ZH_VERBS)}{rng.choice(ZH_OBJECTS)}。")
        else:
            out.add(f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}")
    return sorted(out)


def build(db_path: Path, embedder: Embedder, n: int, n_sentences: int) -> None:
    base = sentences(n_sentences, seed=1)
    t0 = time.perf_counter()
    base_vecs = embedder.embed(base)
    print(f"embedded {len(base)} distinct sentences in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    db = Database(db_path)
    store = MemoryStore(db, embedder.model_id, embedder.dim)
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    date = "2024-01-01T00:00:00+00:00"
    for start in range(0, n, 5000):
        size = min(5000, n - start)
        picks = rng.integers(0, len(base), (size, 3))
        texts = [" ".join(base[j] for j in p) for p in picks]
        vecs = base_vecs[picks].sum(axis=1) + 0.05 * rng.standard_normal((size, embedder.dim)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        # One message per chunk, 40 per conversation: retrieval checks that each message still exists.
        mids = range(start + 1, start + size + 1)
        with store.transaction() as conn:
            conn.executemany("INSERT OR IGNORE INTO conversations (id, title, created, updated) VALUES (?, '', ?, ?)",
                             [(1 + (m - 1) // 40, date, date) for m in mids])
            conn.executemany("INSERT INTO messages (id, conversation_id, role, content, created) VALUES (?, ?, ?, ?, ?)",
                             [(m, 1 + (m - 1) // 40, "user" if m % 2 else "assistant", t, date)
                              for m, t in zip(mids, texts)])
        rows = [("message", t, 1 + (m - 1) // 40, m, "user" if m % 2 else "assistant", 0, date)
                for m, t in zip(mids, texts)]
        store.insert_many(rows, vecs)
    print(f"inserted {n} chunks in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    db.close()


def percentiles(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def run_path(db_path: Path, backend: str, embedder: Embedder, n_queries: int) -> dict:
    db = Database(db_path, driver="sqlean" if backend == "sqlite-vec" else "sqlite3")
    svc = MemoryService(db, embedder, vector_backend=backend)
    t0 = time.perf_counter()
    svc.store.index.load() if backend == "numpy" else svc.store.index.sync()
    cold = time.perf_counter() - t0
    svc.start()
    assert svc.flush(600), "indexer did not settle"
    queries = [QUERIES[i % len(QUERIES)] for i in range(n_queries)]
    for q in queries[:5]:
        svc.search(q, k=3)  # warm-up
    total, cpu, embed, vector, keyword, hits_per_query = [], [], [], [], [], []
    for q in queries:
        t, c = time.perf_counter(), time.process_time()
        hits = svc.search(q, k=3)
        total.append((time.perf_counter() - t) * 1e3)
        cpu.append((time.process_time() - c) * 1e3)
        hits_per_query.append([h.id for h in hits])
        t = time.perf_counter()
        qv = embedder.embed([q])[0]
        embed.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        svc.store.vector_search(qv, 20)
        vector.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        svc.store.keyword_search(q, 20)
        keyword.append((time.perf_counter() - t) * 1e3)
    recall = None
    if backend == "numpy":  # the two-stage search against an exact scan of every vector
        r3, r10, gap3 = [], [], []
        for q in QUERIES:
            qv = embedder.embed([q])[0]
            fast, exact = svc.store.index.search(qv, 10), svc.store.index.search(qv, 10, exact=True)
            r3.append(len({i for i, _ in fast[:3]} & {i for i, _ in exact[:3]}) / 3)
            r10.append(len({i for i, _ in fast} & {i for i, _ in exact}) / 10)
            gap3.append(exact[2][1] - fast[2][1])  # how much worse the 3rd hit is than the exact 3rd
        recall = (float(np.mean(r3)), float(np.mean(r10)), float(np.mean(gap3)), float(np.max(gap3)))
    count = sum(svc.store.counts().values())
    svc.close()
    db.close()
    return {"backend": backend, "n": count, "cold_s": cold, "total": percentiles(total), "cpu": percentiles(cpu), "embed": percentiles(embed),
            "vector": percentiles(vector), "keyword": percentiles(keyword), "recall": recall, "hits": hits_per_query}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=100_000, help="chunks in the store")
    p.add_argument("--queries", type=int, default=200, help="timed searches per path")
    p.add_argument("--sentences", type=int, default=1500, help="distinct sentences embedded for real")
    p.add_argument("--db", type=Path, help="reuse (or create and keep) this database")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    embedder = Embedder().start()
    if not embedder.wait(300):
        print(f"embedder: {embedder.state}", file=sys.stderr)
        return 1
    tmp = None
    db_path = args.db
    if db_path is None:
        tmp = tempfile.TemporaryDirectory(prefix="memory-bench-")
        db_path = Path(tmp.name) / "bench.db"
    if not db_path.exists():
        build(db_path, embedder, args.n, args.sentences)
    load_before = os.getloadavg()[0]
    results = [run_path(db_path, backend, embedder, args.queries) for backend in ("sqlite-vec", "numpy")]
    load_after = os.getloadavg()[0]
    same = np.mean([a == b for a, b in zip(results[0]["hits"], results[1]["hits"])])

    print(f"\n{results[0]['n']:,} chunks, {args.queries} searches per path (k=3), "
          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"load average {load_before:.1f} → {load_after:.1f}\n")
    print("| path | search p50 | search p95 | CPU time p50 / p95 | query embedding p50 / p95 "
          "| vector stage p50 / p95 | keyword stage p50 / p95 | first-use load |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['backend']} | {r['total'][0]:.1f} ms | {r['total'][1]:.1f} ms "
              f"| {r['cpu'][0]:.1f} / {r['cpu'][1]:.1f} ms "
              f"| {r['embed'][0]:.1f} / {r['embed'][1]:.1f} ms | {r['vector'][0]:.1f} / {r['vector'][1]:.1f} ms "
              f"| {r['keyword'][0]:.1f} / {r['keyword'][1]:.1f} ms | {r['cold_s']:.2f} s |")
    r3, r10, gap_mean, gap_max = results[1]["recall"]
    print(f"\nsame hits on both paths: {same:.0%} of searches. Two-stage search against an exact scan: "
          f"recall@3 {r3:.3f}, recall@10 {r10:.3f}; the 3rd hit's cosine is {gap_mean:.4f} lower on average "
          f"(at most {gap_max:.4f}).")
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
