"""The cold tier's files on their own: budget, atomic writes under kill -9, rejection counting.
(Snapshots here carry synthetic bytes: the file layer does not look inside llama.cpp's state;
tests/model/test_kv_tiers.py restores real ones.)"""

import os
import signal
import subprocess
import sys
import time

from engine.kv.tiers import ColdTier, Snapshot, WarmTier

FACTS = {"model_name": "m.gguf", "n_ctx": 2048}


def snap(cid, n_tokens=300, fill=1, size=100_000):
    return Snapshot("m.gguf:1", cid, list(range(n_tokens)), bytearray([fill % 256]) * size)


def test_disk_budget_holds_under_fifty_conversations(tmp_path):
    cold = ColdTier(tmp_path, budget_bytes=1_000_000)
    for cid in range(50):
        assert cold.write(snap(cid, fill=cid), FACTS) is not None
        time.sleep(0.002)  # distinct mtimes: LRU order is write order
        assert sum(size for _, size, _ in cold.files()) <= 1_000_000
    kept = sorted(int(p.name[1:p.name.index("-")]) for p, _, _ in cold.files())
    assert kept == list(range(50 - len(kept), 50)) and len(kept) >= 8  # the newest stay
    assert cold.stats.pruned == 50 - len(kept)
    loaded = cold.load(49, "m.gguf:1", FACTS)
    assert loaded.tokens == list(range(300)) and loaded.data == bytearray([49]) * 100_000


def test_short_chats_are_not_written_and_a_full_disk_is_only_counted(tmp_path):
    cold = ColdTier(tmp_path / "kv", budget_bytes=10**9)
    assert cold.write(snap(1, n_tokens=100), FACTS) is None  # below 256 tokens
    (tmp_path / "kv").mkdir()
    os.chmod(tmp_path / "kv", 0o500)  # read-only folder (root ignores modes: then the write works)
    try:
        cold.write(snap(2), FACTS)
    finally:
        os.chmod(tmp_path / "kv", 0o700)
    assert cold.stats.write_errors + cold.stats.written == 1


def test_foreign_facts_are_rejected_and_deleted(tmp_path):
    cold = ColdTier(tmp_path, budget_bytes=10**9)
    path = cold.write(snap(3), FACTS)
    assert cold.peek(3, "m.gguf:1", FACTS, list(range(400))) == 300
    assert cold.peek(3, "m.gguf:1", FACTS, [0, 1, 2, 99]) == 3
    assert cold.load(3, "m.gguf:1", FACTS | {"n_ctx": 4096}) is None and not path.exists()
    assert cold.stats.rejected == {"different model, context or version": 1}


WRITER = """
import sys
from engine.kv.tiers import ColdTier, Snapshot
cold = ColdTier(sys.argv[1], budget_bytes=10**10)
i = 0
while True:
    cold.write(Snapshot("m.gguf:1", 7, list(range(300 + i % 2)), bytearray([i % 2]) * 4_000_000), {"n": 1})
    i += 1
"""


def test_kill_9_during_writes_never_leaves_a_loadable_half_file(tmp_path):
    for attempt in range(6):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=os.getcwd())
        time.sleep(0.4 + 0.13 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        cold = ColdTier(tmp_path, budget_bytes=10**10)
        got = cold.load(7, "m.gguf:1", {"n": 1})
        if got is not None:  # whatever is there is one whole write, never a mix
            k = len(got.tokens) - 300
            assert got.tokens == list(range(300 + k)) and got.data == bytearray([k]) * 4_000_000
        assert not cold.stats.rejected  # the rename is atomic: the final name never holds half a file
        assert all(not p.name.endswith(".kvs") for p in tmp_path.glob(".*"))  # temp files stay hidden


def test_warm_lru_moves_the_oldest_to_the_evict_hook():
    evicted = []
    warm = WarmTier(budget_bytes=250_000, on_evict=evicted.append)
    for cid in range(3):
        warm.put(snap(cid))
    assert [s.conversation_id for s in evicted] == [0] and warm.nbytes <= 250_000
    found, n = warm.best("m.gguf:1", 2, list(range(300)) + [5])
    assert n == 300 and found.conversation_id in (1, 2)
    assert warm.best("other:1", 2, list(range(300))) is None
