"""The local API server against clients that exhaust it rather than break it (issue 22's probe):
idle and dribbling connections opened again as fast as they are closed, one program holding 17
streams, embeddings requests abandoned mid-way, and one 7.9 MB embeddings request (2 048 inputs of
3 900 characters) that took the server to ~24 GB. Loopback only; every loop bounded."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import httpx
import pytest

from engine.memory.embedder import Embedder
from engine.memory.service import MemoryService
from engine.server.engine_thread import EMBED_SLICE
from tests.fake_backend import Gate, fakes, make_assistant, wait_until  # noqa: F401
from tests.server_util import KEY, assistant_serve, memory, post_watched, raw, request, serve  # noqa: F401

HEADERS = {"Authorization": f"Bearer {KEY}"}


# ---- connections -------------------------------------------------------------------------------

class Flood:
    """`n` connections to `port` that never finish a request: half send nothing, half dribble a
    request line; `refill` opens again each one the server closed (the attacker's loop)."""

    def __init__(self, port: int, n: int):
        self.port, self.sockets, self.reopened = port, [], 0
        for i in range(n):
            self.sockets.append(self._open(i))

    def _open(self, i: int) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setblocking(False)
        if i % 2:
            s.send(b"GET /v1/models HTTP/1.1\r\nHo")
        return s

    def refill(self) -> None:
        for i, s in enumerate(self.sockets):
            try:
                s.recv(4096)  # a 408 or the end: the server closed it (it sends nothing else here)
            except BlockingIOError:
                continue  # still open, still waiting
            except OSError:
                pass
            s.close()
            self.sockets[i] = self._open(i)
            self.reopened += 1

    def close(self) -> None:
        for s in self.sockets:
            s.close()


def test_a_flood_of_idle_connections_opened_again_and_again_leaves_room_for_keyed_requests(serve):
    server = serve(header_timeout_s=120)  # the default 256 places; the header deadline is not what saves us
    connections = server._uvicorn.server_state.connections
    flood = Flood(server.port, 300)
    wait_until(lambda: len(connections) >= server.config.max_connections - 1, 30)  # every place taken
    stop = threading.Event()

    def attacker():
        for _ in range(2000):  # bounded: at most ~100 s
            if stop.wait(0.05):
                return
            flood.refill()

    thread = threading.Thread(target=attacker, daemon=True)
    thread.start()
    try:
        for _ in range(5):
            status, response = raw(server.port, request(server.port, "/v1/models"), timeout=30)
            assert status == 200, response[:300]  # was 503 "Exceeded concurrency limit" for as long as it lasted
            assert len(connections) <= server.config.max_connections
        wait_until(lambda: flood.reopened >= 44, 30)  # the flood's oldest were closed for them
    finally:
        stop.set()
        thread.join(10)
        flood.close()


# ---- one program, many streams -----------------------------------------------------------------

OTHER_PROGRAM = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60)
s.sendall(sys.stdin.buffer.read())
data = b""
while chunk := s.recv(65536):
    data += chunk
