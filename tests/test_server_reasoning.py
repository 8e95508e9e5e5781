"""A reasoning model behind the local API server, read by the official `openai` client: the thinking
comes as `reasoning_content` (whole and streamed), its tokens in `usage`, and clients turn it off
the ways they already do (`chat_template_kwargs.enable_thinking`, `reasoning_effort`). And a remote
L3 reasoning model's `reasoning_content` streams into the same events."""

from __future__ import annotations

import json

import pytest
from openai import OpenAI

from engine.inference.events import Chunk, GenerateParams, ReasoningChunk
from engine.inference.remote import RemoteClient, RemoteConfig
from engine.server.schema import RequestError, thinking
from tests.fake_backend import Answer, fakes, make_assistant  # noqa: F401
from tests.fake_vocab import _tokenize
from tests.server_util import KEY, serve  # noqa: F401
from tests.test_remote_sse import HEADERS, endpoint  # noqa: F401
from tests.test_reasoning import QWEN3_LIKE, R1_LIKE

THOUGHT = "<think>\nThey said hi.\n</think>\n\n"


def client(server) -> OpenAI:
    return OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=30)


def thinking_server(serve, fakes, make_assistant, template: str, *answers):
    path = fakes.model_file("thinker", chat_template=template)
    fakes.script("thinker").enqueue(*answers)
    return serve(make_assistant(str(path)))


def test_reasoning_content_whole_and_streamed_with_its_tokens_in_usage(serve, fakes, make_assistant):
    server = thinking_server(serve, fakes, make_assistant, QWEN3_LIKE, THOUGHT + "Hello!", THOUGHT + "Again!")
    c = client(server)
    messages = [{"role": "user", "content": "hi"}]
    r = c.chat.completions.create(model="L2", messages=messages)
    message = r.choices[0].message
    assert message.content == "Hello!" and message.model_extra["reasoning_content"] == "They said hi."
    reasoning = len(_tokenize(THOUGHT, False))
    assert r.usage.completion_tokens_details.reasoning_tokens == reasoning
    assert r.usage.completion_tokens == reasoning + len("Hello!")

    messages += [{"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "and again"}]
    chunks = list(c.chat.completions.create(model="L2", messages=messages, stream=True,
                                            stream_options={"include_usage": True}))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    thought = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
    answer = "".join(d.content or "" for d in deltas)
    assert thought.strip() == "They said hi." and answer == "Again!"
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == reasoning


def test_thinking_is_turned_off_the_ways_clients_ask(serve, fakes, make_assistant):
    server = thinking_server(serve, fakes, make_assistant, R1_LIKE, "Sure.", "Fine.", "Yes.")
    c = client(server)
    fake = fakes.backend("thinker")
    for extra in ({"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}},
                  {"reasoning_effort": "minimal"}):
        r = c.chat.completions.create(model="L2", messages=[{"role": "user", "content": "q"}], **extra)
        assert r.choices[0].message.content in ("Sure.", "Fine.")
        assert r.model_extra["x_finish_reason"] == "stop"
        assert "reasoning_content" not in r.choices[0].message.model_extra
        assert fake.text(fake.kv).rstrip(".").endswith("<think>\n\n</think>\n\n" + r.choices[0].message.content[:-1])


def test_thinking_options_are_checked():
    assert thinking({}) == (True, None)
    assert thinking({"reasoning_effort": "low"}) == (True, 512)
    assert thinking({"reasoning_effort": "high"}) == (True, None)
    assert thinking({"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"}) == (False, None)
    for bad in ({"reasoning_effort": "max"}, {"reasoning_effort": ["low"]}, {"chat_template_kwargs": {"enable_thinking": "no"}},
                {"chat_template_kwargs": []}):
        with pytest.raises(RequestError):
            thinking(bad)


def test_a_remote_reasoning_models_thinking_streams_as_reasoning_chunks(endpoint):
    def event(delta: dict, **more) -> bytes:
        return b"data: " + json.dumps({"choices": [{"delta": delta, **more}]}).encode() + b"\n\n"

    server = endpoint([HEADERS, event({"reasoning_content": "Let me "}), event({"reasoning": "see."}),
                       event({"content": "Four."}), event({}, finish_reason="stop"), b"data: [DONE]\n\n"])
    remote = RemoteClient(RemoteConfig(server.url, retries=0))
    try:
        items = list(remote.stream_chat([{"role": "user", "content": "2+2?"}], GenerateParams(max_tokens=16)))
    finally:
        remote.close()
    assert [c.text for c in items if isinstance(c, ReasoningChunk)] == ["Let me ", "see."]
    assert [c.text for c in items if isinstance(c, Chunk)] == ["Four."]
    result = items[-1]
    assert (result.text, result.reasoning) == ("Four.", "Let me see.") and result.stats.reasoning_tokens > 0
