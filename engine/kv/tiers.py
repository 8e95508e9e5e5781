"""Where each conversation's KV state lives: hot (the live context), warm (RAM), cold (disk).

Switching chats, a model swap or a restart would otherwise re-evaluate a whole history. When a
turn's prompt is not what the context holds, `KVTiers.prepare` (on the model's own thread) puts
the context's conversation into the warm tier (one copy of llama.cpp's per-sequence state) and
restores the best snapshot of the new one — warm first, then its cold file — so the turn
evaluates only what the snapshot does not cover. Warm snapshots evicted by the RAM budget, and
the hot states at exit, are written to cold files by a background thread (atomic, checked,
disk-budgeted); nothing on disk is ever trusted without its header matching this model and
context and its checksum matching the bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import struct
import threading
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from engine.inference.backend import LLAMA_CPP_VERSION, Backend

log = logging.getLogger(__name__)

PAGE_TOKENS = 256        # accounting unit (the seed article's PagedKVCache page)
MIN_COLD_TOKENS = 256    # a shorter chat re-evaluates faster than a file round trip is worth
MIN_WARM_TOKENS = 32
MAGIC = b"OAKV"
FORMAT = 1
_HEAD = struct.Struct("<4sI")  # magic, header length


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def tokens_digest(tokens: list[int]) -> str:
    return hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()


@dataclass
class Snapshot:
    """One conversation's KV state for one model: its token ids and llama.cpp's sequence state."""

    identity: str
    conversation_id: int | None
    tokens: list[int]
    data: bytearray

    @property
    def nbytes(self) -> int:
        return len(self.data) + 4 * len(self.tokens)


def take_snapshot(backend: Backend, conversation_id: int | None) -> Snapshot:
    """The context's sequence state as a snapshot (model thread)."""
    data, tokens = backend.save_sequence()
    return Snapshot(backend.identity, conversation_id, tokens, data)


@dataclass
class Restore:
    """What `prepare` did for a turn (for `done.stats`)."""

    restored_from: str | None  # "hot" | "warm" | "cold" | None (nothing reusable)
    restore_ms: float = 0.0  # finding, reading, checking and loading the state
    tokens: int = 0  # prompt tokens the restored state covered
    park_ms: float = 0.0  # copying the leaving conversation's state to RAM (before the restore)


def cache_facts(backend: Backend) -> dict:
    """What a snapshot must match to be loaded into this context."""
    stat = backend.path.stat()
    with open(backend.path, "rb") as f:
        head = hashlib.sha256(f.read(1 << 20)).hexdigest()  # the GGUF header + metadata region
    p = backend.params
    return {"model_name": backend.path.name, "model_size": stat.st_size, "model_mtime_ns": stat.st_mtime_ns,
            "model_head_sha256": head, "llama_cpp": LLAMA_CPP_VERSION, "n_ctx": backend.n_ctx,
            "type_k": p.type_k, "type_v": p.type_v, "swa_full": p.swa_full, "flash_attn": p.flash_attn}


