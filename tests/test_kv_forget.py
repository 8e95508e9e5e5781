"""A deleted conversation never comes back as a cold KV file: not from a snapshot queued for the
writer thread before the delete, nor from one the writer was already busy with. (Synthetic
snapshots: the file layer does not look inside llama.cpp's state.)"""

import threading

import pytest

from engine.kv.tiers import KVTiers, Snapshot

IDENT = "m.gguf:1"
FACTS = {"model_name": "m.gguf", "n_ctx": 2048}


def snap(cid: int) -> Snapshot:
    return Snapshot(IDENT, cid, list(range(300)), bytearray([cid % 256]) * 50_000)


@pytest.fixture
def tiers(tmp_path):
    # A zero RAM budget: every snapshot put in the warm tier goes straight to the writer's queue.
    kv = KVTiers(tmp_path / "kv", warm_budget_bytes=0, cold_budget_bytes=10**9)
    kv._facts[IDENT] = FACTS  # what prepare() records for a loaded model (no model here)
    yield kv
    kv.close()


def gate_writer(kv: KVTiers) -> tuple[threading.Event, threading.Event]:
    """Hold the writer thread at the start of each cold write until `release` is set; `entered` is
    set once it is there (the snapshot is off the queue: a write in progress)."""
    entered, release = threading.Event(), threading.Event()
    real = kv.cold.write

    def write(*args, **kwargs):
        entered.set()
        assert release.wait(10), "the test never released the writer"
        return real(*args, **kwargs)

    kv.cold.write = write
    return entered, release


def files_of(kv: KVTiers, cid: int) -> list:
    return sorted(p.name for p in kv.cold.folder.glob("*") if p.name.lstrip(".").startswith(f"c{cid}-"))


def test_forget_cancels_snapshots_queued_for_the_writer(tiers):
    entered, release = gate_writer(tiers)
    tiers.warm.put(snap(1))  # the writer takes this one and waits
    assert entered.wait(10)
    tiers.warm.put(snap(2))  # queued behind it
    tiers.forget(2)
    release.set()
    tiers.flush()
    assert files_of(tiers, 1) and files_of(tiers, 2) == []


def test_forget_during_a_write_leaves_no_file(tiers):
    entered, release = gate_writer(tiers)
    tiers.warm.put(snap(3))
    assert entered.wait(10)  # the writer holds conversation 3's snapshot
    tiers.forget(3)
    release.set()
    tiers.flush()
    assert files_of(tiers, 3) == []  # neither the file nor its temp file


def test_a_snapshot_parked_after_the_delete_is_not_written(tmp_path):
    kv = KVTiers(tmp_path / "kv", warm_budget_bytes=10**9, cold_budget_bytes=10**9)
    kv._facts[IDENT] = FACTS
    kv.warm.put(snap(5))
    kv.forget(4)
    kv.warm.put(snap(4))  # the model thread parks the context's conversation, deleted meanwhile
    kv.close()  # every warm snapshot goes to disk at exit, the deleted one excepted
    assert files_of(kv, 4) == [] and files_of(kv, 5)


class _Context:
    """A model's context as `park` sees it; copying its state waits until the test says go."""

    identity = IDENT

    def __init__(self, tokens: list[int]):
        self.kv_tokens = tokens
        self.copying, self.go = threading.Event(), threading.Event()

    def save_sequence(self):
        self.copying.set()
        assert self.go.wait(10), "the test never let the copy finish"
        return bytearray(50_000), list(self.kv_tokens)


def test_a_park_racing_the_delete_leaves_no_snapshot_in_ram(tmp_path):
    kv = KVTiers(tmp_path / "kv", warm_budget_bytes=10**9, cold_budget_bytes=10**9)
    kv._facts[IDENT] = FACTS
    context = _Context(list(range(300)))
    kv.hot[IDENT] = 6  # in the context; the model is being unloaded, so its thread parks it
    parking = threading.Thread(target=kv.release, args=(context,))
    parking.start()
    assert context.copying.wait(10)
    kv.forget(6)  # the API server deletes the conversation while its state is being copied
    context.go.set()
    parking.join(10)
    assert [s.conversation_id for s in kv.warm.entries()] == []  # not kept in RAM until the budget evicts it
    kv.close()
    assert files_of(kv, 6) == []
