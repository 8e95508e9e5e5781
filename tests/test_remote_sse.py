"""The L3 client against scripted endpoints on loopback: every valid server-sent-events form is read
as the spec says, errors sent inside the stream are reported, and Stop ends a turn at once even
while the server sends nothing."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine.inference.backend import SamplingParams
from engine.inference.events import Chunk, GenerateParams, TurnResult
from engine.inference.remote import RemoteClient, RemoteConfig, RemoteError

PARAMS = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=16)
MESSAGES = [{"role": "user", "content": "hi"}]
HEADERS, HOLD = object(), object()
HOLD_S = 8  # how long a silent endpoint stays silent (a client that ignores Stop waits this long)


def delta(text: str) -> bytes:
    return json.dumps({"choices": [{"delta": {"content": text}}]}, ensure_ascii=False).encode()


class ScriptedEndpoint:
    """Plays `script` to each POST: HEADERS sends the 200 + event-stream headers, bytes are sent
    as they are, HOLD keeps the connection open and silent (until `stop()` or HOLD_S)."""

    def __init__(self, script: list):
        self.script = script
        self.released = threading.Event()
        self.holding = threading.Event()  # a HOLD has begun: the client is waiting on a silent server
        self.hold_over = threading.Event()  # a HOLD has ended (stop() or HOLD_S)
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server API
                self.rfile.read(int(self.headers["Content-Length"]))
                try:
                    for step in endpoint.script:
                        if step is HEADERS:
                            self.send_response(200)
                            self.send_header("Content-Type", "text/event-stream")
                            self.end_headers()
                        elif step is HOLD:
                            endpoint.holding.set()
                            endpoint.released.wait(HOLD_S)
                            endpoint.hold_over.set()
                        else:
                            self.wfile.write(step)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up (Stop)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self):
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def endpoint():
    made = []
    yield lambda script: made.append(ScriptedEndpoint(script)) or made[-1]
    for e in made:
        e.stop()


def client_for(endpoint, **kw) -> RemoteClient:
    return RemoteClient(RemoteConfig(endpoint.url, retries=0, **kw))


def test_every_valid_sse_form_is_read(endpoint):
    server = endpoint([HEADERS,
                       b"\xef\xbb\xbf: a comment line (and a byte order mark before it)\n",
                       b"retry: 3000\n",
                       b"id: 1\n",
                       b"event: message\n",
                       b"data: " + delta("Hel") + b"\n\n",
                       b"id: 2\r\n",
                       # one event over two data lines (joined by a newline, which JSON allows),
                       # CRLF line ends, and a U+2028 inside the JSON string (not a line end in SSE)
                       b'data: {"choices": [{"delta":\r\n',
                       b'data: {"content": "lo\xe2\x80\xa8there"}}]}\r\n\r\n',
                       b": keep-alive\r\r",  # CR alone ends a line too
                       b'data:{"choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n',  # no space
                       b"data: [DONE]\n\n"])
    client = client_for(server)
    try:
        items = list(client.stream_chat(MESSAGES, PARAMS))
    finally:
        client.close()
    result = items[-1]
    assert isinstance(result, TurnResult) and all(isinstance(c, Chunk) for c in items[:-1])
    assert [c.text for c in items[:-1]] == ["Hel", "lo\u2028there"]
    assert result.text == "Hello\u2028there" and result.stats.finish_reason == "stop"


@pytest.mark.parametrize("error", [
    b'event: error\ndata: {"error": {"message": "model crashed"}}\n\n',  # an error event
    b'error: {"code": 500, "message": "model crashed"}\n\n',  # llama.cpp's server's own line
    b'data: {"error": {"message": "model crashed", "type": "server_error"}}\n\n',  # OpenAI's form
])
def test_an_error_sent_inside_the_stream_is_reported(endpoint, error):
    server = endpoint([HEADERS, b"data: " + delta("Hel") + b"\n\n", error, b"data: [DONE]\n\n"])
    client = client_for(server)
    shown = []
    try:
        with pytest.raises(RemoteError) as err:
            for item in client.stream_chat(MESSAGES, PARAMS):
                shown.append(item.text)
    finally:
        client.close()
    assert err.value.kind == "server" and "model crashed" in str(err.value)
    assert shown == ["Hel"]


def cancel_when_silent(server: ScriptedEndpoint, cancel: threading.Event) -> None:
    """Press Stop once the server has gone silent (not after a guessed delay, which a slow start
    could outrun: Stop before the request would test another path)."""
    threading.Thread(target=lambda: server.holding.wait(60) and cancel.set(), daemon=True).start()


def wait_for_no_stream_thread() -> None:
    """The connection is let go, not left reading in the background."""
    deadline = time.monotonic() + 60
    while any(t.name == "l3-stream" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(t.name == "l3-stream" for t in threading.enumerate())


def test_stop_ends_the_turn_while_the_server_is_silent_mid_answer(endpoint):
    server = endpoint([HEADERS, b"data: " + delta("Partial") + b"\n\n", HOLD])
    client = client_for(server, read_timeout_s=60)
    cancel = threading.Event()
    try:
        stream = client.stream_chat(MESSAGES, PARAMS, cancel)
        assert next(stream).text == "Partial"
        cancel_when_silent(server, cancel)  # the user presses Stop while the generator waits for the server
        t0 = time.monotonic()
        rest = list(stream)
        elapsed = time.monotonic() - t0
    finally:
        client.close()
    [result] = rest
    assert result.stats.finish_reason == "cancelled" and result.text == "Partial"
    assert not server.hold_over.is_set()  # ended while the server still held it silent, not at HOLD_S
    assert elapsed < 3, elapsed  # a generous stall probe: the stream stops within CANCEL_POLL_S of Stop
    wait_for_no_stream_thread()


def test_stop_ends_the_turn_while_the_server_has_not_answered_yet(endpoint):
    server = endpoint([HOLD, HEADERS, b"data: " + delta("late") + b"\n\n", b"data: [DONE]\n\n"])
    client = client_for(server, read_timeout_s=60)
    cancel = threading.Event()
    cancel_when_silent(server, cancel)
    t0 = time.monotonic()
    try:
        items = list(client.stream_chat(MESSAGES, PARAMS, cancel))
    finally:
        client.close()
    elapsed = time.monotonic() - t0
    [result] = items
    assert result.stats.finish_reason == "cancelled" and result.text == ""
    assert not server.hold_over.is_set()  # ended while the server still held it silent
    assert elapsed < 3, elapsed  # the same generous stall probe


def test_a_client_is_reusable_after_a_stopped_turn(endpoint):
    silent = endpoint([HEADERS, b"data: " + delta("a") + b"\n\n", HOLD])
    client = client_for(silent)
    cancel = threading.Event()
    try:
        stream = client.stream_chat(MESSAGES, PARAMS, cancel)
        next(stream)
        cancel.set()
        assert list(stream)[-1].stats.finish_reason == "cancelled"
        silent.script = [HEADERS, b"data: " + delta("again") + b"\n\n", b"data: [DONE]\n\n"]
        assert list(client.stream_chat(MESSAGES, PARAMS))[-1].text == "again"
    finally:
        client.close()


def test_tools_pass_through_to_the_endpoint_and_its_streamed_calls_come_back(endpoint):
    """L3 (issue 26): the turn's tools and choice go in the request; calls streamed in OpenAI's
    pieces (id and name once, arguments in parts) come back whole; a call to a tool the turn did not
    offer is dropped."""
    from engine.api import ToolUse, parse_tools

    def piece(calls):
        return b"data: " + json.dumps({"choices": [{"delta": {"tool_calls": calls}}]}).encode() + b"\n\n"

    server = endpoint([HEADERS,
                       piece([{"index": 0, "id": "call_a", "type": "function",
                               "function": {"name": "add", "arguments": '{"a": '}}]),
                       piece([{"index": 0, "function": {"arguments": "2, \"b\": 3}"}}]),
                       piece([{"index": 1, "id": "call_b", "function": {"name": "rm_rf", "arguments": "{}"}}]),
                       b'data: {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]}\n\n',
                       b"data: [DONE]\n\n"])
    tools = parse_tools([{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}])
    client = client_for(server)
    try:
        body = client._body(MESSAGES, GenerateParams(tools=ToolUse(tools, "add", parallel=False)))
        items = list(client.stream_chat(MESSAGES, GenerateParams(tools=ToolUse(tools))))
    finally:
        client.close()
    assert body["tools"][0]["function"]["name"] == "add" and body["parallel_tool_calls"] is False
    assert body["tool_choice"] == {"type": "function", "function": {"name": "add"}}
    result = items[-1]
    assert result.stats.finish_reason == "tool_calls"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in result.tool_calls] == [("call_a", "add", {"a": 2, "b": 3})]