class WarmTier:
    """A RAM LRU of snapshots, byte-budgeted; what it evicts goes to `on_evict` (the cold tier)."""

    def __init__(self, budget_bytes: int, on_evict=None):
        self.budget_bytes = budget_bytes
        self.on_evict = on_evict
        self._items: OrderedDict[tuple[str, int | None], Snapshot] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._items.values())

    def put(self, snap: Snapshot) -> None:
        evicted = []
        with self._lock:
            key = (snap.identity, snap.conversation_id)
            self._items.pop(key, None)
            if snap.nbytes <= self.budget_bytes:
                self._items[key] = snap
            else:
                evicted.append(snap)
            total = sum(s.nbytes for s in self._items.values())
            while total > self.budget_bytes and self._items:
                _, old = self._items.popitem(last=False)
                total -= old.nbytes
                evicted.append(old)
        for old in evicted:
            if self.on_evict:
                self.on_evict(old)

    def best(self, identity: str, conversation_id: int | None, prompt: list[int]) -> tuple[Snapshot, int] | None:
        """The snapshot of this model covering the longest prefix of `prompt` (the conversation's
        own first on ties), with that length; None when none covers a token."""
        with self._lock:
            found, best = None, 0
            for (ident, cid), snap in self._items.items():
                if ident != identity:
                    continue
                n = common_prefix(snap.tokens, prompt)
                if n > best or (n == best and n and cid == conversation_id):
                    found, best = snap, n
            return (found, best) if found is not None else None

    def holds(self, identity: str, conversation_id: int | None, tokens: list[int]) -> bool:
        """True when the warm tier already has exactly this state."""
        with self._lock:
            snap = self._items.get((identity, conversation_id))
            return snap is not None and snap.tokens == tokens

    def take(self, snap: Snapshot) -> None:
        """Remove a snapshot that moved to the hot tier."""
        with self._lock:
            key = (snap.identity, snap.conversation_id)
            if self._items.get(key) is snap:
                del self._items[key]

    def drain(self) -> list[Snapshot]:
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
            return items

    def entries(self) -> list[Snapshot]:
        with self._lock:
            return list(self._items.values())


@dataclass
class ColdStats:
    written: int = 0
    loaded: int = 0
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> count
    pruned: int = 0
    write_errors: int = 0


