"""Structured output on a real model: every schema in tests/data/json_schemas.py gets an answer
that parses and validates (jsonschema), through `Assistant.send(response_format=...)` and through
the local API server read by the `openai` client. What the grammar cannot enforce is refused by name."""

from __future__ import annotations

import json

import jsonschema
import pytest
from openai import OpenAI

from engine.api import Assistant, EngineConfig, GenerateParams, InputError, LoadParams, SamplingParams, TurnDone
from engine.config.paths import db_path
from engine.server import ApiServer, ServerConfig
from engine.storage import Database
from engine.inference.structured import response_grammar
from tests.data.json_schemas import SCHEMAS, UNSUPPORTED

from .helpers import THREADS

# Room for the longest answer any schema here allows (bounded strings, arrays and numbers), escapes included.
GREEDY = GenerateParams(SamplingParams(temperature=0.0, seed=1), max_tokens=1024)


@pytest.fixture(scope="module")
def small(model_paths, tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("ASSISTANT_HOME", str(tmp_path_factory.mktemp("home")))
    a = Assistant(Database(db_path()), EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)))
    yield a
    a.close()
    a.db.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def answer(a: Assistant, prompt: str, fmt: dict) -> TurnDone:
    cid = a.new_conversation("")
    return [e for e in a.send(cid, prompt, GREEDY, route="L1", response_format=fmt, cascade=False)
            if isinstance(e, TurnDone)][-1]


def test_every_schema_gets_json_that_parses_and_validates(small):
    failures = []
    for name, schema in SCHEMAS.items():
        done = answer(small, f"Give an example of {name} as JSON.",
                      {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}})
        try:
            assert done.stats.finish_reason == "stop", done.stats.finish_reason
            jsonschema.validate(json.loads(done.text), schema)
        except (AssertionError, ValueError, jsonschema.ValidationError) as exc:
            failures.append(f"{name}: {exc}: {done.text[:200]!r}")
    assert not failures, "\n".join(failures)
    assert len(SCHEMAS) >= 30


def test_json_object_mode_gives_an_object(small):
    done = answer(small, "Describe a cat as a small JSON object.", {"type": "json_object"})
    assert done.stats.finish_reason == "stop"
    assert isinstance(json.loads(done.text), dict)


def test_the_openai_client_gets_schema_valid_json(small):
    server = ApiServer(small, ServerConfig(host="127.0.0.1", port=0, api_key="k" * 24)).start()
    try:
        client = OpenAI(base_url=server.url, api_key="k" * 24, max_retries=0, timeout=120)
        schema = SCHEMAS["recipe"]
        r = client.chat.completions.create(
            model="L1", messages=[{"role": "user", "content": "A pancake recipe as JSON."}], temperature=0,
            max_tokens=1024, response_format={"type": "json_schema", "json_schema": {"name": "recipe", "schema": schema,
                                                                                   "strict": True}})
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
        bad = client.with_options(max_retries=0).chat.completions.with_raw_response
        with pytest.raises(Exception) as caught:
            bad.create(model="L1", messages=[{"role": "user", "content": "x"}],
                       response_format={"type": "json_schema", "json_schema": {"name": "u", "schema": UNSUPPORTED[
                           "uniqueItems"][0]}})
        assert caught.value.status_code == 400 and "uniqueItems" in str(caught.value)
    finally:
        server.stop()


def test_an_unsupported_send_says_why(small):
    with pytest.raises(InputError, match="uniqueItems"):
        list(small.send(small.new_conversation(""), "x", GREEDY, response_format={
            "type": "json_schema", "json_schema": {"schema": UNSUPPORTED["uniqueItems"][0]}}))
    assert response_grammar(None) is None and response_grammar({"type": "text"}) is None
