"""The fair queue against a program that names a new `user` in every request (issue 37). `user` is a
label the client chooses: before, each label was a client of its own, so one program filled the
whole queue (16) and another program got 429 `queue_full`. Now the queue takes turns between
programs, and a program's users share its half of the queue. Loopback only; every loop bounded."""

from __future__ import annotations

import subprocess
import sys
import threading

import httpx
import pytest

from engine.server.fair_queue import Client, FairQueue, QueueFull
from tests.fake_backend import Gate, fakes, make_assistant, wait_until  # noqa: F401
from tests.reliability.test_api_exhaustion import HEADERS, OTHER_PROGRAM
from tests.server_util import request, serve  # noqa: F401


def test_the_queue_takes_turns_between_peers_then_their_users_and_caps_a_peer_whatever_its_users():
    q: FairQueue[str] = FairQueue(depth=6)  # 3 per client
    q.put(Client("pid:1", "user:x"), "x1")
    q.put(Client("pid:1", "user:x"), "x2")
    q.put(Client("pid:1", "user:y"), "y1")
    with pytest.raises(QueueFull) as own:
        q.put(Client("pid:1", "user:z"), "z1")  # a new label is the same program
    assert own.value.code == "client_queue_full"
    q.put(Client("pid:2"), "b1")
    q.put("pid:2", "b2")  # a key without users is the peer's "" user
    assert q.get(0) == "x1"
    q.put_back(Client("pid:1", "user:x"), "x1")  # had its turn: after pid:2, and within pid:1 after y
    assert [q.get(0) for _ in range(6)] == ["b1", "y1", "b2", "x1", "x2", None]
    q.put(Client("pid:1", "user:x"), "x3")
    assert q.remove(Client("pid:1", "user:x"), "x3") and not q.remove(Client("pid:1", "user:y"), "x3")
    assert len(q) == 0 and q.close() == []


def test_a_program_naming_a_new_user_each_request_fills_its_own_share_and_another_program_is_served(
        serve, fakes, make_assistant):
    server = serve(make_assistant(str(fakes.model_file("m"))))  # queue_depth 16: at most 8 waiting per client
    gate = Gate(lambda backend, n: n == 0, timeout=60)
    fakes.backend("m").on_sample.append(gate)
    statuses: list[int | str] = []

    def stream(user: str) -> None:
        ask = {"model": "L1", "stream": True, "user": user, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.stream("POST", server.url + "/chat/completions", json=ask, headers=HEADERS, timeout=60) as r:
            r.read()
            statuses.append(r.status_code if r.status_code != 429 else r.json()["error"]["code"])

    threads = [threading.Thread(target=stream, args=(f"label-{i}",)) for i in range(17)]
    threads[0].start()
    assert gate.reached.wait(10)  # the first stream holds the engine
    for t in threads[1:]:
        t.start()
    wait_until(lambda: len(server.queue) + len(statuses) == 16, 30)
    assert len(server.queue) == 8  # before: 16, one client per label
    assert statuses == ["client_queue_full"] * 8  # this program's own 429s, whatever it calls itself

    other = subprocess.Popen([sys.executable, "-c", OTHER_PROGRAM, str(server.port)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=False)
    ask = {"model": "L1", "messages": [{"role": "user", "content": "hi"}]}
    other.stdin.write(request(server.port, "/v1/chat/completions", ask))
    other.stdin.close()
    try:
        wait_until(lambda: len(server.queue) == 9 or other.poll() is not None, 30)
        gate.release()
        out = other.stdout.read()
        other.wait(60)
    finally:
        other.kill()
    for t in threads:
        t.join(30)
    assert out.decode().strip() == "200"  # before: 429 queue_full
    assert sorted(statuses, key=str) == [200] * 9 + ["client_queue_full"] * 8
