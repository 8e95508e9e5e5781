"""The local API server (issue 16) with real clients on loopback: the official `openai` package and
LangChain's ChatOpenAI, against a real uvicorn around an Assistant on the scripted fake backend.
Counts are exact: the fake records every token it evaluates and samples."""

from __future__ import annotations

import json
import math
import socket
import threading
import time

import httpx
import numpy as np
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from openai import OpenAI

from engine.api import InputError
from engine.memory.embedder import Embedder
from engine.memory.service import MemoryService
from tests.fake_backend import Answer, Gate, fakes, make_assistant, wait_until  # noqa: F401
from tests.server_util import KEY, request, serve  # noqa: F401
from tests.test_docs_turns import docs  # noqa: F401
from tests.test_docs_index import embedder  # noqa: F401

SYSTEM = "<|im_start|>system\nBe brief.<|im_end|>\n"
FIRST = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
NEXT = "<|im_end|>\n" + FIRST  # what a turn after an answer adds
AHEAD = "<|im_end|>\n<|im_start|>user\n"  # its start: evaluated once an API chat answer is out


def client(server) -> OpenAI:
    return OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=30)


def tokens(fake, text: str) -> int:
    return len(fake.vocab.tokenize(text, special=True))


def post(server, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30, **kw)


# ---- the official client

def test_openai_client_lists_models_and_chats_whole_and_streamed(serve, fakes):
    server = serve()
    fake = fakes.backend("m")
    c = client(server)
    ids = [m.id for m in c.models.list()]
    assert ids[:4] == ["auto", "L1", "L2", "L3"] and "demo-small" in ids  # the demo files are installed
    assert c.models.retrieve("L2").id == "L2"

    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    r = c.chat.completions.create(model="auto", messages=messages)
    assert r.choices[0].message.content == "Answer 1." and r.choices[0].finish_reason == "stop"
    prompt = tokens(fake, SYSTEM + FIRST.format("hi"))
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == (prompt, 9, prompt + 9)
    assert r.usage.prompt_tokens_details.cached_tokens == 0 and r.model == "auto"
    assert r.model_extra["x_model"] == "m" and r.model_extra["x_level"] in ("L1", "L2")
    assert 0 < r.model_extra["x_confidence"] <= 1  # the geometric mean of its token probabilities

    messages += [{"role": "assistant", "content": "Answer 1."}, {"role": "user", "content": "more"}]
    chunks = list(c.chat.completions.create(model="auto", messages=messages, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "Answer 2."
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "stop"
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage.completion_tokens == 9
    # the first turn's prompt, its answer and the next turn's opening markers (read ahead once the
    # answer was out) came from the cache; only the rest of the new turn was read
    assert usage.prompt_tokens_details.cached_tokens == prompt + 9 + tokens(fake, AHEAD)
    assert (usage.prompt_tokens - usage.prompt_tokens_details.cached_tokens
            == tokens(fake, NEXT.format("more")) - tokens(fake, AHEAD))

    done = c.completions.create(model="L1", prompt="Say hi")
    assert done.choices[0].text == "Answer 3." and done.object == "text_completion"
    streamed = list(c.completions.create(model="L1", prompt="Say hi", stream=True))
    assert "".join(ch.choices[0].text for ch in streamed if ch.choices) == "Answer 4."


def test_sampling_stop_max_tokens_and_logprobs_reach_the_engine(serve, fakes):
    server = serve()
    fake = fakes.backend("m")
    seen = []
    make_sampler = fake.make_sampler
    fake.make_sampler = lambda p: (seen.append(p), make_sampler(p))[1]
    c = client(server)
    fakes.script("m").enqueue(Answer("one two three four", logprob=math.log(0.5)))
    r = c.chat.completions.create(model="L1", messages=[{"role": "user", "content": "count"}], temperature=0.2,
                                  top_p=0.5, seed=-1, stop=["three"], logprobs=True)
    assert r.choices[0].message.content == "one two " and r.choices[0].finish_reason == "stop"
    assert r.model_extra["x_finish_reason"] == "stop_string"
    p = seen[-1]
    assert (p.temperature, p.top_p, p.seed) == (0.2, 0.5, 2**32 - 1)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens and all(math.isclose(t.logprob, math.log(0.5)) for t in lp)
    r = c.chat.completions.create(model="L1", messages=[{"role": "user", "content": "count"}], max_tokens=3)
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3


BAD = [  # (body, the parameter the error names)
    ({"messages": "hello"}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}, "messages"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]}, "messages[1].role"),
    ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),  # more: test_server_tools
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0].image_url"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://10.0.0.1/"}}]}]},
     "messages[0].content[0].image_url"),  # fetched by no one: offline, no SSRF
    ({"messages": [{"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]},
                   {"role": "user", "content": "hi"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "audio", "data": "x"}]}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "hi"}], "temperature": 9}, "temperature"),
    ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ({"messages": [{"role": "user", "content": "hi"}], "stop": ["a", 1]}, "stop"),
    ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]}, "tools[0].function"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "stream"),
    ({"messages": [{"role": "user", "content": "hi"}], "stream_options": {"include_usage": True}}, "stream_options"),
    ({"messages": [{"role": "user", "content": "hi"}], "x_docs": 3}, "x_docs"),
]