class ColdTier:
    """One snapshot file per (conversation, model) in `folder`, LRU-pruned to `budget_bytes`.

    File: MAGIC, header length, JSON header (facts, token count and digest, payload length and
    CRC-32), then the payload: int32 token ids followed by llama.cpp's sequence state.
    """

    def __init__(self, folder: Path, budget_bytes: int, min_tokens: int = MIN_COLD_TOKENS):
        self.folder = Path(folder)
        self.budget_bytes = budget_bytes
        self.min_tokens = min_tokens
        self.stats = ColdStats()
        self._lock = threading.Lock()  # one writer or pruner at a time
        self._counts: dict[str, tuple[float, int]] = {}  # file name -> (mtime, n_tokens) from headers

    def path(self, conversation_id: int, identity: str) -> Path:
        tag = hashlib.sha1(identity.encode()).hexdigest()[:12]
        return self.folder / f"c{conversation_id}-{tag}.kvs"

    def write(self, snap: Snapshot, facts: dict) -> Path | None:
        """Write atomically (temp file, fsync, rename); None when the chat is too short to keep."""
        if snap.conversation_id is None or len(snap.tokens) < self.min_tokens:
            return None
        payload_tokens = struct.pack(f"<{len(snap.tokens)}i", *snap.tokens)
        crc = zlib.crc32(snap.data, zlib.crc32(payload_tokens))
        header = json.dumps({"format": FORMAT, "identity": snap.identity, "conversation_id": snap.conversation_id,
                             "facts": facts, "n_tokens": len(snap.tokens), "tokens_sha256": tokens_digest(snap.tokens),
                             "payload_bytes": len(payload_tokens) + len(snap.data), "crc32": crc}).encode()
        path = self.path(snap.conversation_id, snap.identity)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with self._lock:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                with open(tmp, "wb") as f:
                    f.write(_HEAD.pack(MAGIC, len(header)))
                    f.write(header)
                    f.write(payload_tokens)
                    f.write(snap.data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                self.stats.written += 1
            except OSError as exc:  # disk full, read-only: the snapshot is only a cache
                self.stats.write_errors += 1
                log.warning("could not write KV snapshot %s: %s", path.name, exc)
                tmp.unlink(missing_ok=True)
                return None
            self._prune_locked()
        return path

    def _reject(self, path: Path, reason: str) -> None:
        self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1
        log.info("KV snapshot %s rejected (%s); it is deleted and the history re-evaluated", path.name, reason)
        try:
            path.unlink()
        except OSError:
            pass

    def _read_header(self, f) -> dict:
        magic, n = _HEAD.unpack(f.read(_HEAD.size))
        if magic != MAGIC or n > 1 << 20:
            raise ValueError("not a snapshot file")
        return json.loads(f.read(n))

    def _matches(self, path: Path, header: dict, identity: str, facts: dict) -> bool:
        """True when the file was written for this model, context and format; else it is rejected."""
        if header.get("format") == FORMAT and header.get("facts") == facts and header.get("identity") == identity:
            return True
        self._reject(path, "different model, context or version")
        return False

    def peek(self, conversation_id: int, identity: str, facts: dict, prompt: list[int]) -> int:
        """How many prompt tokens this conversation's file would cover (0: none, or unusable)."""
        path = self.path(conversation_id, identity)
        try:
            with open(path, "rb") as f:
                header = self._read_header(f)
                if not self._matches(path, header, identity, facts):
                    return 0
                n = int(header["n_tokens"])
                raw = f.read(4 * n)
        except FileNotFoundError:
            return 0
        except (OSError, ValueError, KeyError, struct.error) as exc:
            self._reject(path, f"unreadable header ({type(exc).__name__})")
            return 0
        if len(raw) != 4 * n:
            self._reject(path, "truncated")
            return 0
        return common_prefix(list(struct.unpack(f"<{n}i", raw)), prompt)

    def load(self, conversation_id: int, identity: str, facts: dict) -> Snapshot | None:
        """The verified snapshot, or None (missing; anything wrong → deleted and counted)."""
        path = self.path(conversation_id, identity)
        try:
            with open(path, "rb") as f:
                header = self._read_header(f)
                if not self._matches(path, header, identity, facts):
                    return None
                n, size = int(header["n_tokens"]), int(header["payload_bytes"])
                payload = bytearray(size)
                got = f.readinto(payload)
                extra = f.read(1)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, struct.error) as exc:
            self._reject(path, f"unreadable ({type(exc).__name__})")
            return None
        if got != size or extra:
            self._reject(path, "truncated" if got != size else "trailing bytes")
            return None
        if zlib.crc32(payload) != header["crc32"]:
            self._reject(path, "checksum mismatch")
            return None
        view = memoryview(payload)
        tokens = list(struct.unpack(f"<{n}i", view[:4 * n]))
        if tokens_digest(tokens) != header["tokens_sha256"]:
            self._reject(path, "token digest mismatch")
            return None
        del view
        del payload[:4 * n]  # the state stays in the same buffer: restored without another copy
        os.utime(path)  # LRU by mtime
        self.stats.loaded += 1
        return Snapshot(identity, conversation_id, tokens, payload)

    def token_count(self, path: Path, mtime: float) -> int | None:
        """Tokens a file holds, from its header (cached per mtime); None if unreadable."""
        cached = self._counts.get(path.name)
        if cached and cached[0] == mtime:
            return cached[1]
        try:
            with open(path, "rb") as f:
                n = int(self._read_header(f)["n_tokens"])
        except (OSError, ValueError, KeyError, struct.error):
            return None
        self._counts[path.name] = (mtime, n)
        return n

    def files(self) -> list[tuple[Path, int, float]]:
        out = []
        try:
            for p in self.folder.glob("c*.kvs"):
                try:
                    st = p.stat()
                    out.append((p, st.st_size, st.st_mtime))
                except OSError:
                    pass
        except OSError:
            pass
        return out

    def prune(self) -> None:
        with self._lock:
            self._prune_locked()

    def _prune_locked(self) -> None:
        files = sorted(self.files(), key=lambda t: t[2])  # oldest first
        total = sum(size for _, size, _ in files)
        for path, size, _ in files:
            if total <= self.budget_bytes:
                break
            try:
                path.unlink()
                total -= size
                self.stats.pruned += 1
            except OSError:
                pass
        for stale in self.folder.glob(".c*.tmp"):  # a writer killed mid-write: never loaded, removed
            try:
                if time.time() - stale.stat().st_mtime > 60:
                    stale.unlink()
            except OSError:
                pass


