"""The requests waiting for the engine thread: round-robin across clients, bounded.

One client sending ten requests does not make another wait for all ten: each client has its own
line, and the engine takes the head of each line in turn. When `depth` requests wait, the next
one is refused at once (the HTTP layer answers 429 with Retry-After) rather than queued.

A client (the program or machine behind the requests, engine/server/peers.py) may fill at most
`per_client` places, half the queue by default: a program holding 17 streams gets its own 429s,
and every other client still finds room. A long job that runs in turns (an embeddings request,
a slice at a time) goes back with `put_back`, behind the other clients, and is never refused.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from typing import Generic, Hashable, TypeVar

T = TypeVar("T")


class QueueFull(Exception):
    """No room: `retry_after_s` is a guess from the measured time per job and the queue length.
    `code` "queue_full": the whole queue; "client_queue_full": this client's share of it."""

    def __init__(self, retry_after_s: int, message: str = "the server is busy", code: str = "queue_full"):
        super().__init__(f"{message}; retry after {retry_after_s} s")
        self.retry_after_s, self.code = retry_after_s, code


class QueueClosed(Exception):
    """The server is shutting down."""


class FairQueue(Generic[T]):
    def __init__(self, depth: int, per_client: int | None = None):
        self.depth = depth
        self.per_client = per_client or math.ceil(depth / 2)
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
            QueueFull: `depth` items are waiting already, or `per_client` of this client's.
            QueueClosed: after `close`.
        """
        with self._cond:
            if self._closed:
                raise QueueClosed("the server is shutting down")
            retry = min(60, max(1, math.ceil(self.job_s * (self._size + 1))))
            if self._size >= self.depth:
                raise QueueFull(retry)
            if len(self._lines.get(client, ())) >= self.per_client:
                raise QueueFull(retry, f"this client has {self.per_client} requests waiting already, the most one "
                                "client may (half the queue: setting server.queue_depth)", "client_queue_full")
            self._add(client, item, front=False)
            return self._size - 1

    def put_back(self, client: Hashable, item: T) -> None:
        """Queue a job that has had its turn and is not finished: first in `client`'s line, whose
        turn comes after every other client's. Never refused for room: it was let in already.

        Raises:
            QueueClosed: after `close`.
        """
        with self._cond:
            if self._closed:
                raise QueueClosed("the server is shutting down")
            self._add(client, item, front=True)

    def _add(self, client: Hashable, item: T, front: bool) -> None:
        line = self._lines.get(client)
        if line is None:
            line = self._lines[client] = deque()
        if front:
            self._lines.move_to_end(client)
            line.appendleft(item)
        else:
            line.append(item)
        self._size += 1
        self._cond.notify()

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
