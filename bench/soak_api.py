"""Soak: thousands of stateless API requests with distinct histories; the server must not grow.

    .venv/bin/python bench/soak_api.py --backend fake --requests 5000
    .venv/bin/python bench/soak_api.py --backend demo-small --requests 1500 --every 300 --threads 1

The local API server runs in this process (so its maps can be counted) on 127.0.0.1 with a fresh
ASSISTANT_HOME and the defaults (API conversations not stored). One client sends the requests one
after another, opening a new connection every CONNECTION_REQUESTS, in a fixed cycle of four: a new
chat whose history holds an earlier turn (a new conversation), that chat continued (the same
conversation), another new chat, and a one-off /v1/completions (deleted at once). Every
conversation the index (128 conversations; `--index` sets fewer, so that a short run reaches its
steady state: two new conversations every four requests fill it) lets go is deleted. Every `--every` requests, once the model's
thread is idle, a row: the process's RSS, every per-conversation map (engine.api.footprint, plus
the server's index, unstored conversations and client lines), the database file with its WAL,
and the median request time of the rows' window. The last line says whether it stayed flat:
from the first row to the last, no per-conversation count grew, and RSS and the database file
grew by less than FLAT_GROWTH.

The fake backend (tests/fake_backend.py) answers at once and has no weights: it shows the
engine's and the server's own footprint. Its record of every evaluated piece (a test aid) is
cleared after each request. demo-small is the real model and llama.cpp.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.api import Assistant, EngineConfig, LoadParams, Settings, db_path, footprint  # noqa: E402
from engine.inference.manager import ModelManager  # noqa: E402
from engine.server import ApiServer, ServerConfig  # noqa: E402
from engine.storage import Database  # noqa: E402
from tests.fake_backend import FakeGPU, FakeModels  # noqa: E402

log = logging.getLogger("bench.soak_api")

CONNECTION_REQUESTS = 50  # then the client opens a new connection (a new fairness key on loopback)
FLAT_GROWTH = 0.05  # RSS and database growth from the first row to the last that still counts as flat
SETTLE_S = 60.0
WORDS = ["river", "lantern", "copper", "meadow", "harbor", "violet", "granite", "orchard", "ember", "glacier",
         "saffron", "timber", "falcon", "quartz", "willow", "canyon"]


def topic(i: int) -> str:
    """A phrase no other request has: its words and its number."""
    return " ".join(WORDS[(i * k + k) % len(WORDS)] for k in range(1, 6)) + f" #{i}"


def request(i: int, previous: list[dict]) -> tuple[str, dict]:
    """Request i of the cycle: (path, body)."""
    kind = i % 4
    if kind == 3:
        return "/completions", {"model": "L1", "prompt": f"Finish this line about {topic(i)}:", "max_tokens": 8}
    if kind == 1 and previous:
        history = previous + [{"role": "user", "content": f"And what else about {topic(i)}?"}]
    else:
        history = [{"role": "system", "content": "You answer briefly."},
                   {"role": "user", "content": f"Tell me about {topic(i)}."},
                   {"role": "assistant", "content": f"{topic(i).capitalize()} is a long story."},
                   {"role": "user", "content": "Give me one fact."}]
    return "/chat/completions", {"model": "L1", "messages": history, "max_tokens": 8}


# ---- the engine
def fake_assistant(home: Path):
    """An Assistant on the scripted fake backend, as the tests build it; (assistant, trim) where
    trim() clears the fake's record of what it evaluated."""
    (home / "models").mkdir()
    fakes = FakeModels(home / "models")
    model = fakes.model_file("m")
    manager = ModelManager(budget_bytes=1 << 30, params=LoadParams(n_ctx=4096, n_batch=32, n_threads=1),
                           vram_budget_mb=64, backend_factory=fakes, devices=FakeGPU())
    assistant = Assistant(Database(db_path()), EngineConfig(model=str(model)), manager=manager)

    def trim() -> None:
        for backend in fakes.built:
            backend.history.clear()
            backend.prompts.clear()
            backend.calls.clear()
        fakes.script("m").served.clear()

    return assistant, trim


def real_assistant(model: str, threads: int | None):
    return Assistant.from_settings(Settings(), model=model, n_threads=threads), lambda: None


def settle(assistant, timeout: float = SETTLE_S) -> None:
    """Wait until the model's thread has run what the last request queued (parking its KV state)
    and the cold writes are done: the counts are then the server's at rest."""
    deadline = time.monotonic() + timeout
    while any(w.busy for w in assistant.manager.published) and time.monotonic() < deadline:
        time.sleep(0.01)
    if assistant.kv is not None:
        assistant.kv.flush()


