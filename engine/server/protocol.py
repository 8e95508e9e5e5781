"""uvicorn's h11 protocol with a deadline for request headers, and room kept for real requests.

uvicorn closes idle keep-alive connections, but a client that sends half a request line and
stalls (slowloris) holds its connection forever. Here a connection whose request headers are not
complete `header_timeout_s` after it opened, or after the first byte of its next request, gets
408 and is closed. (The body has its own deadline: engine/server/guard.py BodyLimit.)

The deadline alone does not keep the door open: 280 connections that never send a request, opened
again as each one is closed, held all of uvicorn's `limit_concurrency` places, and every real
request got 503. So a connection that takes the last place closes another one for room, first of
these that exists, oldest first:
1. one without a key: no complete request `AUTH_GRACE_S` after it opened, or a latest request with
   no valid key (engine/server/guard.py KeyGuard marks the scope), in a request or not. 300 keyless
   `GET /health` declaring a body they never sent were all in a request, and before this rule a
   keyed request got 503 for as long as they lasted;
2. one not in a request (nothing sent yet, half a request line, or idle between two requests).
A keyed request in progress is never closed for room: when every place holds one, uvicorn answers 503.

A connection takes its place once its first bytes were read, not when it is accepted: a flood
accepted in one turn of the loop closed, by the rule above, the connections of its own burst that
had not been read yet, a keyed client's among them.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine.server.guard import KEYED, OPEN_PATHS

log = logging.getLogger(__name__)

TIMEOUT_RESPONSE = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
AUTH_GRACE_S = 2.0  # a connection shows its key within this, or it is the first closed at the limit


class HeaderDeadlineProtocol(H11Protocol):
    header_timeout_s = 10.0  # set per server (engine/server/server.py makes a subclass)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._opened = self.loop.time()
        self._arrived = False
        super().connection_made(transport)
        self.connections.discard(self)  # no place yet: it takes one when it arrives
        self._arm()
        # its socket is watched from the loop's next turn: two turns on, any first bytes were read
        self.loop.call_soon(self.loop.call_soon, self._arrive)

    def data_received(self, data: bytes) -> None:
        self._arrive()
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

    def _arrive(self) -> None:
        """Take a place, and make room for it: its first bytes, if it sent any, have been read (or are
        being read, from data_received)."""
        if self._arrived or self.transport.is_closing():
            return
        self._arrived = True
        self.connections.add(self)
        self._make_room()

    def _make_room(self) -> None:
        """Close others by the module's rules till the connections, this one included, are under the
        limit (at the limit uvicorn answers a request 503)."""
        limit = self.limit_concurrency
        while limit is not None and len(self.connections) >= limit:
            others = [c for c in self.connections if c is not self and isinstance(c, HeaderDeadlineProtocol)]
            now = self.loop.time()
            keyless = [c for c in others if c._shows_no_key(now)]
            waiting = [c for c in others if c._waiting()]
            if not keyless and not waiting:
                return  # every place holds a keyed request: uvicorn answers this one 503
            oldest = min(keyless or waiting, key=lambda c: c._opened)
            log.info("%d connections open: closed the oldest one %s (from %s)", len(self.connections),
                     "without a key" if keyless else "not in a request", oldest.client)
            if oldest._waiting():
                oldest._close(TIMEOUT_RESPONSE if oldest._started() else b"")
            else:
                oldest._close(None)  # in a request: its answer may be under way, or stuck on a client that never reads

    def _shows_no_key(self, now: float) -> bool:
        """No complete request `AUTH_GRACE_S` after it opened (or closing before one), or its latest
        request had no valid key: KeyGuard said so, or plainly none came (an open path, no
        Authorization header) while its check waits for the loop's next turn."""
        if self.cycle is None:
            return self.transport.is_closing() or now - self._opened > AUTH_GRACE_S
        scope = self.cycle.scope
        if KEYED in scope:
            return not scope[KEYED]
        return (self.cycle.response_complete  # refused before the check (uvicorn's 503, a bad Host)
                or scope["path"] in OPEN_PATHS or all(name != b"authorization" for name, _ in scope["headers"]))

    def _started(self) -> bool:
        """Part of a request came (h11 holds it until the headers are complete): it hears why."""
        return bool(self.conn.trailing_data[0])

    def _close(self, response: bytes | None) -> None:
        """Close with `response` written first; None: at once, dropping whatever is not sent yet."""
        self._disarm()
        self.connections.discard(self)  # its place is free now, not once the loop has run its close
        if response is None:
            self.transport.abort()  # close() would wait for a client that does not read
            return
        if response:
            self.transport.write(response)
        self.transport.close()
