"""Who is behind a connection: the client the fair queue takes turns between and limits to its
share (engine/server/fair_queue.py).

A remote machine is its address. On loopback every program shares 127.0.0.1 and each connection
has a port of its own, so the address names nobody: one program holding 17 connections would be 17
clients and fill the whole queue. There the client is the local process whose socket is the
connection's other end, as the OS tells it (psutil), or else the connection itself: a process of
another user, or a platform that needs more rights to tell (macOS without root).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

import psutil
from starlette.concurrency import run_in_threadpool
from starlette.types import Scope

log = logging.getLogger(__name__)

LOOPBACK = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1"})
KEEP_S = 60.0  # a connection's answer is reused this long (a port is reused by another program later)
KEEP = 1024  # connections remembered
RECENT = 8  # processes looked at first: the program behind the last connections is the likely next one


def _host(ip: str) -> str:
    return ip.removeprefix("::ffff:")


class Peers:
    def __init__(self):
        self._known: OrderedDict[tuple[str, int], tuple[str, float]] = OrderedDict()  # connection -> client
        self._recent: OrderedDict[int, None] = OrderedDict()  # pids found lately, newest last
        self._lock = threading.Lock()
        self._os_tells = True  # False once the OS refused to list connections (no use asking again)

    async def client(self, scope: Scope) -> str:
        """The client behind this request's connection: "1.2.3.4", "pid:123" or "127.0.0.1:50123"."""
        host, port = scope.get("client") or ("?", 0)
        if host not in LOOPBACK:
            return host
        now = time.monotonic()
        with self._lock:
            known = self._known.get((host, port))
        if known is not None and now - known[1] < KEEP_S:
            return known[0]
        server = scope.get("server") or ("", 0)
        pid = await run_in_threadpool(self._find, (_host(host), port), (_host(server[0]), server[1]))
        name = f"pid:{pid}" if pid is not None else f"{host}:{port}"
        with self._lock:
            self._known[(host, port)] = (name, now)
            self._known.move_to_end((host, port))
            while len(self._known) > KEEP:
                self._known.popitem(last=False)
        return name

    def _find(self, client: tuple[str, int], server: tuple[str, int]) -> int | None:
        """The pid whose TCP socket goes from `client` to `server`, or None."""
        with self._lock:
            recent = list(reversed(self._recent))
        for pid in recent:  # the same program again, most likely: only its own sockets to read
            try:
                if any(_joins(c, client, server) for c in psutil.Process(pid).net_connections(kind="tcp")):
                    return self._remember(pid)
            except psutil.Error:
                continue
        if not self._os_tells:
            return None
        try:
            found = next((c.pid for c in psutil.net_connections(kind="tcp") if c.pid and _joins(c, client, server)),
                         None)
        except psutil.AccessDenied:
            log.info("the OS does not say which program holds a loopback connection: each connection is a client")
            self._os_tells = False
            return None
        except (psutil.Error, OSError):
            log.warning("could not list this machine's connections", exc_info=True)
            return None
        return self._remember(found) if found is not None else None

    def _remember(self, pid: int) -> int:
        with self._lock:
            self._recent[pid] = None
            self._recent.move_to_end(pid)
            while len(self._recent) > RECENT:
                self._recent.popitem(last=False)
        return pid


def _joins(conn, client: tuple[str, int], server: tuple[str, int]) -> bool:
    """`conn` is the client's end of the connection client → server."""
    laddr, raddr = conn.laddr, conn.raddr
    return (bool(raddr) and laddr[1] == client[1] and raddr[1] == server[1]
            and _host(laddr[0]) == client[0] and _host(raddr[0]) == server[0])