# ---- the table
def measure(server: ApiServer, n: int, times: list[float]) -> dict:
    a = server.assistant
    db = a.db.path
    row = {"requests": n, "RSS MiB": psutil.Process().memory_info().rss / 2**20}
    counts = footprint(a) | {"api index": len(server.conversations._index),
                             "api alive": len(server.conversations._alive),
                             "queue lines": len(server.queue._lines)}
    row |= counts
    row["KV warm MiB"] = a.kv.warm.nbytes / 2**20 if a.kv is not None else 0.0  # snapshots kept in RAM
    row["DB KiB"] = sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists()) / 1024
    pages, free = a.db.read("PRAGMA page_count")[0][0], a.db.read("PRAGMA freelist_count")[0][0]
    row["DB pages used"] = pages - free
    row["p50 ms"] = statistics.median(times) * 1000 if times else 0.0
    return row


COLUMNS = [("requests", "requests"), ("RSS MiB", "RSS MiB"), ("DB KiB", "DB KiB (+WAL)"),
           ("DB pages used", "pages used"), ("db message index blocks", "FTS blocks"),
           ("db conversations", "live convs"), ("db messages", "messages"),
           ("api index", "index"), ("api alive", "unstored"), ("water", "water"), ("summary jobs", "summaries"),
           ("conversation cache", "conv cache"), ("warm level", "last level"), ("kv hot", "KV hot"),
           ("kv warm", "KV warm"), ("KV warm MiB", "KV warm MiB"), ("kv cold files", "KV cold"), ("kv cold headers", "cold headers"),
           ("kv deleted runs", "deleted runs"), ("db readers", "DB readers"), ("queue lines", "queue lines"),
           ("p50 ms", "p50 ms")]
# What must not grow at all. The keyword index's blocks and the pages in use rise and fall as FTS5
# merges its segments (deleted rows' entries go when a merge meets their delete markers): the
# database is judged by its file, which stops growing once they stop.
COUNTS = [key for key, _ in COLUMNS
          if key not in ("requests", "RSS MiB", "DB KiB", "DB pages used", "db message index blocks", "KV warm MiB",
                         "p50 ms")]


def fmt(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def verdict(first: dict, last: dict) -> tuple[bool, str]:
    grew = [f"{k} {first[k]} → {last[k]}" for k in COUNTS if last[k] > first[k]]
    rss = last["RSS MiB"] / first["RSS MiB"] - 1
    dbg = last["DB KiB"] / first["DB KiB"] - 1
    flat = not grew and rss < FLAT_GROWTH and dbg < FLAT_GROWTH
    what = (f"from {first['requests']} to {last['requests']} requests: RSS {rss:+.1%}, database {dbg:+.1%}, "
            + ("no per-conversation count grew" if not grew else "grew: " + "; ".join(grew)))
    return flat, ("FLAT " if flat else "GROWING ") + what


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["fake", "demo-small"], default="fake")
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--every", type=int, default=1000, help="requests between rows")
    ap.add_argument("--index", type=int, help="conversations the server can continue (default: its own, 128)")
    ap.add_argument("--threads", type=int, help="llama.cpp threads for demo-small (default: the settings')")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="# %(message)s", stream=sys.stderr)

    home = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    os.environ["ASSISTANT_HOME"] = str(home)  # before anything reads the data dir
    assistant, trim = (fake_assistant(home) if args.backend == "fake"
                       else real_assistant(args.backend, args.threads))
    key = secrets.token_urlsafe(24)
    server = ApiServer(assistant, ServerConfig(host="127.0.0.1", port=0, api_key=key)).start()
    if args.index:
        server.conversations.size = args.index
    print(f"# {args.backend}, {args.requests} requests, index {server.conversations.size}, "
          f"ASSISTANT_HOME={home}", flush=True)
    print("| " + " | ".join(title for _, title in COLUMNS) + " |")
    print("|" + "---:|" * len(COLUMNS), flush=True)
    rows, times, previous, http = [], [], [], None
    try:
        for i in range(args.requests):  # bounded: one request at a time, loopback only
            if i % CONNECTION_REQUESTS == 0:
                if http is not None:
                    http.close()
                http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)
            path, body = request(i, previous)
            t0 = time.perf_counter()
            r = http.post(path, json=body)
            times.append(time.perf_counter() - t0)
            if r.status_code != 200:
                raise SystemExit(f"request {i} failed: {r.status_code} {r.text[:300]}")
            if path == "/chat/completions":
                previous = body["messages"] + [r.json()["choices"][0]["message"]]
            trim()
            if (i + 1) % args.every == 0 or i + 1 == args.requests:
                settle(assistant)
                rows.append(measure(server, i + 1, times))
                times = []
                print("| " + " | ".join(fmt(rows[-1][k]) for k, _ in COLUMNS) + " |", flush=True)
    finally:
        if http is not None:
            http.close()
        server.stop()
        assistant.close()
        assistant.db.close()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    if len(rows) < 2:
        print("one row only: nothing to compare")
        return 0
    flat, line = verdict(rows[0], rows[-1])
    print(line)
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
