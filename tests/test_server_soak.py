"""A long-running server does not grow (issue 22): every map the engine keeps per conversation, and
every table row of a conversation, is back to its size once the conversations are deleted, however
many there were. Counts, not times; the soak over thousands of requests is bench/soak_api.py."""

from __future__ import annotations

import random

import httpx

from engine.api import footprint
from engine.kv.id_ranges import IdRanges
from engine.memory.embedder import Embedder
from engine.memory.service import MemoryService
from engine.storage import Database
from tests.fake_backend import fakes, make_assistant, send, wait_until  # noqa: F401
from tests.server_util import KEY, serve  # noqa: F401

LONG = " ".join(f"word{i}" for i in range(60))  # ~400 tokens on the fake: its KV state reaches the cold tier
PER_CONVERSATION = ("water", "summary jobs", "conversation cache", "warm level", "kv hot", "kv warm",
                    "kv cold files", "kv cold headers", "db conversations", "db messages", "db summaries",
                    "db message memories")


def settle(a) -> None:
    """Wait until the model's thread has run every queued job (parking a state in the KV tiers
    comes after the answer) and the cold writes they queued are done."""
    wait_until(lambda: not any(w.busy for w in a.manager.published), timeout=10)
    a.kv.flush()


def sizes(server) -> dict[str, int]:
    """The engine's footprint plus the server's own per-conversation and per-client maps."""
    c = server.conversations
    return footprint(server.assistant) | {"api index": len(c._index), "api alive": len(c._alive),
                                          "queue lines": len(server.queue._lines)}


def test_stateless_api_requests_leave_nothing_behind(serve, fakes, make_assistant):
    # A RAM tier smaller than one snapshot: every parked state goes on to a cold file.
    a = make_assistant(str(fakes.model_file("m")), kv_warm_mb=0.002)
    server = serve(a)
    server.conversations.size = 4  # the index of continuable conversations (128 in use)
    base = sizes(server)
    assert all(base[k] == 0 for k in PER_CONVERSATION)
    http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    previous: list[dict] = []
    marks = []
    for i in range(48):
        if i % 4 == 3:  # a one-off: deleted as soon as it is answered
            r = http.post("/completions", json={"model": "L1", "prompt": f"Prompt {i}: {LONG}", "max_tokens": 8})
        else:
            if i % 4 == 1:  # the previous client comes back: its conversation goes on
                history = previous + [{"role": "user", "content": f"And then? ({i})"}]
            else:  # a history the server has never seen: a new conversation holding its earlier turns
                history = [{"role": "system", "content": "Be brief."},
                           {"role": "user", "content": f"Chat {i}: {LONG}"},
                           {"role": "assistant", "content": f"Noted {i}."},
                           {"role": "user", "content": "Go on."}]
            r = http.post("/chat/completions", json={"model": "L1", "messages": history, "max_tokens": 8})
            previous = history + [r.json()["choices"][0]["message"]]
        assert r.status_code == 200, r.text
        if i in (23, 47):
            settle(a)
            marks.append(sizes(server))
    http.close()
    half, full = marks
    assert full["db conversations"] <= server.conversations.size  # the index's, and no more
    # Flat, not growing. The cold headers are cached as the status thread (2 Hz) reads them: at
    # most one per file on disk.
    steady = [k for k in PER_CONVERSATION if k != "kv cold headers"]
    assert {k: full[k] for k in steady} == {k: half[k] for k in steady}
    assert full["kv cold headers"] <= full["kv cold files"]
    # Deleted ids cost a run per gap: the live conversations between them, at most.
    assert full["kv deleted runs"] <= full["db conversations"] + 1
    assert full["db readers"] == half["db readers"]
    assert a.kv.cold.stats.written > 0  # the cold tier was used (and its files went with their chats)

    server.stop()  # unstored API conversations are deleted
    settle(a)
    # The status thread (2 Hz) drops cached headers of files that went meanwhile: wait for that state.
    wait_until(lambda: sizes(server)["kv cold headers"] == 0, timeout=10)
    after = sizes(server)
    assert {k: after[k] for k in PER_CONVERSATION} == {k: base[k] for k in PER_CONVERSATION}
    assert after["api index"] == after["api alive"] == after["queue lines"] == 0
    assert after["kv deleted runs"] == 1  # 36 conversations deleted: ids in one run, not 36 entries


def test_deleting_conversations_drops_summaries_memories_and_water(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")), summary_every=1, kv_warm_mb=0.002)
    a.memory = MemoryService(a.db, Embedder(), vector_backend="numpy").start()
    try:
        base = footprint(a)
        cids = []
        for i in range(5):
            cid = a.new_conversation("Be brief.")
            for turn in range(3):  # 1 turn summarised + 2 recent (summary_every=1) makes a summary
                send(a, cid, f"Conversation {i}, turn {turn}: {LONG}", max_tokens=8)
            cids.append(cid)
        a.wait_for_summaries(30)
        assert a.memory.flush(30)
        settle(a)
        busy = footprint(a)
        assert busy["summary jobs"] == busy["water"] == busy["db summaries"] == 5
        assert busy["db message memories"] > 0 and busy["kv cold files"] > 0
        for cid in cids:
            a.delete_conversation(cid)
        assert a.memory.flush(30)
        settle(a)
        wait_until(lambda: footprint(a)["kv cold headers"] == 0, timeout=10)
        after = footprint(a)
        assert {k: after[k] for k in PER_CONVERSATION} == {k: base[k] for k in PER_CONVERSATION}
        assert after["kv deleted runs"] == 1
    finally:
        a.memory.close()
        a.memory.embedder.close()
        a.memory = None


def test_the_database_keeps_its_size_while_conversations_come_and_go(tmp_path):
    db = Database(tmp_path / "churn.db")
    live, blocks, pages = [], [], []
    for i in range(1, 1501):  # 64 conversations alive, one made and one deleted per round
        cid = db.create_conversation(model="m")
        for j in range(4):
            db.add_message(cid, ("user", "assistant")[j % 2],
                           f"Chat {i}, message {j}: tell me about the river lantern {i * 7919 % 1000} and copper {i % 97}")
        live.append(cid)
        if len(live) > 64:
            db.delete_conversation(live.pop(0))
        if i % 100 == 0:
            blocks.append(db.read("SELECT count(*) FROM messages_fts_data")[0][0])
            pages.append(db.read("PRAGMA page_count")[0][0])
    with db.transaction() as conn:
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
    merged = db.read("SELECT count(*) FROM messages_fts_data")[0][0]  # the live messages' index alone
    db.close()
    # Deleted messages' entries stay in the keyword index until a merge meets their delete markers:
    # at most twice what is live, give or take (FTS5's default merging let it reach 5x, 83 blocks
    # for 16), and the file stops growing once the index stops (free pages are reused).
    assert max(blocks[3:]) <= 3 * merged, (blocks, merged)
    assert pages[-1] <= pages[4] * 1.1, pages  # page_count only grows: it stopped


def test_deleted_ids_cost_one_run_per_gap():
    ids, plain = IdRanges(), set()
    rng = random.Random(7)
    for i in rng.sample(range(1, 501), 500):  # every id of 1..500, in any order
        ids.add(i)
        plain.add(i)
        assert len(ids) == sum(1 for j in plain if j - 1 not in plain)
    assert len(ids) == 1 and 1 in ids and 500 in ids and 0 not in ids and 501 not in ids
    ids.add(503)  # 502 still alive: a gap
    assert len(ids) == 2 and 502 not in ids and 503 in ids
