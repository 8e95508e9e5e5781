"""A lone surrogate (`"\\ud800"`: JSON that parses to a str no UTF-8 codec takes) anywhere in an API
request: every field is cleaned at the front door as the engine cleans a message (the half pair
becomes "?"), so nothing past it meets a string it cannot encode. Before: an embeddings input was a
500 (TypeError in the tokenizer), and so was a tool call's id (UnicodeEncodeError in SQLite)."""

from __future__ import annotations

import json

import httpx
import numpy as np

from engine.memory.embedder import Embedder
from engine.memory.service import MemoryService
from tests.fake_backend import fakes, make_assistant  # noqa: F401
from tests.server_util import KEY, serve  # noqa: F401
from tests.test_docs_index import embedder  # noqa: F401
from tests.test_docs_turns import docs  # noqa: F401

HALF = "\ud800"
HEADERS = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}


def post(server, path: str, body: dict) -> httpx.Response:
    # json.dumps writes the half pair as its escape, as a client's JSON library would; httpx's own
    # encoder refuses it.
    return httpx.post(server.url + path, content=json.dumps(body).encode(), headers=HEADERS, timeout=60)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


CHATS = {
    "message": {"messages": user(f"hi {HALF}")},
    "system message": {"messages": [{"role": "system", "content": HALF}] + user("hi")},
    "streamed": {"stream": True, "messages": user(f"hi {HALF}")},
    "user": {"user": HALF, "messages": user("hi")},
    "stop": {"stop": [HALF, f"a{HALF}"], "messages": user("hi")},
    "x_docs collection": {"x_docs": HALF, "messages": user("warranty")},
    "x_docs question": {"x_docs": True, "messages": user(f"warranty {HALF}")},
    "tool call": {"messages": user("hi") + [
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": HALF, "type": "function", "function": {"name": f"f{HALF}", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": HALF, "content": HALF}]},
    "tool definition": {"messages": user("hi"), "tools": [{"type": "function", "function": {
        "name": "f", "description": HALF,
        "parameters": {"type": "object", "properties": {HALF: {"type": "string"}}}}}]},
}
COMPLETIONS = {"prompt": {"prompt": f"hi {HALF}"}, "stop": {"prompt": "hi", "stop": HALF},
               "user": {"prompt": "hi", "user": HALF}}


def test_a_lone_surrogate_in_any_field_is_cleaned_never_a_500(serve, fakes, make_assistant, docs):  # noqa: F811
    a = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=400)
    a.memory = MemoryService(a.db, Embedder(), vector_backend="numpy").start()
    try:
        assert a.memory.embedder.wait(120), a.memory.embedder.state
        server = serve(a, allow_docs=True)

        r = post(server, "/embeddings", {"input": [f"a{HALF}b", HALF, "a?b"]})
        assert r.status_code == 200, r.text[:300]
        got = np.array([d["embedding"] for d in r.json()["data"]])
        assert np.allclose(got[0], got[2], atol=1e-6)  # embedded as the cleaned text, "a?b"
        assert post(server, "/embeddings", {"input": HALF}).status_code == 200

        answers = {f"chat {name}": post(server, "/chat/completions", {"model": "L1"} | body).status_code
                   for name, body in CHATS.items()}
        answers |= {f"completion {name}": post(server, "/completions", {"model": "L1"} | body).status_code
                    for name, body in COMPLETIONS.items()}
        assert set(answers.values()) == {200}, answers
        r = post(server, "/chat/completions", {"model": HALF, "messages": user("hi")})
        assert r.status_code == 404 and "'?'" in r.json()["error"]["message"]
    finally:
        a.memory.close()
        a.memory.embedder.close()
        a.memory = None
