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
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from engine.server import ApiServer, ServerConfig
from tests.util import cli, cli_env

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


# ---- a real `assistant serve` in a process of its own --------------------------------------------

@contextmanager
def assistant_serve(home: Path, model: Path, key: str, log: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`assistant serve` on `model` and a free port, its data dir `home`: (the process, its /v1
    URL) once it listens; stopped at the end."""
    args = cli("serve", "--port", "0", "--api-key", key, "--model", str(model))
    with open(log, "w") as err:  # a file, not a pipe nobody reads while it serves
        proc = subprocess.Popen(args, env=cli_env(home), stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = proc.stdout.readline()
        assert "Serving" in line, line + log.read_text()[-2000:]
        yield proc, line.split(" at ", 1)[1].split()[0]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def memory(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process, in bytes."""
    fields = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status"))
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def post_watched(proc: subprocess.Popen, url: str, kill_at: int, **request) -> tuple[httpx.Response, int]:
    """POST (httpx's keyword arguments) while sampling the server's RSS every 20 ms: past `kill_at`
    bytes the server is killed, not the machine (it once went to 24 GB). (response, highest RSS seen)."""
    result: dict = {}

    def go():
        try:
            result["r"] = httpx.post(url, timeout=300, **request)
        except httpx.HTTPError as exc:
            result["r"] = exc

    thread = threading.Thread(target=go)
    thread.start()
    peak = 0
    for _ in range(15000):  # 300 s
        peak = max(peak, memory(proc.pid)[0])
        if peak > kill_at:
            proc.kill()
            thread.join(30)
            pytest.fail(f"the server passed {kill_at >> 20} MiB ({peak >> 20} MiB): killed")
        thread.join(0.02)
        if not thread.is_alive():
            break
    assert not thread.is_alive(), "no answer in 300 s"
    assert isinstance(result["r"], httpx.Response), result["r"]
    return result["r"], peak
