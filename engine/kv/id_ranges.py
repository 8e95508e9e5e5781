"""A set of integer ids kept as sorted, disjoint runs: the deleted conversations the KV tiers must
never write to disk again.

A long-running API server deletes a conversation for nearly every request; a plain set of their
ids grew by one entry per request, forever. Conversation ids are handed out in order and never
reused (migration 0008_autoincrement_ids), so the deleted ones form runs broken only by the
conversations still alive (and by ids deleted before this start): the set costs about one run per
live conversation, not one entry per conversation ever deleted.
"""

from __future__ import annotations

import threading
from bisect import bisect_right


class IdRanges:
    """Integers as [first, last] runs; `add` and `in` from any thread."""

    def __init__(self):
        self._first: list[int] = []  # run starts, ascending
        self._last: list[int] = []   # the same runs' ends (inclusive)
        self._lock = threading.Lock()  # the two lists change together

    def __contains__(self, i: object) -> bool:
        if not isinstance(i, int):
            return False
        with self._lock:
            k = bisect_right(self._first, i) - 1
            return k >= 0 and i <= self._last[k]

    def __len__(self) -> int:
        """How many runs (not ids): what the set costs."""
        return len(self._first)

    def add(self, i: int) -> None:
        with self._lock:
            k = bisect_right(self._first, i) - 1  # the run starting at or before i, if any
            if k >= 0 and i <= self._last[k]:
                return
            joins_left = k >= 0 and self._last[k] == i - 1
            joins_right = k + 1 < len(self._first) and self._first[k + 1] == i + 1
            if joins_left and joins_right:  # i fills the gap between two runs
                self._last[k] = self._last[k + 1]
                del self._first[k + 1], self._last[k + 1]
            elif joins_left:
                self._last[k] = i
            elif joins_right:
                self._first[k + 1] = i
            else:
                self._first.insert(k + 1, i)
                self._last.insert(k + 1, i)
