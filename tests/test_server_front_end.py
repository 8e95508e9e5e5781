"""The local API server on a front-end's own engine thread (`serve_in_background(..., post=...)`):
jobs run on that thread, take turns with the front-end's own work, and a job still waiting there
when the server stops ends at once without reaching the Assistant. The window's QThread does the
same with a queued signal (tests/app/test_api_server_setting.py)."""

from __future__ import annotations

import queue
import socket
import threading

import httpx
import pytest

from engine.api import GenerateParams, Settings
from engine.server import load_api_key, serve_in_background
from tests.fake_backend import fakes, make_assistant, wait_until  # noqa: F401
from tests.server_util import KEY

CHAT = {"model": "L1", "max_tokens": 8}


class FrontEnd:
    """A front-end's engine thread: runs what is posted, in order (as the window's QThread does)."""

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.closed = False
        self.thread = threading.Thread(target=self._run, name="front-end-engine", daemon=True)
        self.thread.start()

    def post(self, fn) -> None:
        if self.closed:
            raise RuntimeError("the front-end's engine has closed")
        self._jobs.put(fn)

    def _run(self) -> None:
        while (fn := self._jobs.get()) is not None:
            fn()

    def close(self) -> None:
        self.closed = True
        self._jobs.put(None)
        self.thread.join(10)


@pytest.fixture
def front():
    f = FrontEnd()
    yield f
    f.close()


def record_sends(assistant) -> list[tuple[str, str]]:
    """(thread name, message) of every Assistant.send, in the order they start."""
    calls: list[tuple[str, str]] = []
    send = assistant.send

    def recorded(cid, text, *args, **kwargs):
        calls.append((threading.current_thread().name, text))
        yield from send(cid, text, *args, **kwargs)

    assistant.send = recorded
    return calls


def ask(server, text: str, results: dict) -> threading.Thread:
    def go():
        results[text] = httpx.post(server.url + "/chat/completions", timeout=30,
                                   json=CHAT | {"messages": [{"role": "user", "content": text}]},
                                   headers={"Authorization": f"Bearer {KEY}"})

    t = threading.Thread(target=go)
    t.start()
    return t


def test_jobs_run_on_the_front_ends_thread_taking_turns_with_its_own(front, fakes, make_assistant):
    assistant = make_assistant(str(fakes.model_file("m")))
    calls = record_sends(assistant)
    server = serve_in_background(assistant, Settings(), post=front.post, port=0, api_key=KEY)
    try:
        assert server.engine._thread.name == "api-dispatch"
        assert load_api_key(create=False) is None  # a key given for the run leaves the key file alone
        busy = threading.Event()
        front.post(busy.wait)  # the front-end is in the middle of something of its own
        results: dict = {}
        threads = [ask(server, "api one", results)]
        wait_until(lambda: server.engine.running is not None)  # posted, waiting behind the front-end's work
        threads.append(ask(server, "api two", results))
        wait_until(lambda: len(server.queue) == 1)  # not posted: one API job at a time
        # The front-end's own turn, on its thread (the Assistant's owner, engine/config/ownership.py).
        front.post(lambda: list(assistant.send(assistant.new_conversation(), "window", GenerateParams(max_tokens=8))))
        busy.set()
        for t in threads:
            t.join(30)
        assert [r.status_code for r in results.values()] == [200, 200]
        # The front-end's turn, posted while the first API job waited, goes before the second.
        assert calls == [("front-end-engine", "api one"), ("front-end-engine", "window"),
                         ("front-end-engine", "api two")]
    finally:
        server.stop()
    assert not server.engine.alive


def test_stop_ends_a_job_still_waiting_on_the_front_end_and_closes_the_port(front, fakes, make_assistant):
    assistant = make_assistant(str(fakes.model_file("m")))
    calls = record_sends(assistant)
    server = serve_in_background(assistant, Settings(), post=front.post, port=0, api_key=KEY)
    port = server.port
    busy = threading.Event()
    front.post(busy.wait)
    results: dict = {}
    waiting = ask(server, "api", results)
    wait_until(lambda: server.engine.running is not None)
    stopping = threading.Thread(target=server.stop)
    stopping.start()
    waiting.join(15)
    assert results["api"].status_code == 503  # answered at once, the front-end still busy

    def closed() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return False
        except ConnectionRefusedError:
            return True

    wait_until(closed, 15)
    busy.set()
    stopping.join(30)
    assert not stopping.is_alive() and not server.engine.alive
    assert calls == [] and fakes.backend("m").samples == 0  # it never reached the Assistant


def test_a_front_end_that_has_closed_fails_the_request(fakes, make_assistant):
    front = FrontEnd()
    assistant = make_assistant(str(fakes.model_file("m")))
    server = serve_in_background(assistant, Settings(), post=front.post, port=0, api_key=KEY)
    try:
        wait_until(lambda: front._jobs.empty())  # the start's tidy-up ran
        front.close()
        r = httpx.post(server.url + "/chat/completions", timeout=30, headers={"Authorization": f"Bearer {KEY}"},
                       json=CHAT | {"messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 503 and r.json()["error"]["message"] == "the front-end's engine has closed"
    finally:
        server.stop(timeout=5)


def test_a_windowed_app_without_stdout_can_serve(front, fakes, make_assistant, monkeypatch):
    """A windowed Windows build has no sys.stdout: uvicorn's own log setup asks stdout whether it is
    a terminal, so serving beside a front-end leaves logging to the front-end."""
    monkeypatch.setattr("sys.stdout", None)
    monkeypatch.setattr("sys.stderr", None)
    server = serve_in_background(make_assistant(str(fakes.model_file("m"))), Settings(), post=front.post, port=0,
                                 api_key=KEY)
    try:
        r = httpx.get(server.url + "/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
        assert r.status_code == 200
    finally:
        server.stop()
