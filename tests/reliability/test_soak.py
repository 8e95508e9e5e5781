"""Soak: 200 turns over 10 chats on both demo models, switching chat every turn; resources stay flat.

One `Assistant` as the app builds it (two tiers, memory, summaries every 5 turns, KV tiers), chats
0, 2, 4, … forced to L1 (demo-small) and 1, 3, 5, … to L2 (demo-int4), each round visiting every
chat once in a seeded order, so every turn parks one chat's KV state and restores another's.
Resident memory, open file descriptors and threads are measured after a warm-up round pair
(both models, the embedder, every chat's first turns, the first summaries' code paths) and at the
end; their growth must stay within bounds set from measurements (see the constants).
"""

from __future__ import annotations

import json
import logging
import random
import time

import psutil
import pytest

from engine.inference.backend import LoadParams, SamplingParams
from engine.api import Assistant, EngineConfig, TurnDone
from engine.inference.events import GenerateParams
from engine.memory import MemoryService
from engine.config.paths import db_path
from engine.config.settings import Settings
from engine.storage import Database

from tests.model.helpers import THREADS

from .frontends import answered

pytestmark = pytest.mark.model
log = logging.getLogger(__name__)

CHATS = 10
TURNS = 20            # per chat: 200 in all
WARMUP_ROUNDS = 2     # 20 turns before the baseline
SEED = 7
N_CTX = 512           # 20 turns overflow it: context shifts and summaries happen within the soak
MAX_TOKENS = 12
# A fixed warm-tier budget: parked KV states are capped by design (the default, 10 % of RAM,
# would legitimately grow with every chat's history); what it evicts goes to cold files.
KV_WARM_MB = 32
# Bounds on growth from the baseline to the end. Measured in three runs (2 shared cores): RSS +29,
# +46 and +67 MB (+61 / +70 / +73 MB at the worst round; the warm tier stayed 20-30 MB throughout),
# all of it in the first half (the allocator's high-water mark), then flat within ±25 MB (second
# half: +19, −25, −6 MB); fds 22 → 22 (23 while a cold file is being written); threads 12 → 12.
# A leak of 0.7 MB a turn would add 126 MB over the 180 measured turns, 0.6 MB a turn 60 MB over
# the last 100.
MAX_RSS_GROWTH_MB = 120
MAX_RSS_GROWTH_SECOND_HALF_MB = 60
MAX_FD_GROWTH = 5     # a cold write in flight holds its file for a moment
MAX_THREAD_GROWTH = 2  # a summary job or the memory's keyword pool may be starting at the sample

TOPICS = ["the sea", "mountains", "bread", "trains", "bees", "the moon", "rain", "chess", "coffee", "rivers",
          "owls", "glass", "maps", "salt", "bridges", "clocks", "tea", "snow", "kites", "lighthouses"]
FORMS = ["Tell me one fact about {}.", "Why do people like {}?", "Give me a short tip about {}.",
         "What colour do you link with {}?", "用一句话介绍{}。"]


def message(chat: int, turn: int) -> str:
    return FORMS[(chat + turn) % len(FORMS)].format(TOPICS[(chat * 7 + turn) % len(TOPICS)])


def sample(proc: psutil.Process, a: Assistant) -> dict:
    """Resources now; `warm_mb`: parked KV states held in RAM (part of the RSS, capped by KV_WARM_MB)."""
    return {"rss_mb": round(proc.memory_info().rss / 2**20, 1), "fds": proc.num_fds(), "threads": proc.num_threads(),
            "warm_mb": round(a.kv.warm.nbytes / 2**20, 1)}


