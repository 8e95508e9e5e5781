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

import logging
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from engine.inference.backend import Backend
from engine.kv.allocator import pin_mmap_threshold
from engine.kv.cold import MAGIC, MIN_COLD_TOKENS, ColdStats, ColdTier, model_tag, parse_file_name
from engine.kv.id_ranges import IdRanges
from engine.kv.snapshot import (WINDOW_DOMAIN, Snapshot, cache_facts, common_prefix, take_snapshot,
                                tokens_digest)
from engine.kv.warm import WarmTier

# Re-exported: callers import the tiers' public names from here.
__all__ = ["KVTiers", "ColdTier", "ColdStats", "WarmTier", "Snapshot", "Restore", "PAGE_TOKENS", "MAGIC",
           "WINDOW_DOMAIN", "MIN_COLD_TOKENS", "MIN_WARM_TOKENS", "cache_facts", "common_prefix", "take_snapshot",
           "tokens_digest"]

log = logging.getLogger(__name__)

PAGE_TOKENS = 256        # accounting unit (the seed article's PagedKVCache page)
MIN_WARM_TOKENS = 32


class KVHolder(Protocol):
    """A context, or the view of it its thread published: whose KV state, and its tokens."""

    @property
    def identity(self) -> str: ...

    @property
    def kv_tokens(self) -> Sequence[int]: ...


@dataclass
class Restore:
    """What `prepare` did for a turn (for `done.stats`)."""

    restored_from: str | None  # "hot" | "warm" | "cold" | None (nothing reusable)
    restore_ms: float = 0.0  # finding, reading, checking and loading the state
    tokens: int = 0  # prompt tokens the restored state covered
    park_ms: float = 0.0  # copying the leaving conversation's state to RAM (before the restore)



def _idle_priority() -> None:
    """The cold writer takes the CPU only when no other thread wants it (Linux SCHED_IDLE). A
    checkpoint written beside the next answer (230 MB at 8k tokens on a 1.5B model: CRC, copy,
    fsync) took a core from ggml's decode threads, which wait on each other: that answer decoded at
    0.79-0.83x bare llama.cpp until the write was done, 1.0x once it was (docs/benchmarks.md). At
    exit and between tokens nothing else runs, so the write still goes through."""
    if not sys.platform.startswith("linux") or not hasattr(os, "sched_setscheduler"):
        return
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))
    except OSError as exc:
        log.debug("the cold writer keeps its priority: %s", exc)

