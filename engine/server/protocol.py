"""uvicorn's h11 protocol with a deadline for request headers.

uvicorn closes idle keep-alive connections, but a client that sends half a request line and
stalls (slowloris) holds its connection forever. Here a connection whose request headers are not
complete `header_timeout_s` after it opened, or after the first byte of its next request, gets
408 and is closed. (The body has its own deadline: engine/server/guard.py BodyLimit.)
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
        super().connection_made(transport)
        self._arm()

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

    def _too_slow(self) -> None:
        self._header_timer = None
        if self.conn.their_state is not h11.IDLE or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is still being written: not this deadline's business
        log.info("closed a connection from %s: no complete request headers within %.0f s", self.client,
                 self.header_timeout_s)
        self.transport.write(TIMEOUT_RESPONSE)
        self.transport.close()
