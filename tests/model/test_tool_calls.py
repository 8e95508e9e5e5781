"""Tool calls on a real model (demo-small, whose template has no tool format: the engine's
documented prompt block). With the grammar every call parses and fits its tool's schema, even from
a 135M model; the lazy grammar takes over mid-answer from text already written; a tool round
evaluates the result and a few markers, not the history; and the `openai` client drives it all
through the local API server."""

from __future__ import annotations

import json

import jsonschema
import pytest
from openai import OpenAI

from engine.api import Assistant, EngineConfig, GenerateParams, LoadParams, SamplingParams, ToolUse, TurnDone, parse_tools
from engine.config.paths import db_path
from engine.inference.generate import prefill
from engine.inference.tool_calls import CallSplitter, call_grammar
from engine.server import ApiServer, ServerConfig
from engine.storage import Database

from .conftest import open_backend
from .helpers import THREADS

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city on a day",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 40},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"]}}},
    {"type": "function", "function": {
        "name": "add", "description": "Add two numbers",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                       "required": ["a", "b"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASKS = ["What is the weather in Paris for three days?", "Add 2 and 40.", "北京明天天气怎么样？",
        "Tell me a joke, then add 1 and 1.", "Weather in Reykjavik, in fahrenheit please."]


def greedy(n: int, use: ToolUse) -> GenerateParams:
    return GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=n, tools=use)


@pytest.fixture(scope="module")
def small(model_paths, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ASSISTANT_HOME", str(tmp_path_factory.mktemp("home")))
        a = Assistant(Database(db_path()), EngineConfig(model="demo-small",
                                                        load=LoadParams(n_ctx=2048, n_threads=THREADS)))
        yield a
        a.close()
        a.db.close()


def check(call: dict) -> None:
    name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
    jsonschema.validate(args, SCHEMAS[name])


def test_a_required_call_always_parses_and_fits_its_schema(small):
    use = ToolUse(parse_tools(TOOLS), "required", parallel=False)
    for ask in ASKS:
        cid = small.new_conversation("You are a helpful assistant.")
        done = [e for e in small.send(cid, ask, greedy(96, use), route="L1", cascade=False)
                if isinstance(e, TurnDone)][-1]
        assert done.stats.finish_reason == "tool_calls" and len(done.tool_calls) == 1, (ask, done.text)
        check(done.tool_calls[0])


def test_a_named_call_goes_to_that_tool(small):
    use = ToolUse(parse_tools(TOOLS), "add")
    cid = small.new_conversation("")
    done = [e for e in small.send(cid, "What is the weather in Paris?", greedy(64, use), route="L1", cascade=False)
            if isinstance(e, TurnDone)][-1]
    assert [c["function"]["name"] for c in done.tool_calls] == ["add"]
    check(done.tool_calls[0])


def test_the_lazy_grammar_takes_over_from_text_already_written(model_paths):
    """A marker whose last token carries the call's first characters: the grammar starts from them."""
    backend = open_backend(str(model_paths["demo-small"]))
    try:
        use = ToolUse(parse_tools(TOOLS), "auto")
        written = backend.tokenize('<tool_call>\n{"name": "a', special=False)
        prompt = backend.tokenize("<|im_start|>user\nAdd 2 and 3<|im_end|>\n<|im_start|>assistant\n", special=True)
        prefill(backend, prompt + written)
        sampler = backend.make_sampler(SamplingParams(temperature=0.0, seed=1))
        splitter = CallSplitter(use.offered())
        splitter.feed(backend.detokenize(written))
        assert splitter.state == "call"
        past = backend.tokenize(splitter.body + splitter.held, special=False)
        assert backend.constrain(sampler, call_grammar(use), past)
        out = []
        while splitter.state == "call" and len(out) < 64:
            token, _ = backend.sample(sampler)
            out.append(token)
            backend.eval([token])
            splitter.feed(backend.token_bytes(token).decode("utf-8", "replace"))
        assert not splitter.errors and [c.name for c in splitter.calls] == ["add"]
        jsonschema.validate(json.loads(splitter.calls[0].arguments), SCHEMAS["add"])
        # text the grammar cannot take (a name no tool has) leaves the answer unconstrained, not broken
        assert not backend.constrain(sampler, call_grammar(use), backend.tokenize('{"name": "zz', special=False))
        assert sampler.grammar is None
    finally:
        backend.close()


def test_a_tool_round_evaluates_the_result_and_a_few_markers(small):
    """Call → result → answer: the round reads the result and at most 16 more tokens; the rest of
    the history is the KV the call left (the result's opening read ahead while the tool ran)."""
    use = ToolUse(parse_tools(TOOLS), "required", parallel=False)
    cid = small.new_conversation("You are a helpful assistant.")
    done = [e for e in small.send(cid, "Add 2 and 40.", greedy(64, use), route="L1", cascade=False, read_ahead=True)
            if isinstance(e, TurnDone)][-1]
    for result in ("42", "The sum is 42, computed exactly by the calculator tool."):
        call = done.tool_calls[0]
        events = small.send_tool_results(cid, [(call["id"], result)], greedy(96, use), read_ahead=True)
        after = [e for e in events if isinstance(e, TurnDone)][-1]
        n_result = len(small.vocab.tokenize(result, special=False))
        assert after.stats.prompt_tokens_evaluated <= n_result + 16, after.stats
        assert after.stats.prompt_tokens_cached > 200
        done = after


def test_the_openai_client_calls_tools_on_a_real_model(small):
    server = ApiServer(small, ServerConfig(host="127.0.0.1", port=0, api_key="k" * 24)).start()
    try:
        c = OpenAI(base_url=server.url, api_key="k" * 24, max_retries=0, timeout=120)
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        r = c.chat.completions.create(model="L1", messages=messages, tools=TOOLS, tool_choice="required",
                                      temperature=0, max_tokens=96)
        (call,) = r.choices[0].message.tool_calls
        assert r.choices[0].finish_reason == "tool_calls"
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        messages += [r.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees"}]
        r2 = c.chat.completions.create(model="L1", messages=messages, tools=TOOLS, temperature=0, max_tokens=32)
        assert r2.choices[0].finish_reason in ("stop", "length", "tool_calls")
        evaluated = r2.usage.prompt_tokens - r2.usage.prompt_tokens_details.cached_tokens
        assert evaluated <= len(small.vocab.tokenize("Sunny, 21 degrees", special=False)) + 16
    finally:
        server.stop()