def test_soak_200_turns_over_10_chats(assistant_home, tmp_path, model_paths):
    rng = random.Random(SEED)
    proc = psutil.Process()
    db = Database(db_path())
    memory = MemoryService.from_settings(db, Settings()).start()
    assert memory.embedder.wait(300), memory.embedder.state
    a = Assistant(db, EngineConfig(load=LoadParams(n_ctx=N_CTX, n_threads=THREADS), tiers={"L1": "demo-small", "L2": "demo-int4"}, summary_every=5, kv_warm_mb=KV_WARM_MB), memory=memory)
    t0 = time.monotonic()
    try:
        chats = [a.new_conversation("Answer in one short sentence.") for _ in range(CHATS)]
        turns = {cid: 0 for cid in chats}
        levels: dict[str, int] = {}
        counts: dict[str, int] = {}  # "restored_from:…", "cache_mode:…", "shift:…" over all turns
        evaluated = {"L1": 0, "L2": 0}  # prompt tokens evaluated per level
        rounds = []  # resources after each round of 10 turns
        baseline = None
        for rnd in range(TURNS):
            if rnd == WARMUP_ROUNDS:
                a.wait_for_summaries(120)
                memory.flush(120)
                baseline = sample(proc, a)
                log.info("soak baseline after %d turns: %s", sum(turns.values()), baseline)
            for i in rng.sample(range(CHATS), CHATS):
                cid = chats[i]
                params = GenerateParams(SamplingParams(temperature=0.7, seed=rng.randrange(1 << 16)),
                                        max_tokens=MAX_TOKENS)
                done = [x for x in a.send(cid, message(i, turns[cid]), params, route="L1" if i % 2 == 0 else "L2")
                        if isinstance(x, TurnDone)]
                assert len(done) == 1, done
                stats = done[0].stats.as_json()  # the shape the front-ends' checks read
                assert answered(stats, MAX_TOKENS), stats
                levels[done[0].level] = levels.get(done[0].level, 0) + 1
                evaluated[done[0].level] += stats["prompt_tokens_evaluated"]
                for key in (f"restored_from:{stats['restored_from']}", f"cache_mode:{stats['cache_mode']}",
                            f"shift:{(stats['context'] or {}).get('context_shift')}"):
                    counts[key] = counts.get(key, 0) + 1
                turns[cid] += 1
            rounds.append(sample(proc, a) | {"s": round(time.monotonic() - t0)})
        a.wait_for_summaries(120)
        memory.flush(120)
        end = sample(proc, a)
        pages = a.kv_pages()["_tiers"]
    finally:
        a.close()
        memory.close()
    wall = time.monotonic() - t0

    report = {"turns": sum(turns.values()), "wall_s": round(wall, 1), "baseline": baseline, "end": end,
              "growth": {k: round(end[k] - baseline[k], 1) for k in end}, "levels": levels,
              "prompt_tokens_evaluated": evaluated, "counts": counts, "kv_tiers": pages, "rounds": rounds}
    log.info("soak report: %s", json.dumps(report))
    (tmp_path / "soak.json").write_text(json.dumps(report, indent=1))

    try:
        assert levels == {"L1": CHATS * TURNS // 2, "L2": CHATS * TURNS // 2}
        # Most switches restore a parked state (measured 137-139 of 200 from warm or cold; the others:
        # the model's context still held the chat, or the window had moved past every snapshot).
        assert counts.get("restored_from:warm", 0) + counts.get("restored_from:cold", 0) >= CHATS * TURNS // 2
        assert report["growth"]["rss_mb"] < MAX_RSS_GROWTH_MB, report
        assert end["rss_mb"] - rounds[TURNS // 2 - 1]["rss_mb"] < MAX_RSS_GROWTH_SECOND_HALF_MB, report
        assert report["growth"]["fds"] <= MAX_FD_GROWTH, report
        assert report["growth"]["threads"] <= MAX_THREAD_GROWTH, report
        assert db.integrity_check() == "ok"
        for cid in chats:
            rows = [m for m in db.messages(cid) if m["superseded_by"] is None]
            assert [m["role"] for m in rows] == ["user", "assistant"] * TURNS, cid
            assert all(m["status"] == "done" for m in rows)
            assert len(db.summaries(cid)) >= 1  # the summary chain ran beside the turns
    finally:
        db.close()
