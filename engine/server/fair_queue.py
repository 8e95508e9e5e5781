"""The requests waiting for the engine thread: round-robin across clients, bounded.

One client sending ten requests does not make another wait for all ten: each client has its own
line, and the engine takes the head of each line in turn. When `depth` requests wait, the next
one is refused at once (the HTTP layer answers 429 with Retry-After) rather than queued.

A client (the program or machine behind the requests, engine/server/peers.py) may fill at most
`per_client` places, half the queue by default: a program holding 17 streams gets its own 429s,
and every other client still finds room. A long job that runs in turns (an embeddings request,
a slice at a time) goes back with `put_back`, behind the other clients, and is never refused.

The request's `user` field is a label the client chooses, so it cannot make a client: a program
that named a new `user` each time filled the whole queue, and another program got 429. A
`Client(peer, user)` key takes turns between peers, and within a peer between its users; the
per-client cap counts everything one peer has waiting.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict, deque
from typing import Generic, Hashable, NamedTuple, TypeVar

T = TypeVar("T")


class Client(NamedTuple):
    """Who a job is for: `peer` the program or machine (engine/server/peers.py), `user` the
    request's `user` field ("" without one), a sub-key the client chooses."""
    peer: Hashable
    user: str = ""


class QueueFull(Exception):
    """No room: `retry_after_s` is a guess from the measured time per job and the queue length.
    `code` "queue_full": the whole queue; "client_queue_full": this client's share of it."""

    def __init__(self, retry_after_s: int, message: str = "the server is busy", code: str = "queue_full"):
        super().__init__(f"{message}; retry after {retry_after_s} s")
        self.retry_after_s, self.code = retry_after_s, code


class QueueClosed(Exception):
    """The server is shutting down."""


def _split(client: Hashable) -> Client:
    return client if isinstance(client, Client) else Client(client)


class FairQueue(Generic[T]):
    """`client` in every call: a `Client`, or any other key for a peer without users."""

    def __init__(self, depth: int, per_client: int | None = None):
        self.depth = depth
        self.per_client = per_client or math.ceil(depth / 2)
        # peer -> its users' lines (user -> its waiting jobs); both in turn order
        self._lines: OrderedDict[Hashable, OrderedDict[str, deque[T]]] = OrderedDict()
        self._waiting: dict[Hashable, int] = {}  # peer -> its jobs waiting, all users together
        self._size = 0
        self._closed = False
        self._cond = threading.Condition()
        self.job_s = 2.0  # moving average of a job's time on the engine (for Retry-After)

    def __len__(self) -> int:
        return self._size

    def put(self, client: Hashable, item: T) -> int:
        """Queue `item` at the end of `client`'s line; returns how many wait before it overall.

        Raises:
            QueueFull: `depth` items are waiting already, or `per_client` of this client's peer.
            QueueClosed: after `close`.
        """
        peer, user = _split(client)
        with self._cond:
            if self._closed:
                raise QueueClosed("the server is shutting down")
            retry = min(60, max(1, math.ceil(self.job_s * (self._size + 1))))
            if self._size >= self.depth:
                raise QueueFull(retry)
            if self._waiting.get(peer, 0) >= self.per_client:
                raise QueueFull(retry, f"this client has {self.per_client} requests waiting already, the most one "
                                "client may (half the queue: setting server.queue_depth)", "client_queue_full")
            self._add(peer, user, item, front=False)
            return self._size - 1

    def put_back(self, client: Hashable, item: T) -> None:
        """Queue a job that has had its turn and is not finished: first in `client`'s line, whose
        turn comes after every other client's. Never refused for room: it was let in already.

        Raises:
            QueueClosed: after `close`.
        """
        peer, user = _split(client)
        with self._cond:
            if self._closed:
                raise QueueClosed("the server is shutting down")
            self._add(peer, user, item, front=True)

    def _add(self, peer: Hashable, user: str, item: T, front: bool) -> None:
        users = self._lines.get(peer)
        if users is None:
            users = self._lines[peer] = OrderedDict()
        line = users.get(user)
        if line is None:
            line = users[user] = deque()
        if front:
            self._lines.move_to_end(peer)
            users.move_to_end(user)
            line.appendleft(item)
        else:
            line.append(item)
        self._waiting[peer] = self._waiting.get(peer, 0) + 1
        self._size += 1
        self._cond.notify()

    def get(self, timeout: float | None = None) -> T | None:
        """The next item, round-robin across peers and within a peer across its users; None once
        closed and empty, or on timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._size or self._closed, timeout):
                return None
            if not self._size:
                return None
            peer, users = next(iter(self._lines.items()))
            user, line = next(iter(users.items()))
            item = line.popleft()
            users.move_to_end(user)  # to the back: the peer's other users go first
            self._lines.move_to_end(peer)  # and every other peer before them
            self._taken(peer, user)
            return item

    def remove(self, client: Hashable, item: T) -> bool:
        """Take a waiting item out (its client left); False when it was taken already."""
        peer, user = _split(client)
        with self._cond:
            line = self._lines.get(peer, {}).get(user)
            if line is None or item not in line:
                return False
            line.remove(item)
            self._taken(peer, user)
            return True

    def _taken(self, peer: Hashable, user: str) -> None:
        """One of `peer`'s items under `user` left the queue: empty lines go."""
        users = self._lines[peer]
        if not users[user]:
            del users[user]
        if not users:
            del self._lines[peer]
        self._waiting[peer] -= 1
        if not self._waiting[peer]:
            del self._waiting[peer]
        self._size -= 1

    def record(self, seconds: float) -> None:
        """A job's time on the engine, for the Retry-After estimate."""
        with self._cond:
            self.job_s = 0.8 * self.job_s + 0.2 * seconds

    def close(self) -> list[T]:
        """Refuse new items and hand back every waiting one."""
        with self._cond:
            self._closed = True
            left = [item for users in self._lines.values() for line in users.values() for item in line]
            self._lines.clear()
            self._waiting.clear()
            self._size = 0
            self._cond.notify_all()
            return left