class KVTiers:
    """The hot/warm/cold tiers for every loaded model, shared by the Assistant's turns.

    Args:
        folder: where cold files go (the app data dir's `kv/`).
        warm_budget_bytes, cold_budget_bytes: RAM and disk budgets.
    """

    def __init__(self, folder: Path, warm_budget_bytes: int, cold_budget_bytes: int,
                 min_cold_tokens: int = MIN_COLD_TOKENS, checkpoint: bool = True):
        pin_mmap_threshold()  # snapshots are MB-sized and short-lived: freed ones go back to the OS
        self.cold = ColdTier(folder, cold_budget_bytes, min_cold_tokens)
        self.warm = WarmTier(warm_budget_bytes, on_evict=self._to_cold_later)
        self.hot: dict[str, int | None] = {}  # backend identity -> conversation in its context
        # backend identity -> trust domain of the turns that made its context (None: unknown)
        self.hot_domain: dict[str, str | None] = {}
        self._facts: dict[str, dict] = {}     # backend identity -> cache_facts
        # Deleted conversations: never written to disk again (their ids are never handed out again:
        # migration 0008_autoincrement_ids). Runs of ids, not a set: a server deletes one per request.
        self._forgotten = IdRanges()
        self.exiting = False  # set by the engine's close(): models unload for good
        self.checkpoints = checkpoint  # `checkpoint` after turns (else disk only on eviction and exit)
        self._writes: queue.Queue = queue.Queue()
        self._writer = threading.Thread(target=self._write_loop, name="kv-cold-writer", daemon=True)
        self._writer.start()

    def facts(self, backend: Backend) -> dict:
        facts = self._facts.get(backend.identity)
        if facts is None:
            facts = self._facts[backend.identity] = cache_facts(backend)
        return facts

    # ---- the model thread
    def prepare(self, backend: Backend, conversation_id: int, prompt: list[int],
                domain: str = WINDOW_DOMAIN) -> Restore:
        """Make the context hold the longest available prefix of `prompt`; call on the model's
        thread right before prefill. Another conversation's state (the context's or a warm
        snapshot) serves only a turn of its own trust `domain`: its shared prefix would show in
        the turn's cached tokens and speed (a client guessing another's PIN digit by digit)."""
        ident = backend.identity
        hot = self.hot.get(ident)
        kv = backend.kv_tokens
        shares = self.shares(ident, conversation_id, domain)
        common = common_prefix(kv, prompt) if shares else 0
        if hot == conversation_id and common:
            self.hot_domain[ident] = domain
            return Restore("hot", 0.0, common)
        t0 = time.perf_counter()
        facts = self.facts(backend)
        source, snap, usable = None, None, common
        found = self.warm.best(ident, conversation_id, prompt, domain)
        if found and found[1] > usable:
            snap, usable = found
            source = "warm"
        cold_n = self.cold.peek(conversation_id, ident, facts, prompt)
        if cold_n > usable:
            loaded = self.cold.load(conversation_id, ident, facts)
            if loaded is not None:
                snap, usable, source = loaded, min(cold_n, common_prefix(loaded.tokens, prompt)), "cold"
        leaving = (hot is not None and hot != conversation_id and len(kv) >= MIN_WARM_TOKENS
                   and self._wanted(hot))
        park_ms = 0.0
        if leaving and (source is not None or common < len(kv)) and not self.warm.holds(ident, hot, kv):
            # A chat is parked in RAM when it leaves the context, not after each of its turns: a
            # copy kept after every turn held the whole state twice (230 MB at 8k tokens on a 1.5B
            # model; issue 25), to save a switch this one copy. (After a turn it is checkpointed
            # to its cold file instead, and that copy is freed once written.)
            t_park = time.perf_counter()
            # One memcpy; its disk write, if any, is queued. An unknown domain ("") serves no other chat.
            self._put_warm(take_snapshot(backend, hot, self.hot_domain.get(ident) or ""))
            park_ms = (time.perf_counter() - t_park) * 1000
        if snap is not None:
            if source == "warm" and snap.conversation_id == conversation_id:
                self.warm.take(snap)  # it moves to the hot tier (another chat's shared prefix stays parked)
            if not backend.restore_sequence((snap.data, snap.tokens)) or not backend.keep_prefix(
                    min(usable, len(prompt) - 1)):
                log.info("restoring %s KV state failed; re-evaluating", source)
                backend.reset()
                source, usable = None, 0
        elif not shares and kv:
            backend.reset()  # prefill would reuse the prefix it shares with another domain's state
        self.hot[ident] = conversation_id
        self.hot_domain[ident] = domain
        ms = (time.perf_counter() - t0) * 1000 - park_ms
        return Restore(source, ms if source else 0.0, usable if source else 0, park_ms)

    def shares(self, identity: str, conversation_id: int | None, domain: str) -> bool:
        """Whether the live context of model `identity` may serve a turn of `conversation_id` in
        `domain`: it holds that conversation, or a state made by turns of the same domain."""
        return self.hot.get(identity) == conversation_id or self.hot_domain.get(identity) == domain

    def checkpoint(self, backend: Backend, conversation_id: int) -> None:
        """After a turn, while the model is idle (a background job on its thread): send the
        context's conversation to its cold file, where it appends only the turn's cells. The copy
        lives until the writer has it on disk, so RAM holds the state twice only for a moment, and
        a crash or a kill later still finds the chat on disk."""
        ident = backend.identity
        kv = backend.kv_tokens
        # Not for a sliding-window cache, whose state cannot be split (it would be rewritten whole
        # after every turn), nor while an earlier write waits (a copy each would pile up in RAM).
        if (not self.checkpoints or self.hot.get(ident) != conversation_id or len(kv) < self.cold.min_tokens
                or (backend.n_swa > 0 and not backend.params.swa_full) or self._writes.unfinished_tasks
                or not self._wanted(conversation_id)
                or self.cold.covers(conversation_id, ident, self.facts(backend), kv)):
            return
        self._writes.put(take_snapshot(backend, conversation_id, self.hot_domain.get(ident) or ""))

    def release(self, backend: Backend) -> None:
        """The model is being unloaded (evicted, or the app exits): its conversation's state moves
        to the warm tier, and from there to cold (model thread). At exit, not when its cold file
        holds it already (a checkpoint wrote it): an exit after a turn copies nothing."""
        cid = self.hot.pop(backend.identity, None)
        kv = backend.kv_tokens
        if cid is None or len(kv) < MIN_WARM_TOKENS or self.warm.holds(backend.identity, cid, kv):
            return
        facts = self.facts(backend)
        if self.exiting:
            self.flush()  # a checkpoint still queued
            if self.cold.covers(cid, backend.identity, facts, kv):
                return
        self._put_warm(take_snapshot(backend, cid, self.hot_domain.get(backend.identity) or ""))

    def forget(self, conversation_id: int) -> None:
        """A deleted conversation: drop its warm snapshots, the cold writes queued or under way for
        it, and its cold files (its hot state is simply overwritten by the next turn)."""
        self._forgotten.add(conversation_id)  # first: the writer checks it before every rename
        for snap in self.warm.entries():
            if snap.conversation_id == conversation_id:
                self.warm.take(snap)
        for ident, cid in list(self.hot.items()):
            if cid == conversation_id:
                self.hot[ident] = None
                self.hot_domain[ident] = None  # what is left of it in the context serves no other chat
        self.cold.delete(conversation_id)

    def _put_warm(self, snap: Snapshot) -> None:
        """Park a snapshot in RAM unless its conversation was deleted meanwhile (a park on the
        model's thread races a delete on the engine's). `forget` marks the id, then takes the
        id's snapshots out: asked after the put, one of the two sees the other, whichever ran first."""
        self.warm.put(snap)
        if not self._wanted(snap.conversation_id):
            self.warm.take(snap)

    def _wanted(self, conversation_id: int | None) -> bool:
        return conversation_id not in self._forgotten

    # ---- background writes
    def _to_cold_later(self, snap: Snapshot) -> None:
        if self._wanted(snap.conversation_id):
            self._writes.put(snap)

    def _write_loop(self) -> None:
        _idle_priority()
        while True:
            snap = self._writes.get()
            if snap is None:
                self._writes.task_done()
                return
            try:
                facts = self._facts.get(snap.identity)
                if facts is not None and self._wanted(snap.conversation_id):  # not deleted while queued
                    self.cold.write(snap, facts, self._wanted)
            except Exception:  # noqa: BLE001 - a cache write must never take the app down
                log.exception("writing a KV snapshot failed")
            finally:
                # Let go of it before waiting for the next: a checkpoint's copy is the whole state
                # (205 MiB at 8k tokens on a 1.5B model), and it would stay resident until then.
                del snap
                self._writes.task_done()

    def flush(self) -> None:
        """Wait until queued cold writes are done."""
        self._writes.join()

    def close(self) -> None:
        """Write every warm snapshot to cold and stop the writer (after the models were released)."""
        for snap in self.warm.drain():
            self._to_cold_later(snap)
        self._writes.put(None)
        self._writer.join()

    # ---- accounting
    def pages(self, backends: Sequence[tuple[KVHolder, int]]) -> dict:
        """KV use in PAGE_TOKENS pages per model: capacity and use of the live context, and what
        each conversation holds hot, warm and cold. `backends`: (a context, or the view its thread
        published, and its planned bytes per token)."""
        out = {}
        cold_files = self.cold.counted_files()
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
            tag = model_tag(ident)
            for name, (size, n_tokens) in cold_files.items():
                parsed = parse_file_name(name)
                if parsed is not None and parsed[1] == tag and n_tokens is not None:
                    add(parsed[0], "cold", n_tokens, size)
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
