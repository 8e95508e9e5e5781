"""The local API server against a flood of connections that show no key (issue 37): 300 of one kind,
opened again as fast as they are closed, while a keyed client asks. Before, 300 `GET /health`
declaring a 1000-byte body they never sent were all "in a request" for the body's 30 s, so the
256-connection limit's rule (close the oldest connection not in a request) closed none of them and
`GET /v1/models` got 503; a flood the server refuses at once (TLS bytes, keyless `/v1`) came back in
bursts that closed, by the same rule, the keyed client's connection before its request was read;
and keyless clients that never read their answers stayed in a request for good. Loopback only;
every loop bounded."""

from __future__ import annotations

import socket
import threading

import pytest

from engine.server.protocol import AUTH_GRACE_S
from tests.fake_backend import fakes, make_assistant, wait_until  # noqa: F401
from tests.reliability.test_api_exhaustion import Flood
from tests.server_util import raw, request, serve  # noqa: F401

CLIENT_HELLO = bytes.fromhex("1603010200010001fc0303") + bytes(range(0x80, 0xa0))  # h11: 400 at once


def _first_bytes(kind: str, port: int) -> bytes:
    """What a keyless connection of `kind` sends, and then nothing more."""
    host = f"Host: 127.0.0.1:{port}\r\n"
    return {
        "idle": b"",
        "dribble": b"GET /v1/models HTTP/1.1\r\nHo",
        "health with a body": f"GET /health HTTP/1.1\r\n{host}Content-Length: 1000\r\n\r\n".encode(),
        "health chunked": f"GET /health HTTP/1.1\r\n{host}Transfer-Encoding: chunked\r\n\r\n".encode(),
        "v1 with a body": f"POST /v1/chat/completions HTTP/1.1\r\n{host}Content-Length: 1000\r\n\r\n".encode(),
        "huge header": f"GET /v1/models HTTP/1.1\r\n{host}X-Pad: ".encode() + b"a" * 12_000,  # under h11's 16 KiB
        "tls": CLIENT_HELLO,
    }[kind]


KINDS = ("idle", "dribble", "health with a body", "health chunked", "v1 with a body", "huge header", "tls")


class KeylessFlood(Flood):
    """Flood's attacker loop with connections of the given kinds, in turn."""

    def __init__(self, port: int, n: int, kinds: tuple[str, ...]):
        self.data = [_first_bytes(kind, port) for kind in kinds]
        super().__init__(port, n)

    def _open(self, i: int) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        if data := self.data[i % len(self.data)]:
            s.sendall(data)
        s.setblocking(False)
        return s


@pytest.mark.parametrize("kinds", [(kind,) for kind in KINDS] + [KINDS], ids=list(KINDS) + ["mixed"])
def test_300_keyless_connections_opened_again_and_again_leave_keyed_requests_at_200(serve, kinds):
    server = serve(header_timeout_s=120)  # the default 256 places and 30 s for a body
    connections = server._uvicorn.server_state.connections
    flood = KeylessFlood(server.port, 300, kinds)
    stop = threading.Event()

    def attacker():
        for _ in range(2000):  # bounded: at most ~100 s
            if stop.wait(0.05):
                return
            flood.refill()

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    try:
        # every place taken, or the server closing the flood's connections as they come
        wait_until(lambda: len(connections) >= server.config.max_connections - 1 or flood.reopened, 30)
        for _ in range(5):
            status, response = raw(server.port, request(server.port, "/v1/models"), timeout=30)
            assert status == 200, response[:300]  # "health with a body": 503 for as long as the flood lasted
            assert len(connections) <= server.config.max_connections
        wait_until(lambda: flood.reopened >= 44, 30)  # the flood's own connections were closed for them
    finally:
        stop.set()
        thread.join(10)
        flood.close()


def test_health_takes_no_body_and_says_so_at_once(serve):
    server = serve(body_timeout_s=30)
    for name, value in (("Content-Length", "1000"), ("Transfer-Encoding", "chunked"), ("Content-Length", "1")):
        data = request(server.port, "/health", key=None, headers={name: value})
        status, response = raw(server.port, data, timeout=10)  # before: waited for the body (30 s)
        assert status == 400 and b"unexpected_body" in response, response[:300]
    status, response = raw(server.port, request(server.port, "/health", key=None, headers={"Content-Length": "0"}))
    assert status == 200, response[:300]
    status, _ = raw(server.port, request(server.port, "/health", key=None))
    assert status == 200


PIPELINE = 4000  # keyless `GET /health`s sent at once and never read: their answers back up


def _slow_reader(port: int) -> socket.socket:
    """A keyless connection whose answers back up: it is in a request for as long as it likes."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    data = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode() * PIPELINE
    while data:
        try:
            data = data[s.send(data):]
        except BlockingIOError:
            break  # the server stopped reading: it is stuck writing to us
    return s


def test_keyless_connections_stuck_in_a_request_are_closed_first_and_a_keyed_one_never(serve):
    server = serve(max_connections=8, header_timeout_s=60, body_timeout_s=60)
    for listener in server._uvicorn.servers[0].sockets:  # accepted sockets inherit it: answers back up sooner
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    connections = server._uvicorn.server_state.connections
    # The oldest connection is a keyed client's, whose request will wait for its body.
    keyed = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    chat = request(server.port, "/v1/chat/completions", b"{")
    readers: list[socket.socket] = []
    try:
        for n in range(1, 7):  # one at a time: uvicorn counts a pipelined request's task twice for a moment
            readers.append(_slow_reader(server.port))
            wait_until(lambda: sum(c.flow.write_paused for c in list(connections)) == n, 30)
        keyed.sendall(chat[:-1])  # in a request now, keyed, and the oldest
        wait_until(lambda: all(not c._waiting() for c in list(connections)), 10)
        wait_until(lambda: all(c._opened + AUTH_GRACE_S < c.loop.time() for c in list(connections)), 10)
        assert len(connections) == 7  # the 8th place is a new connection's, till it makes room
        for _ in range(3):
            status, response = raw(server.port, request(server.port, "/v1/models"), timeout=30)
            assert status == 200, response[:300]  # before: 503, none of them was "not in a request"
        assert len(connections) == 6  # a keyless reader was closed for the first one
        keyed.sendall(chat[-1:])
        status, response = raw_reply(keyed)
        assert status == 400 and b"not valid JSON" in response, response[:300]  # the keyed request went on
    finally:
        keyed.close()
        for s in readers:
            s.close()


def raw_reply(s: socket.socket) -> tuple[int | None, bytes]:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return (int(out.split(b" ", 2)[1]) if out.startswith(b"HTTP/1.") else None), out
