"""L3 against a real OpenAI-compatible server on loopback; errors without one."""

import http.server
import threading

import pytest

from engine.inference.backend import SamplingParams
from engine.inference.events import Chunk, GenerateParams, TurnResult
from engine.inference.remote import RemoteClient, RemoteConfig, RemoteError, validate_base_url

from .l3_server import LoopbackServer, free_port

PARAMS = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=16)


@pytest.fixture(scope="module")
def l3(model_paths):
    server = LoopbackServer(model_paths["demo-small"])
    yield server
    server.stop()


def test_streams_an_answer(l3):
    client = RemoteClient(RemoteConfig(l3.url))
    try:
        items = list(client.stream_chat([{"role": "user", "content": "Say hello."}], PARAMS))
    finally:
        client.close()
    result = items[-1]
    assert isinstance(result, TurnResult) and all(isinstance(c, Chunk) for c in items[:-1])
    assert result.text and result.text == "".join(c.text for c in items[:-1])
    assert result.stats.completion_tokens > 0 and result.stats.cache_mode == "remote"
    assert result.stats.ttft_ms > 0


@pytest.mark.parametrize("url", ["", "ftp://x", "not a url", "http://:80", "http://host:99999"])
def test_malformed_urls_are_rejected(url):
    with pytest.raises(RemoteError) as err:
        validate_base_url(url)
    assert err.value.kind == "bad_url"


def test_unreachable_is_reported_after_retries():
    client = RemoteClient(RemoteConfig(f"http://127.0.0.1:{free_port()}", retries=1, backoff_s=0.01))
    with pytest.raises(RemoteError) as err:
        list(client.stream_chat([{"role": "user", "content": "hi"}], PARAMS))
    assert err.value.kind == "unreachable" and err.value.unavailable


class _Scripted(http.server.BaseHTTPRequestHandler):
    """A misbehaving endpoint: each request pops the next (status, body, headers) reply."""

    replies: list = []
    calls = 0

    def do_POST(self):  # noqa: N802 - http.server API
        type(self).calls += 1
        status, body, headers = self.replies.pop(0)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Scripted.calls = 0
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


SSE = {"Content-Type": "text/event-stream"}


@pytest.mark.parametrize("replies,kind,calls", [
    ([(401, b'{"error":"bad key"}', {})], "auth", 1),
    ([(500, b"boom", {}), (500, b"boom", {}), (500, b"boom", {})], "server", 3),
    ([(429, b"slow down", {"Retry-After": "0"})] * 3, "rate_limited", 3),
    ([(200, b"data: {not json}\n\n", SSE)], "protocol", 1),
    ([(200, b"<html>hello</html>\n", SSE)], "protocol", 1),
    ([(400, b"bad request", {})], "client", 1),
])
def test_endpoint_errors_are_clear(scripted, replies, kind, calls):
    _, url = scripted
    _Scripted.replies = list(replies)
    client = RemoteClient(RemoteConfig(url, retries=2, backoff_s=0.01))
    with pytest.raises(RemoteError) as err:
        list(client.stream_chat([{"role": "user", "content": "hi"}], PARAMS))
    assert err.value.kind == kind and _Scripted.calls == calls
    assert str(err.value)


def test_retry_then_success(scripted):
    _, url = scripted
    ok = b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
    _Scripted.replies = [(503, b"busy", {}), (200, ok, SSE)]
    client = RemoteClient(RemoteConfig(url, retries=2, backoff_s=0.01))
    result = list(client.stream_chat([{"role": "user", "content": "hi"}], PARAMS))[-1]
    assert result.text == "hi" and result.stats.finish_reason == "stop" and _Scripted.calls == 2
    assert result.stats.tokens_estimated