def test_malformed_requests_get_400_naming_the_parameter(serve):
    server = serve()
    for body, param in BAD:
        r = post(server, "/chat/completions", body)
        assert (r.status_code, r.json()["error"]["param"]) == (400, param), body
    r = post(server, "/chat/completions", {"model": "gpt-4", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert post(server, "/completions", {"prompt": ["a", "b"]}).json()["error"]["param"] == "prompt"
    assert server.assistant.conversations() == []  # nothing reached the engine


# ---- stateless clients, stateful engine

def test_a_conversation_made_from_earlier_turns_reads_them_on_its_next_turn(fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    fake = fakes.backend("m")
    cid = a.new_conversation_from([("user", "hi"), ("assistant", "Hello there.")], "Be brief.")
    assert [(m["role"], m["content"]) for m in a.transcript(cid)] == [("user", "hi"), ("assistant", "Hello there.")]
    assert list(a.send(cid, "and?"))[-1].text == "Answer 1."
    assert fake.prompts[-1] == fake.vocab.tokenize(SYSTEM + FIRST.format("hi") + "Hello there." + NEXT.format("and?"),
                                             special=True)
    with pytest.raises(InputError, match="user, assistant or tool"):
        a.new_conversation_from([("wizard", "42")])


def test_a_resent_history_evaluates_only_its_new_turn_across_clients_taking_turns(serve, fakes):
    server = serve()
    a, fake, c = server.assistant, fakes.backend("m"), client(server)
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    r1 = c.chat.completions.create(model="L1", messages=history)
    assert r1.usage.prompt_tokens_details.cached_tokens == 0
    kv = fake.kv  # the first prompt, its answer and the next turn's opening, read ahead
    assert len(kv) == r1.usage.prompt_tokens + r1.usage.completion_tokens + tokens(fake, AHEAD)
    assert fake.vocab.detokenize(kv).endswith("Answer 1." + AHEAD.replace("<|im_end|>", "").replace("<|im_start|>", ""))

    history += [{"role": "assistant", "content": r1.choices[0].message.content},
                {"role": "user", "content": "how are you?"}]
    start = fake.evaluated
    r2 = c.chat.completions.create(model="L1", messages=history)
    new = tokens(fake, NEXT.format("how are you?"))
    assert r2.usage.prompt_tokens_details.cached_tokens == len(kv)
    assert r2.usage.prompt_tokens == len(kv) - tokens(fake, AHEAD) + new
    # the rest of the new turn, the answer, then the opening of the turn after
    assert fake.evaluated - start == new - tokens(fake, AHEAD) + r2.usage.completion_tokens + tokens(fake, AHEAD)
    assert len(a.conversations()) == 1 and len(a.transcript(a.conversations()[0]["id"])) == 4
    kv = fake.kv

    # Another client takes the model's context; the first one's next request still reads only its new turn.
    other = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "tell me about cats"}]
    c.chat.completions.create(model="L1", messages=other)
    history += [{"role": "assistant", "content": r2.choices[0].message.content},
                {"role": "user", "content": "thanks"}]
    r3 = c.chat.completions.create(model="L1", messages=history)
    assert r3.usage.prompt_tokens_details.cached_tokens == len(kv)
    assert r3.usage.prompt_tokens - len(kv) == tokens(fake, NEXT.format("thanks")) - tokens(fake, AHEAD)
    assert len(a.conversations()) == 2
    assert server.conversations.reused == 2 and server.conversations.replayed == 0

    # An edited history matches nothing: a new conversation holds the turns as the client sent them.
    edited = history[:2] + [{"role": "assistant", "content": "Something else."},
                            {"role": "user", "content": "and?"}, {"role": "user", "content": "go on"}]
    r4 = c.chat.completions.create(model="L1", messages=edited)
    newest = max(a.conversations(), key=lambda row: row["id"])
    assert [(m["role"], m["content"]) for m in a.transcript(newest["id"])] == [
        ("user", "hi"), ("assistant", "Something else."), ("user", "and?\n\ngo on"),
        ("assistant", r4.choices[0].message.content)]
    assert server.conversations.replayed == 1 and len(a.conversations()) == 3


def test_api_conversations_are_deleted_unless_stored(serve, fakes, make_assistant, assistant_home):
    pending = assistant_home / "server_conversations.json"
    a = make_assistant(str(fakes.model_file("m")))
    server = serve(a)
    c = client(server)
    c.chat.completions.create(model="L1", messages=[{"role": "user", "content": "hi"}])
    c.completions.create(model="L1", prompt="one-off")  # not continued: deleted at once
    # The pending file maps each running server to its unstored conversations (issue 22).
    [kept] = a.conversations()
    assert list(json.loads(pending.read_text()).values()) == [[kept["id"]]]
    server.stop()
    assert a.conversations() == [] and not pending.exists()

    # A crashed run's leftovers go at the next start.
    left = a.new_conversation()
    pending.write_text(json.dumps([left]))
    serve(a)
    wait_until(lambda: a.conversations() == [])

    stored = serve(a, store_conversations=True)
    client(stored).chat.completions.create(model="L1", messages=[{"role": "user", "content": "keep me"}])
    stored.stop()
    assert [row["title"] for row in a.conversations()] == ["keep me"]


def test_x_docs_answers_from_the_documents_with_sources(serve, fakes, make_assistant, docs):  # noqa: F811
    a = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=400)
    server = serve(a, allow_docs=True)  # the user lets clients read the documents (issue 37)
    ask = {"model": "L1", "messages": [{"role": "user", "content": "How long is the Zephyr kettle warranty?"}]}
    r = post(server, "/chat/completions", ask | {"x_docs": True}).json()
    assert r["x_sources"][0]["path"] == "manual.pdf" and r["x_sources"][0]["page"] == 3  # the name, not the path
    assert "[1] manual.pdf, page 3" in fakes.backend("m").vocab.detokenize(fakes.backend("m").prompts[-1])
    assert r["x_documents"] == "ok"
    r = post(server, "/chat/completions", ask | {"x_docs": "no-such-collection"}).json()
    assert r["x_sources"] == []
    assert "x_sources" not in post(server, "/chat/completions", ask).json()


