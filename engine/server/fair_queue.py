"""The requests waiting for the engine thread: round-robin across clients, bounded.

One client sending ten requests does not make another wait for all ten: each client has its own
line, and the engine takes the head of each line in turn. When `depth` requests wait, the next
one is refused at once (the HTTP layer answers 429 with Retry-After) rather than queued.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from typing import Generic, Hashable, TypeVar

T = TypeVar("T")


class QueueFull(Exception):
    """No room: `retry_after_s` is a guess from the measured time per job and the queue length."""

    def __init__(self, retry_after_s: int):
        super().__init__(f"the server is busy; retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class QueueClosed(Exception):
    """The server is shutting down."""


class FairQueue(Generic[T]):
    def __init__(self, depth: int):
        self.depth = depth
        self._lines: OrderedDict[Hashable, deque[T]] = OrderedDict()  # client -> its waiting jobs, in turn order
        self._size = 0
        self._closed = False
        self._cond = threading.Condition()
        self.job_s = 2.0  # moving average of a job's time on the engine (for Retry-After)

    def __len__(self) -> int:
        return self._size

    def put(self, client: Hashable, item: T) -> int:
        """Queue `item` at the end of `client`'s line; returns how many wait before it overall.

        Raises:
            QueueFull: `depth` items are waiting already.
            QueueClosed: after `close`.
        """
        with self._cond:
            if self._closed:
                raise QueueClosed("the server is shutting down")
            if self._size >= self.depth:
                raise QueueFull(min(60, max(1, math.ceil(self.job_s * (self._size + 1)))))
            line = self._lines.get(client)
            if line is None:
                line = self._lines[client] = deque()
            line.append(item)
            self._size += 1
            self._cond.notify()
            return self._size - 1

    def get(self, timeout: float | None = None) -> T | None:
        """The next item, round-robin across clients; None once closed and empty, or on timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._size or self._closed, timeout):
                return None
            if not self._size:
                return None
            client, line = next(iter(self._lines.items()))
            item = line.popleft()
            self._size -= 1
            del self._lines[client]
            if line:
                self._lines[client] = line  # to the back: every other client goes first
            return item

    def remove(self, client: Hashable, item: T) -> bool:
        """Take a waiting item out (its client left); False when it was taken already."""
        with self._cond:
            line = self._lines.get(client)
            if line is None or item not in line:
                return False
            line.remove(item)
            self._size -= 1
            if not line:
                del self._lines[client]
            return True

    def record(self, seconds: float) -> None:
        """A job's time on the engine, for the Retry-After estimate."""
        with self._cond:
            self.job_s = 0.8 * self.job_s + 0.2 * seconds

    def close(self) -> list[T]:
        """Refuse new items and hand back every waiting one."""
        with self._cond:
            self._closed = True
            left = [item for line in self._lines.values() for item in line]
            self._lines.clear()
            self._size = 0
            self._cond.notify_all()
            return left
