"""The memory tests' stand-ins: a deterministic embedding model (no torch) and services on both
vector paths (tests/test_memory_store.py, tests/test_hybrid_index.py)."""

import threading
import zlib

import numpy as np
import pytest

import engine.memory.embedder as embedder_mod
from engine.memory import Embedder, MemoryService
from engine.storage import Database

DIM = 384
BACKENDS = {"sqlite-vec": "sqlean", "numpy": "sqlite3"}  # numpy runs on the stdlib driver: the real fallback


def unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v)


def axis(*weights):
    """A unit vector with the given leading components."""
    v = np.zeros(DIM, dtype=np.float32)
    v[:len(weights)] = weights
    return unit(v)


class FakeModel:
    """Stand-in for a SentenceTransformer: vectors from `table`, else hashed character trigrams."""

    max_seq_length = 256  # as all-MiniLM-L6-v2's: the embedder cuts texts by it

    def __init__(self):
        self.table: dict[str, np.ndarray] = {}
        self.gate = threading.Event()
        self.gate.set()
        self.encoded = 0
        self.threads: set[str] = set()  # names of the threads that ran an encode
        self.hold: threading.Event | None = None  # set by a test: the next encode waits for it
        self.order: list[str] = []  # first text of each encode, in the order they ran

    def get_embedding_dimension(self):
        return DIM

    def encode(self, texts, **kwargs):
        self.threads.add(threading.current_thread().name)
        self.order.append(texts[0])
        if self.hold is not None:
            hold, self.hold = self.hold, None
            assert hold.wait(20)
        self.encoded += len(texts)
        return np.stack([self.table[t] if t in self.table else self._hashed(t) for t in texts])

    @staticmethod
    def _hashed(text):
        v = np.zeros(DIM, dtype=np.float32)
        t = f"  {text.casefold()}  "
        for i in range(len(t) - 2):
            h = zlib.crc32(t[i:i + 3].encode())
            v[h % DIM] += 1.0 if h & 0x80000000 else -1.0
        return v if v.any() else np.ones(DIM, dtype=np.float32)


@pytest.fixture
def fake_model(monkeypatch):
    model = FakeModel()

    def load(path, device, threads):
        assert model.gate.wait(20), "test never released the loader"
        return model

    monkeypatch.setattr(embedder_mod, "_load_sentence_transformer", load)
    return model


def open_service(path, backend, **kw) -> MemoryService:
    return MemoryService(Database(path, driver=BACKENDS[backend]), Embedder(runtime="torch"), vector_backend=backend, **kw)


@pytest.fixture(params=list(BACKENDS))
def service(request, tmp_path, fake_model):
    svc = open_service(tmp_path / "m.db", request.param).start()
    assert svc.embedder.wait(20)
    yield svc
    svc.close()
    svc.db.close()


def conversation_with(db, *texts):
    cid = db.create_conversation()
    return cid, [db.add_message(cid, "user" if i % 2 == 0 else "assistant", t) for i, t in enumerate(texts)]


# ---- the database paths