class KVTiers:
    """The hot/warm/cold tiers for every loaded model, shared by the facade's turns.

    Args:
        folder: where cold files go (the app data dir's `kv/`).
        warm_budget_bytes, cold_budget_bytes: RAM and disk budgets.
    """

    def __init__(self, folder: Path, warm_budget_bytes: int, cold_budget_bytes: int,
                 min_cold_tokens: int = MIN_COLD_TOKENS):
        self.cold = ColdTier(folder, cold_budget_bytes, min_cold_tokens)
        self.warm = WarmTier(warm_budget_bytes, on_evict=self._to_cold_later)
        self.hot: dict[str, int | None] = {}  # backend identity -> conversation in its context
        self._facts: dict[str, dict] = {}     # backend identity -> cache_facts
        self._writes: queue.Queue = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="kv-cold-writer", daemon=True)
        self._writer.start()

    def facts(self, backend: Backend) -> dict:
        facts = self._facts.get(backend.identity)
        if facts is None:
            facts = self._facts[backend.identity] = cache_facts(backend)
        return facts

    # ---- the model thread
    def prepare(self, backend: Backend, conversation_id: int, prompt: list[int]) -> Restore:
        """Make the context hold the longest available prefix of `prompt`; call on the model's
        thread right before prefill."""
        ident = backend.identity
        hot = self.hot.get(ident)
        kv = backend.kv_tokens
        common = common_prefix(kv, prompt)
        if hot == conversation_id and common:
            return Restore("hot", 0.0, common)
        t0 = time.perf_counter()
        facts = self.facts(backend)
        source, snap, usable = None, None, common
        found = self.warm.best(ident, conversation_id, prompt)
        if found and found[1] > usable:
            snap, usable = found
            source = "warm"
        cold_n = self.cold.peek(conversation_id, ident, facts, prompt)
        if cold_n > usable:
            loaded = self.cold.load(conversation_id, ident, facts)
            if loaded is not None:
                snap, usable, source = loaded, min(cold_n, common_prefix(loaded.tokens, prompt)), "cold"
        leaving = hot is not None and hot != conversation_id and len(kv) >= MIN_WARM_TOKENS
        park_ms = 0.0
        if leaving and (source is not None or common < len(kv)) and not self.warm.holds(ident, hot, kv):
            # Not parked after its last turn (the usual case parks then, off this path): copy it now.
            t_park = time.perf_counter()
            self.warm.put(take_snapshot(backend, hot))  # one memcpy; its disk write, if any, is queued
            park_ms = (time.perf_counter() - t_park) * 1000
        if snap is not None:
            if source == "warm" and snap.conversation_id == conversation_id:
                self.warm.take(snap)  # it moves to the hot tier (another chat's shared prefix stays parked)
            if not backend.restore_sequence((snap.data, snap.tokens)) or not backend.keep_prefix(
                    min(usable, len(prompt) - 1)):
                log.info("restoring %s KV state failed; re-evaluating", source)
                backend.reset()
                source, usable = None, 0
        self.hot[ident] = conversation_id
        ms = (time.perf_counter() - t0) * 1000 - park_ms
        return Restore(source, ms if source else 0.0, usable if source else 0, park_ms)

    def park(self, backend: Backend, conversation_id: int) -> None:
        """After a turn, while the model is idle (a background job on its thread): copy the
        context's conversation to the warm tier, so a later switch only restores."""
        if self.hot.get(backend.identity) != conversation_id:
            return
        kv = backend.kv_tokens
        if len(kv) >= MIN_WARM_TOKENS and not self.warm.holds(backend.identity, conversation_id, kv):
            self.facts(backend)
            self.warm.put(take_snapshot(backend, conversation_id))

    def release(self, backend: Backend) -> None:
        """The model is being unloaded (evicted, or the app exits): its conversation's state moves
        to the warm tier, and from there to cold (model thread)."""
        cid = self.hot.pop(backend.identity, None)
        kv = backend.kv_tokens
        if cid is not None and len(kv) >= MIN_WARM_TOKENS and not self.warm.holds(backend.identity, cid, kv):
            self.facts(backend)
            self.warm.put(take_snapshot(backend, cid))

    def forget(self, conversation_id: int) -> None:
        """A deleted conversation: drop its warm snapshots and cold files (its hot state is
        simply overwritten by the next turn)."""
        for snap in self.warm.entries():
            if snap.conversation_id == conversation_id:
                self.warm.take(snap)
        for ident, cid in list(self.hot.items()):
            if cid == conversation_id:
                self.hot[ident] = None
        for path in self.cold.folder.glob(f"c{conversation_id}-*.kvs"):
            path.unlink(missing_ok=True)

    # ---- background writes
    def _to_cold_later(self, snap: Snapshot) -> None:
        self._writes.put(snap)

    def _write_loop(self) -> None:
        while True:
            snap = self._writes.get()
            if snap is None:
                self._writes.task_done()
                return
            try:
                facts = self._facts.get(snap.identity)
                if facts is not None:
                    self.cold.write(snap, facts)
            except Exception:  # noqa: BLE001 - a cache write must never take the app down
                log.exception("writing a KV snapshot failed")
            finally:
                self._writes.task_done()

    def flush(self) -> None:
        """Wait until queued cold writes are done."""
        self._writes.join()

    def close(self) -> None:
        """Write every warm snapshot to cold and stop the writer (after the models were released)."""
        for snap in self.warm.drain():
            self._writes.put(snap)
        self._writes.put(None)
        self._writer.join()

    # ---- accounting
    def pages(self, backends: list[tuple[Backend, int]]) -> dict:
        """KV use in PAGE_TOKENS pages per model: capacity and use of the live context, and what
        each conversation holds hot, warm and cold. `backends`: (backend, planned bytes per token)."""
        out = {}
        cold_files = {p.name: (size, self.cold.token_count(p, mtime)) for p, size, mtime in self.cold.files()}
        for backend, per_token in backends:
            ident = backend.identity
            page_bytes = PAGE_TOKENS * per_token
            convs: dict[str, dict] = {}

            def add(cid, tier, n_tokens, nbytes):
                entry = convs.setdefault(str(cid), {"hot": 0, "warm": 0, "cold": 0, "bytes": {}})
                entry[tier] += -(-n_tokens // PAGE_TOKENS)
                entry["bytes"][tier] = nbytes

            n_kv = len(backend.kv_tokens)
            hot = self.hot.get(ident)
            if hot is not None and n_kv:
                add(hot, "hot", n_kv, n_kv * per_token)
            for snap in self.warm.entries():
                if snap.identity == ident:
                    add(snap.conversation_id, "warm", len(snap.tokens), snap.nbytes)
            tag = hashlib.sha1(ident.encode()).hexdigest()[:12]
            for name, (size, n_tokens) in cold_files.items():
                if name.endswith(f"-{tag}.kvs") and n_tokens is not None:
                    add(name[1:name.index("-")], "cold", n_tokens, size)
            out[ident] = {"page_tokens": PAGE_TOKENS, "page_bytes": page_bytes, "bytes_per_token": per_token,
                          "capacity": backend.n_ctx // PAGE_TOKENS, "used": -(-n_kv // PAGE_TOKENS),
                          "free": backend.n_ctx // PAGE_TOKENS - -(-n_kv // PAGE_TOKENS),
                          "conversations": convs}
        out["_tiers"] = {"warm_bytes": self.warm.nbytes, "warm_budget_bytes": self.warm.budget_bytes,
                         "cold_bytes": sum(size for size, _ in cold_files.values()), "cold_budget_bytes": self.cold.budget_bytes,
                         "cold": {"written": self.cold.stats.written, "loaded": self.cold.stats.loaded,
                                  "rejected": dict(self.cold.stats.rejected), "pruned": self.cold.stats.pruned,
                                  "write_errors": self.cold.stats.write_errors}}
        return out