print(data.split(b" ", 2)[1].decode())
"""


def test_a_program_holding_17_streams_gets_its_own_429s_and_another_program_is_served(serve, fakes, make_assistant):
    server = serve(make_assistant(str(fakes.model_file("m"))))  # queue_depth 16: at most 8 waiting per client
    gate = Gate(lambda backend, n: n == 0, timeout=60)
    fakes.backend("m").on_sample.append(gate)
    ask = {"model": "L1", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    statuses: list[int] = []

    def stream() -> None:
        with httpx.stream("POST", server.url + "/chat/completions", json=ask, headers=HEADERS, timeout=60) as r:
            r.read()
            statuses.append(r.status_code if r.status_code != 429 else r.json()["error"]["code"])

    threads = [threading.Thread(target=stream) for _ in range(17)]
    threads[0].start()
    assert gate.reached.wait(10)  # the first stream holds the engine
    for t in threads[1:]:
        t.start()
    wait_until(lambda: len(server.queue) == 8 and len(statuses) == 8, 30)
    assert statuses == ["client_queue_full"] * 8  # this program's own 429s

    other = subprocess.Popen([sys.executable, "-c", OTHER_PROGRAM, str(server.port)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=False)
    other.stdin.write(request(server.port, "/v1/chat/completions", ask))
    other.stdin.close()
    try:
        wait_until(lambda: len(server.queue) == 9, 30)  # another program still finds room
        gate.release()
        out = other.stdout.read()
        other.wait(60)
    finally:
        other.kill()
    for t in threads:
        t.join(30)
    assert out.decode().strip() == "200"
    assert sorted(statuses, key=str) == [200] * 9 + ["client_queue_full"] * 8


# ---- embeddings ---------------------------------------------------------------------------------

@pytest.fixture
def with_embedder(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    a.memory = MemoryService(a.db, Embedder(), vector_backend="numpy").start()
    assert a.memory.embedder.wait(120), a.memory.embedder.state
    yield a
    a.memory.close()
    a.memory.embedder.close()
    a.memory = None


@pytest.mark.model
def test_abandoned_embeddings_requests_stop_and_a_small_one_is_answered(serve, with_embedder):
    a = with_embedder
    embedded: list[int] = []
    real = a.embed

    def counted(texts, *args, **kwargs):
        vectors = real(texts, *args, **kwargs)
        embedded.append(len(texts))  # once computed: what the engine spent
        return vectors

    a.embed = counted
    server = serve(a)
    big = {"input": [f"text {i}: " + "the kettle's warranty lasts three years " * 5 for i in range(2048)]}
    abandoned = []
    for n in range(6):
        s = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        s.sendall(request(server.port, "/v1/embeddings", big))
        abandoned.append(s)
        wait_until(lambda: len(server.queue) + (server.engine.running is not None) == n + 1, 30)  # noqa: B023
    wait_until(lambda: len(embedded) >= 1, 30)  # the first one is being computed, a slice at a time
    before = sum(embedded)
    for s in abandoned:
        s.close()
    r = httpx.post(server.url + "/embeddings", json={"input": "a small one"}, headers=HEADERS, timeout=60)
    assert r.status_code == 200 and len(r.json()["data"]) == 1
    wait_until(lambda: server.engine.running is None and len(server.queue) == 0, 30)
    # The six (12 288 texts) stopped: at most the slices already running when their clients left.
    assert sum(embedded) - before <= 2 * EMBED_SLICE + 1, embedded


# ---- the 7.9 MB request, against `assistant serve` in a process of its own -----------------------

RSS_LIMIT = 1536 * 1024 * 1024
SERVE_KEY = "sk-test-exhaustion-0123456789abcdef"
SERVE_HEADERS = {"Authorization": f"Bearer {SERVE_KEY}"}
LONG = ("The kettle's warranty lasts three years and covers the heating element and the lid. " * 50)[:3900]


@pytest.mark.model
def test_a_7_9_mb_embeddings_request_is_refused_and_long_inputs_stay_under_1_5_gb(assistant_home, model_paths,
                                                                                 tmp_path):
    with assistant_serve(assistant_home, model_paths["demo-small"], SERVE_KEY, tmp_path / "serve.log") as (proc, url):
        url += "/embeddings"
        warm = httpx.post(url, json={"input": "warm up"}, headers=SERVE_HEADERS, timeout=120)  # the model loaded
        assert warm.status_code == 200, warm.text
        baseline, _ = memory(proc.pid)

        # 2 048 inputs × 3 900 characters: 7.9 MB, under the 8 MB body limit; 524 288 tokens to the model.
        huge = {"input": [LONG] * 2048}
        assert len(json.dumps(huge)) > 7_900_000
        r, peak_huge = post_watched(proc, url, RSS_LIMIT, json=huge, headers=SERVE_HEADERS)
        assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_tokens", r.text[:500]
        assert "131072" in r.json()["error"]["message"]

        # Within the budget: 96 long inputs (24 576 tokens), which in one run of the graph took ~1.9 GB.
        r, peak_long = post_watched(proc, url, RSS_LIMIT, json={"input": [LONG] * 96}, headers=SERVE_HEADERS)
        assert r.status_code == 200 and len(r.json()["data"]) == 96
        after, hwm = memory(proc.pid)
        print(f"RSS baseline {baseline >> 20} MiB, peak while refusing {peak_huge >> 20} MiB, peak while embedding "
              f"{peak_long >> 20} MiB, VmHWM {hwm >> 20} MiB, after {after >> 20} MiB")
        assert hwm < RSS_LIMIT
        assert after - baseline < 200 * 1024 * 1024  # the runtime hands its arena back after each run
