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
    # Distinct mtimes in write order, set rather than slept for: a file system's clock ticks in
    # jiffies (4 ms, 10 ms), and a write that lands in the same tick as the one before ties with it.
    # All in the past, so the file each write just made is the newest when that write prunes.
    past = time.time_ns() - 10**12
    for cid in range(50):
        path = cold.write(snap(cid, fill=cid), FACTS)
        assert path is not None
        os.utime(path, ns=(past + cid * 10**9, past + cid * 10**9))  # LRU order is write order
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
import os, sys, time
from engine.kv.tiers import ColdTier, Snapshot
folder, pause_at = sys.argv[1], int(sys.argv[2])
cold = ColdTier(folder, budget_bytes=10**10)
fsync, i = os.fsync, 0

def fsync_then_maybe_pause(fd):  # write `pause_at` stops with its temp file complete, not yet renamed
    fsync(fd)
    if i == pause_at:
        print("paused", flush=True)
        time.sleep(60)

os.fsync = fsync_then_maybe_pause
while True:
    print("writing", i, flush=True)
    cold.write(Snapshot("m.gguf:1", 7, list(range(300 + i % 2)), bytearray([i % 2]) * 4_000_000), {"n": 1})
    print("wrote", i, flush=True)
    i += 1
"""


def kill_writer(folder, pause_at: int, after) -> None:
    """Run WRITER into `folder`; SIGKILL it once `after(line)` is true for a line it printed."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(folder), str(pause_at)], cwd=os.getcwd(),
                            stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if after(line.split()):
                break
        else:
            raise AssertionError(f"the writer ended on its own (exit {proc.wait()})")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()


def whole_write(folder) -> int | None:
    """Which write the file that loads holds (None: no file); never a mix of two."""
    cold = ColdTier(folder, budget_bytes=10**10)
    got = cold.load(7, "m.gguf:1", {"n": 1})
    assert not cold.stats.rejected  # the rename is atomic: the final name never holds half a file
    if got is None:
        return None
    k = len(got.tokens) - 300
    assert got.tokens == list(range(300 + k)) and got.data == bytearray([k]) * 4_000_000
    return k


def test_kill_9_before_the_rename_leaves_the_previous_whole_file(tmp_path):
    for pause_at in (1, 2):  # after 1, 2 whole writes, the next one is killed before its rename
        folder = tmp_path / str(pause_at)
        kill_writer(folder, pause_at, lambda words: words == ["paused"])
        assert whole_write(folder) == (pause_at - 1) % 2  # the last renamed write, whole
        temps = [p for p in folder.iterdir() if not p.name.endswith(".kvs")]
        assert len(temps) == 1 and temps[0].name.startswith(".")  # the complete temp file stays hidden
        assert temps[0].stat().st_size > 4_000_000


def test_kill_9_during_writes_never_leaves_a_loadable_half_file(tmp_path):
    for attempt in range(3):
        folder = tmp_path / str(attempt)

        def second_write_started(words, delay=0.005 * attempt) -> bool:
            # Killed while a later write is under way (one whole write is on disk by then), a
            # little further into it each attempt.
            if words[:1] == ["writing"] and int(words[1]) >= 1:
                time.sleep(delay)
                return True
            return False

        kill_writer(folder, -1, second_write_started)
        assert whole_write(folder) in (0, 1)  # a file is there, one whole write, never a mix
        assert all(p.name.startswith(".") for p in folder.iterdir() if not p.name.endswith(".kvs"))


def test_warm_lru_moves_the_oldest_to_the_evict_hook():
    evicted = []
    warm = WarmTier(budget_bytes=250_000, on_evict=evicted.append)
    for cid in range(3):
        warm.put(snap(cid))
    assert [s.conversation_id for s in evicted] == [0] and warm.nbytes <= 250_000
    found, n = warm.best("m.gguf:1", 2, list(range(300)) + [5])
    assert n == 300 and found.conversation_id in (1, 2)
    assert warm.best("other:1", 2, list(range(300))) is None


def test_file_names_are_made_and_read_in_one_place():
    from engine.kv.cold import file_name, model_tag, parse_file_name

    name = file_name(42, "m.gguf:1")
    assert parse_file_name(name) == (42, model_tag("m.gguf:1"))
    for other in ("copy.kvs", "c42-.kvs", "cx-0123456789ab.kvs", f".{name}.1.2.tmp", name + ".bak"):
        assert parse_file_name(other) is None, other


def test_stats_lists_the_cold_tiers_files_and_skips_other_files_in_its_folder(capsys):
    """`assistant stats` reads names with the cold tier's own parser: a user's `copy.kvs` beside
    the snapshots (the folder's glob is c*.kvs) is left out, where it was an internal error."""
    import json

    from engine.api import user_dir
    from engine.cli.main import main

    cold = ColdTier(user_dir() / "kv", budget_bytes=10**9)
    path = cold.write(snap(7), FACTS)
    (path.parent / "copy.kvs").write_bytes(path.read_bytes())
    assert main(["stats", "--json"]) == 0
    kv = json.loads(capsys.readouterr().out)["kv"]
    assert [(f["file"], f["conversation_id"], f["tokens"], f["pages"]) for f in kv["cold_files"]] == [
        (path.name, 7, 300, 2)]
    assert kv["cold_bytes"] == path.stat().st_size and kv["page_tokens"] == 256
