"""The local API server's security defaults (issue 16): loopback, a key always (0600 file, constant-time
compare), Host checked against DNS rebinding, CORS off unless configured, bounded bodies, and a
network bind only on purpose. Raw sockets where a client library would tidy the request."""

from __future__ import annotations

import os
import stat

import psutil
import pytest

from engine.api import Settings
from engine.cli.main import main as cli
from engine.server import ServerConfig, ServerConfigError, api_key_path, load_api_key
from engine.server.fair_queue import FairQueue, QueueFull
from tests.fake_backend import fakes, make_assistant  # noqa: F401
from tests.server_util import KEY, body_of, raw, request, serve  # noqa: F401

CHAT = {"model": "L1", "messages": [{"role": "user", "content": "hi"}]}


def test_the_key_is_required_on_v1_and_compared_whole(serve):
    port = serve().port
    assert raw(port, request(port, "/v1/models", key=None))[0] == 401
    status, response = raw(port, request(port, "/v1/models", key=KEY[:-1] + "X"))
    assert status == 401 and b"www-authenticate: Bearer" in response
    assert raw(port, request(port, "/v1/models", key=KEY + "X"))[0] == 401
    assert raw(port, request(port, "/v1/models", key=None, headers={"Authorization": f"Basic {KEY}"}))[0] == 401
    assert raw(port, request(port, "/v1/chat/completions", CHAT, key=None))[0] == 401
    assert raw(port, request(port, "/v1/models"))[0] == 200
    status, response = raw(port, request(port, "/health", key=None))  # liveness only, no key
    assert status == 200 and body_of(response) == {"status": "ok"}


def test_a_host_other_than_the_bound_one_is_refused(serve):
    port = serve().port
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", "127.0.0.1.evil.example",
                 f"user@127.0.0.1:{port}", ""):
        status, response = raw(port, request(port, "/v1/models", host=host))
        assert status in (400, 421), host  # h11 itself refuses an HTTP/1.1 request without Host (400)
    assert raw(port, request(port, "/health", host="rebind.attacker.example", key=None))[0] == 421
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost", f"LOCALHOST:{port}"):
        assert raw(port, request(port, "/v1/models", host=host))[0] == 200, host


def test_cors_is_off_unless_origins_are_configured(serve, fakes, make_assistant):
    port = serve().port
    preflight = {"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    status, response = raw(port, request(port, "/v1/chat/completions", method="OPTIONS", key=None, headers=preflight))
    assert status == 403 and b"access-control-allow-origin" not in response.lower()
    status, response = raw(port, request(port, "/v1/models", headers={"Origin": "http://localhost:3000"}))
    assert status == 403 and b"access-control-allow-origin" not in response.lower()

    port = serve(make_assistant(str(fakes.model_file("m"))), cors_origins=("http://localhost:3000",)).port
    status, response = raw(port, request(port, "/v1/chat/completions", method="OPTIONS", key=None, headers=preflight))
    assert status == 200 and b"access-control-allow-origin: http://localhost:3000" in response.lower()
    status, response = raw(port, request(port, "/v1/models", headers={"Origin": "http://localhost:3000"}))
    assert status == 200 and b"access-control-allow-origin: http://localhost:3000" in response.lower()
    evil = preflight | {"Origin": "https://evil.example"}
    assert raw(port, request(port, "/v1/chat/completions", method="OPTIONS", key=None, headers=evil))[0] == 403
    assert raw(port, request(port, "/v1/models", headers={"Origin": "https://evil.example"}))[0] == 403


def test_bodies_over_the_limit_get_413(serve):
    port = serve(max_body_bytes=1024).port
    head = request(port, "/v1/chat/completions", b"").replace(b"Content-Length: 0", b"Content-Length: 104857600")
    assert raw(port, head + b"{" * 1000)[0] == 413  # refused on the declared length, before reading
    chunked = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {KEY}\r\n"
               "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    part = b"x" * 600
    status, _ = raw(port, chunked + (b"%x\r\n" % len(part) + part + b"\r\n") * 3)
    assert status == 413  # no length given: counted while read
    assert raw(port, request(port, "/v1/chat/completions", CHAT))[0] == 200


def test_a_network_bind_needs_the_flag_and_a_key(assistant_home):
    with pytest.raises(ServerConfigError, match="--allow-network"):
        ServerConfig(host="0.0.0.0", api_key=KEY).check()
    with pytest.raises(ServerConfigError, match="--allow-network"):
        ServerConfig(host="192.168.1.20", api_key=KEY).check()
    ServerConfig(host="0.0.0.0", api_key=KEY, allow_network=True).check()
    with pytest.raises(ServerConfigError, match="API key"):
        ServerConfig(host="0.0.0.0", api_key="", allow_network=True).check()
    with pytest.raises(ServerConfigError, match="too short"):
        ServerConfig(api_key="secret").check()
    ServerConfig(host="::1", api_key=KEY).check()
    # The command refuses before loading a model or opening a socket.
    assert cli(["serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    assert not [c for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]


def test_the_defaults_serve_loopback_only_and_nothing_until_enabled(assistant_home):
    s = Settings()
    config = ServerConfig.from_settings(s, api_key=KEY)
    assert s.get("server.enabled") is False and (config.host, config.port) == ("127.0.0.1", 8765)
    assert config.cors_origins == () and config.store_conversations is False
    assert config.allowed_hosts() == {"localhost", "127.0.0.1", "::1"}


def test_the_key_file_is_made_once_and_is_the_users_only(assistant_home):
    assert load_api_key(create=False) is None
    key = load_api_key()
    path = api_key_path()
    assert len(key) >= 40 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_api_key() == key == path.read_text().strip()
    os.chmod(path, 0o644)
    assert load_api_key() == key and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_queue_takes_clients_in_turn_and_refuses_past_its_depth():
    q: FairQueue[str] = FairQueue(depth=5)
    for client, item in [("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1")]:
        q.put(client, item)
    with pytest.raises(QueueFull) as full:
        q.put("d", "d1")
    assert full.value.retry_after_s >= 1
    assert [q.get(0) for _ in range(5)] == ["a1", "b1", "c1", "a2", "a3"]
    assert q.get(0) is None
    q.put("a", "x")
    assert q.remove("a", "x") and len(q) == 0 and not q.remove("a", "x")
    assert q.close() == [] and q.get(0) is None


def test_a_client_fills_at_most_half_the_queue_and_a_job_in_turns_goes_back_behind_the_others():
    q: FairQueue[str] = FairQueue(depth=6)
    for item in ("a1", "a2", "a3"):
        q.put("a", item)
    with pytest.raises(QueueFull) as own:
        q.put("a", "a4")  # its own 429: half the queue is a's
    assert own.value.code == "client_queue_full"
    q.put("b", "b1")  # another client still gets in
    assert q.get(0) == "a1"
    q.put_back("a", "a1")  # not finished: first in a's line, after b's turn
    assert [q.get(0) for _ in range(5)] == ["b1", "a1", "a2", "a3", None]
    for item in ("c1", "c2", "c3", "d1", "d2", "d3"):
        q.put(item[0], item)
    with pytest.raises(QueueFull) as full:
        q.put("e", "e1")
    assert full.value.code == "queue_full"
    q.put_back("c", "c0")  # a job let in before is never refused for room; c's turn is after d's
    assert len(q) == 7 and [q.get(0) for _ in range(3)] == ["d1", "c0", "d2"]
