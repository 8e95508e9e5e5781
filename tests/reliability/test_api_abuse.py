"""The local API server under hostile clients: 100 bad requests at once (invalid JSON, bodies far over
the limit, wrong types, invalid UTF-8, stalled headers, stalled bodies, garbage request lines), each
answered with a 4xx or, for a connection that never finishes its headers, closed; the server then
answers a good request at once and holds no connection open."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from tests.fake_backend import fakes, make_assistant  # noqa: F401
from tests.server_util import KEY, raw, request, serve  # noqa: F401

HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0


def _kinds(port: int) -> dict[str, bytes]:
    chat = "/v1/chat/completions"
    huge = request(port, chat, b"").replace(b"Content-Length: 0", b"Content-Length: 1073741824") + b"[" * 4096
    stalled_body = request(port, chat, b"").replace(b"Content-Length: 0", b"Content-Length: 1000") + b'{"mess'
    return {
        "invalid json": request(port, chat, b'{"messages": [{"role": "user", "content": "hi"'),
        "huge body": huge,
        "wrong types": request(port, chat, {"model": 5, "messages": {"role": "user"}, "max_tokens": "many"}),
        "invalid utf-8": request(port, chat, b'{"messages": [{"role": "user", "content": "\xff\xfe\xc3("}]}'),
        "not an object": request(port, chat, b"[1, 2, 3]"),
        "slowloris": f"POST {chat} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bear".encode(),
        "stalled body": stalled_body,
        "garbage": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 not http at all\r\n\r\n",
        "no key": request(port, chat, {"messages": [{"role": "user", "content": "hi"}]}, key=None),
        "deep json": request(port, chat, b"[" * 100_000 + b"]" * 100_000),
    }


def _send(port: int, kind: str, data: bytes) -> tuple[str, int | None, float]:
    t0 = time.monotonic()
    status, _ = raw(port, data, timeout=20)
    return kind, status, time.monotonic() - t0


def test_100_concurrent_bad_requests_get_4xx_and_the_server_keeps_answering(serve):
    server = serve(header_timeout_s=HEADER_TIMEOUT_S, body_timeout_s=BODY_TIMEOUT_S, max_body_bytes=256 * 1024)
    port = server.port
    kinds = _kinds(port)
    jobs = [(kind, kinds[kind]) for kind in sorted(kinds) for _ in range(10)]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(lambda job: _send(port, *job), jobs))
    assert len(results) == 100
    for kind, status, seconds in results:
        if kind == "slowloris":
            assert status in (None, 408) and seconds < HEADER_TIMEOUT_S + 5, (kind, status, seconds)
        else:
            assert status is not None and 400 <= status < 500, (kind, status)
    by_kind = {kind: {s for k, s, _ in results if k == kind} for kind in kinds}
    assert by_kind["huge body"] == {413} and by_kind["stalled body"] == {408} and by_kind["no key"] == {401}
    assert by_kind["invalid utf-8"] == by_kind["invalid json"] == by_kind["wrong types"] == {400}

    # Still serving, nothing reached the engine, no connection left open.
    status, response = raw(port, request(port, "/v1/chat/completions",
                                         {"model": "L1", "messages": [{"role": "user", "content": "hi"}]}))
    assert status == 200 and json.loads(response.split(b"\r\n\r\n", 1)[1])["choices"][0]["message"]["content"]
    assert server.engine.jobs_done == 1 and server.engine.alive
    assert not server._uvicorn.server_state.connections
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:  # and a slow new client still gets in
        s.sendall(request(port, "/health", key=None))
        assert s.recv(100).startswith(b"HTTP/1.1 200")
