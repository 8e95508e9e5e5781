"""The local API server on loopback for tests: a real uvicorn on a free port around an Assistant on
the scripted fake backend (tests/fake_backend.py), plus raw-socket requests for what HTTP client
libraries refuse to send (bad Host, invalid UTF-8, stalled headers).

    from tests.fake_backend import fakes, make_assistant   # noqa: F401 (fixtures)
    from tests.server_util import KEY, serve               # noqa: F401
    def test_x(serve): server = serve(); ... server.url ...
"""

from __future__ import annotations

import json
import socket

import pytest

from engine.server import ApiServer, ServerConfig

KEY = "test-key-0123456789abcdef"


@pytest.fixture
def serve(fakes, make_assistant):
    """start(assistant=None, **ServerConfig fields) → a started ApiServer on 127.0.0.1:<free port>
    (default assistant: one fake model "m" for both tiers); all stopped at teardown, before the
    assistants close."""
    started: list[ApiServer] = []

    def start(assistant=None, **config) -> ApiServer:
        if assistant is None:
            assistant = make_assistant(str(fakes.model_file("m")))
        server = ApiServer(assistant, ServerConfig(**{"host": "127.0.0.1", "port": 0, "api_key": KEY} | config))
        started.append(server.start())
        return server

    yield start
    for server in started:
        server.stop()


def raw(port: int, data: bytes, timeout: float = 15.0, shut_write: bool = False) -> tuple[int | None, bytes]:
    """Send bytes, read until the server closes: (HTTP status or None when it sent nothing, the response)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if shut_write:
            s.shutdown(socket.SHUT_WR)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except ConnectionResetError:
            pass
    if not out.startswith(b"HTTP/1."):
        return None, out
    return int(out.split(b" ", 2)[1]), out


def request(port: int, path: str, body: bytes | dict | None = None, *, method: str | None = None,
            host: str | None = None, key: str | None = KEY, headers: dict[str, str] | None = None) -> bytes:
    """The bytes of one HTTP/1.1 request (Connection: close)."""
    if isinstance(body, dict):
        body = json.dumps(body).encode()
    lines = [f"{method or ('POST' if body is not None else 'GET')} {path} HTTP/1.1", "Connection: close"]
    if host != "":  # "": no Host header at all
        lines.append(f"Host: {host or f'127.0.0.1:{port}'}")
    if key is not None:
        lines.append(f"Authorization: Bearer {key}")
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def body_of(response: bytes) -> dict:
    return json.loads(response.split(b"\r\n\r\n", 1)[1])
