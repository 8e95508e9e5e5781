"""The warm tier: snapshots kept in RAM, least recently used first out."""

from __future__ import annotations

import threading
from collections import OrderedDict

from engine.kv.snapshot import WINDOW_DOMAIN, Snapshot, common_prefix


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

    def best(self, identity: str, conversation_id: int | None, prompt: list[int],
             domain: str = WINDOW_DOMAIN) -> tuple[Snapshot, int] | None:
        """The snapshot of this model covering the longest prefix of `prompt` (the conversation's
        own first on ties), with that length; None when none covers a token. Another
        conversation's snapshot counts only within `domain`: its prefix would tell a client of
        another domain what that conversation holds."""
        with self._lock:
            found, best = None, 0
            for (ident, cid), snap in self._items.items():
                if ident != identity or (cid != conversation_id and snap.domain != domain):
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