def test_embeddings_come_from_the_memory_model(serve, fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")))
    a.memory = MemoryService(a.db, Embedder(), vector_backend="numpy").start()
    try:
        server = serve(a)
        texts = ["The kettle's warranty lasts three years.", "我的猫叫米索。"]
        r = client(server).embeddings.create(model="text-embedding-3-small", input=texts)  # base64 on the wire
        got = np.array([d.embedding for d in r.data], dtype=np.float32)
        assert got.shape == (2, 384) and r.model == "all-MiniLM-L6-v2"
        assert np.allclose(got, a.memory.embedder.embed(texts), atol=1e-6)  # `a` is the server's thread's now
        plain = post(server, "/embeddings", {"input": texts[0], "encoding_format": "float"}).json()
        assert np.allclose(plain["data"][0]["embedding"], got[0], atol=1e-6)
        assert post(server, "/embeddings", {"input": [[1, 2, 3]]}).status_code == 400
    finally:
        a.memory.close()
        a.memory.embedder.close()
        a.memory = None


def test_the_memory_stays_out_of_api_turns_unless_x_memory_asks(serve, fakes, make_assistant):
    a = make_assistant(str(fakes.model_file("m")), summary_every=1)
    a.memory = MemoryService(a.db, Embedder(), vector_backend="numpy").start()
    fake = fakes.backend("m")

    def chat(turns: int, **extra) -> int:
        history = []
        for i in range(turns):
            history.append({"role": "user", "content": f"What is my cat called? ({i})"})
            r = post(server, "/chat/completions", {"model": "L1", "messages": history} | extra).json()
            history.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
        return a.conversations()[0]["id"]  # the newest

    try:
        a.memory.add("My cat is called Miso.", pin=True)
        server = serve(a, store_conversations=True, allow_memory=True)  # the user lets clients ask (issue 22)
        plain = chat(4)  # 4 turns: 1 summarised + 2 recent would make a summary (summary_every=1)
        assert all("Miso" not in fake.vocab.detokenize(p) for p in fake.prompts)  # memories not sent unasked
        assert a.memory.flush(30)
        assert [row.kind for row in a.memory.list(kinds=("pinned", "note", "message"))] == ["pinned"]  # none kept
        before = len(fake.prompts)
        asked = chat(4, x_memory=True)
        turns = [t for t in map(fake.vocab.detokenize, fake.prompts[before:]) if "summarise" not in t]
        assert turns and all("Miso" in t for t in turns)
        assert a.memory.flush(30)
        assert {row.kind for row in a.memory.list(kinds=("message",))} == {"message"}  # asked: kept too
        wait_until(lambda: bool(a.db.summaries(asked)))  # and summarised
        assert a.db.summaries(plain) == []
        bad = {"model": "L1", "messages": [{"role": "user", "content": "hi"}], "x_memory": "yes"}
        assert post(server, "/chat/completions", bad).status_code == 400
    finally:
        a.memory.close()
        a.memory.embedder.close()
        a.memory = None


# ---- a second real client

def test_langchain_chat_openai_whole_streamed_and_cached(serve, fakes):
    server = serve()
    llm = ChatOpenAI(base_url=server.url, api_key=KEY, model="L1", max_retries=0, timeout=30)
    first = llm.invoke([SystemMessage("Be brief."), HumanMessage("hi")])
    assert first.content == "Answer 1."
    history = [SystemMessage("Be brief."), HumanMessage("hi"), AIMessage(first.content), HumanMessage("and you?")]
    streamed = list(llm.stream(history, stream_usage=True))
    assert "".join(ch.content for ch in streamed) == "Answer 2."
    usage = next(ch.usage_metadata for ch in streamed if ch.usage_metadata)
    # the first prompt and answer, and the next turn's opening read ahead
    assert usage["input_token_details"]["cache_read"] == first.usage_metadata["total_tokens"] + tokens(
        fakes.backend("m"), AHEAD)


# ---- under load

def _slow(fakes, make_assistant, per_token: float = 0.01):
    model = fakes.model_file("slow", decode_s_per_token=per_token)
    # Every answer runs to max_tokens: a text that never repeats ("la la …" would be cut as a loop
    # by the repetition guard within a few tokens, and end the turn before any timeout).
    fakes.script("slow").when("", Answer("".join(f"la{i} " for i in range(4000)), stop=False))
    return make_assistant(str(model))


def test_a_client_that_leaves_has_its_turn_cancelled(serve, fakes, make_assistant):
    server = serve(_slow(fakes, make_assistant))
    fake = fakes.backend("slow")
    ask = {"model": "L1", "max_tokens": 3000, "messages": [{"role": "user", "content": "sing"}]}
    with httpx.stream("POST", server.url + "/chat/completions", json=ask | {"stream": True},
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as r:
        for line in r.iter_lines():
            if '"content": "l' in line:
                break  # the answer has started: leave
    wait_until(lambda: server.engine.running is None, 5)
    streamed = fake.samples
    assert streamed < 300  # 3000 tokens would take 30 s

    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(request(server.port, "/v1/chat/completions", ask))
        wait_until(lambda: fake.samples > streamed + 5, 5)
    wait_until(lambda: server.engine.running is None, 5)
    assert fake.samples - streamed < 300
    assert server.assistant.conversations() == []  # cancelled turns are not kept
    ok = post(server, "/chat/completions", ask | {"max_tokens": 3})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["content"] == "la0"


def test_a_request_past_its_time_gets_504_and_its_turn_stops(serve, fakes, make_assistant):
    server = serve(_slow(fakes, make_assistant), request_timeout_s=0.5)
    fake = fakes.backend("slow")
    ask = {"model": "L1", "max_tokens": 3000, "messages": [{"role": "user", "content": "sing"}]}
    r = post(server, "/chat/completions", ask)
    assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
    wait_until(lambda: server.engine.running is None, 5)
    assert fake.samples < 300
    with httpx.stream("POST", server.url + "/chat/completions", json=ask | {"stream": True},
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as r:
        lines = [line for line in r.iter_lines() if line]
    assert r.status_code == 200 and json.loads(lines[-1].removeprefix("data: "))["error"]["code"] == "timeout"
    wait_until(lambda: server.engine.running is None, 5)
    assert fake.samples < 600 and server.assistant.conversations() == []


def test_a_full_queue_answers_429_with_retry_after(serve, fakes, make_assistant):
    server = serve(make_assistant(str(fakes.model_file("m"))), queue_depth=1)
    gate = Gate(lambda backend, n: n == 0)
    fakes.backend("m").on_sample.append(gate)
    ask = {"model": "L1", "messages": [{"role": "user", "content": "hi"}]}
    results = []
    first = threading.Thread(target=lambda: results.append(post(server, "/chat/completions", ask)))
    first.start()
    assert gate.reached.wait(10)  # the engine is busy
    second = threading.Thread(target=lambda: results.append(post(server, "/chat/completions", ask)))
    second.start()
    wait_until(lambda: len(server.queue) == 1)
    refused = post(server, "/chat/completions", ask)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["error"]["type"] == "rate_limit_error"
    gate.release()
    first.join(10)
    second.join(10)
    assert [r.status_code for r in results] == [200, 200]


def test_stop_cancels_the_running_turn_and_refuses_the_queued_one(serve, fakes, make_assistant):
    server = serve(_slow(fakes, make_assistant))
    ask = {"model": "L1", "max_tokens": 3000, "messages": [{"role": "user", "content": "sing"}]}
    results = {}

    def streamed():
        with httpx.stream("POST", server.url + "/chat/completions", json=ask | {"stream": True},
                          headers={"Authorization": f"Bearer {KEY}"}, timeout=30) as r:
            results["stream"] = [line for line in r.iter_lines() if line]

    threads = [threading.Thread(target=streamed)]
    threads[0].start()
    wait_until(lambda: server.engine.running is not None)
    threads.append(threading.Thread(target=lambda: results.setdefault("queued", post(server, "/chat/completions", ask))))
    threads[1].start()
    wait_until(lambda: len(server.queue) == 1)
    t0 = time.monotonic()
    server.stop()
    assert time.monotonic() - t0 < 10
    for t in threads:
        t.join(10)
    assert results["queued"].status_code == 503
    last = json.loads(results["stream"][-2].removeprefix("data: "))
    assert results["stream"][-1] == "data: [DONE]" and last["x_finish_reason"] == "cancelled"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2)
