"""uvicorn's h11 protocol with a deadline for request headers, and room kept for real requests.

uvicorn closes idle keep-alive connections, but a client that sends half a request line and
stalls (slowloris) holds its connection forever. Here a connection whose request headers are not
complete `header_timeout_s` after it opened, or after the first byte of its next request, gets
408 and is closed. (The body has its own deadline: engine/server/guard.py BodyLimit.)

The deadline alone does not keep the door open: 280 connections that never send a request, opened
again as each one is closed, held all of uvicorn's `limit_concurrency` places, and every real
request got 503. So a connection that comes when the places are full closes the oldest one that
is not in a request (nothing sent yet, half a request line, or idle between two requests): a client
that sends its request at once always gets in, and a flood only closes its own connections.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class HeaderDeadlineProtocol(H11Protocol):
    header_timeout_s = 10.0  # set per server (engine/server/server.py makes a subclass)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._opened = self.loop.time()
        super().connection_made(transport)
        self._arm()
        self._make_room()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # a request line / headers still incomplete
            self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None and not self.transport.is_closing():
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _waiting(self) -> bool:
        """Open, and no request in progress: nothing sent, headers incomplete, or between requests."""
        return (self.conn.their_state is h11.IDLE and not self.transport.is_closing()
                and (self.cycle is None or self.cycle.response_complete))

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self._waiting():
            return  # a request is being answered: not this deadline's business
        log.info("closed a connection from %s: no complete request headers within %.0f s", self.client,
                 self.header_timeout_s)
        self._close(TIMEOUT_RESPONSE)

    def _make_room(self) -> None:
        """At the connection limit, close the oldest connection that is not in a request."""
        limit = self.limit_concurrency
        if limit is None or len(self.connections) < limit:
            return
        waiting = [c for c in self.connections if c is not self and isinstance(c, HeaderDeadlineProtocol)
                   and c._waiting()]
        if not waiting:
            return  # every place holds a real request: uvicorn answers this one 503
        oldest = min(waiting, key=lambda c: c._opened)
        log.info("%d connections open: closed the oldest one not in a request (from %s)", len(self.connections),
                 oldest.client)
        oldest._close(TIMEOUT_RESPONSE if oldest._started() else b"")

    def _started(self) -> bool:
        """Part of a request came (h11 holds it until the headers are complete): it hears why."""
        return bool(self.conn.trailing_data[0])

    def _close(self, response: bytes) -> None:
        self._disarm()
        self.connections.discard(self)  # its place is free now, not once the loop has run its close
        if response:
            self.transport.write(response)
        self.transport.close()
