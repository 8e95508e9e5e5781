"""Small hostile requests whose grammar, not their size, was the weapon (issue 37), against a real
`assistant serve` on demo-small in a process of its own: the server must answer each one 200 or 400
and stay alive, keep what it caches small, and refuse tools that would hold its model for a minute.

Before: three ~250-byte requests killed the process (SIGSEGV: llama.cpp's parser recursed through
one nested group per allowed character), `"pattern": "^a}$"` hung the event loop for good (the
converter looped), `maxLength` 10 000 and a back-reference were 500s, seven `minLength` 10 000 000
schemas kept ~540 MB, and 90 tools with `tool_choice: "required"` held the model 57-70 s."""

from __future__ import annotations

import httpx
import pytest

from tests.server_util import assistant_serve, memory

KEY = "sk-test-grammar-0123456789abcdef"
HEADERS = {"Authorization": f"Bearer {KEY}"}
ASK = [{"role": "user", "content": "Fill it in."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory, model_paths):
    home = tmp_path_factory.mktemp("grammar-home")
    with assistant_serve(home, model_paths["demo-small"], KEY, home / "serve.log") as (proc, url):
        warm = httpx.post(url + "/chat/completions", json={"messages": ASK, "max_tokens": 2}, headers=HEADERS,
                          timeout=120)
        assert warm.status_code == 200, warm.text
        yield proc, url


def _post(server, body: dict) -> httpx.Response:
    proc, url = server
    r = httpx.post(url + "/chat/completions", json={"messages": ASK, "max_tokens": 8, **body}, headers=HEADERS,
                   timeout=120)
    assert proc.poll() is None, f"the server died (rc {proc.returncode}) on {str(body)[:200]}"
    assert httpx.get(url.removesuffix("/v1") + "/health", timeout=30).status_code == 200
    return r


def _schema(schema: dict) -> dict:
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "probe", "schema": schema}}}


def _tool(name: str, parameter: dict) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"The tool called {name}.",
                                             "parameters": {"type": "object", "properties": {"text": parameter},
                                                            "required": ["text"]}}}


# (body, the status it gets, the param a 400 names)
HOSTILE = {
    "maxLength 100000": (_schema({"type": "object", "properties": {"a": {"type": "string", "maxLength": 100_000}}}),
                         200, None),
    "a tool's maxLength 100000, required": ({"tools": [_tool("t", {"type": "string", "maxLength": 100_000})],
                                             "tool_choice": "required"}, 200, None),
    "pattern a{0,100000}": (_schema({"type": "string", "pattern": "^a{0,100000}$"}), 200, None),
    "maxLength 10000 (was a 500)": (_schema({"type": "string", "maxLength": 10_000}), 200, None),
    "maxItems 1000000 of objects": (_schema({"type": "array", "items": {"type": "object"}, "maxItems": 1_000_000}),
                                    200, None),
    "minLength 10000000": (_schema({"type": "string", "minLength": 10_000_000}), 400,
                           "response_format.json_schema.schema.minLength"),
    "a back-reference (was a 500)": (_schema({"type": "string", "pattern": "^(a)\\1$"}), 400,
                                     "response_format.json_schema.schema.pattern"),
    "a stray brace (hung the event loop)": (_schema({"type": "string", "pattern": "^a}$"}), 400,
                                            "response_format.json_schema.schema.pattern"),
    "groups 400 deep": (_schema({"type": "string", "pattern": "^" + "(" * 400 + "a" + ")" * 400 + "$"}), 400,
                        "response_format.json_schema.schema"),
}


@pytest.mark.model
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_small_hostile_schema_gets_200_or_400_and_the_server_lives(server, name):
    body, status, param = HOSTILE[name]
    r = _post(server, body)
    assert r.status_code == status, r.text[:500]
    if status == 400:
        assert r.json()["error"]["param"] == param, r.text[:500]
    else:
        assert r.json()["choices"][0]["finish_reason"] in ("length", "stop", "tool_calls")


@pytest.mark.model
def test_seven_huge_bound_schemas_keep_under_100_mb(server):
    proc, _ = server
    before = memory(proc.pid)[0] >> 20
    for i in range(7):  # distinct: each one its own grammar, written, parsed and cached
        refused = _post(server, _schema({"type": "string", "minLength": 10_000_000 + i}))
        assert refused.status_code == 400, refused.text[:300]
        kept = _post(server, _schema({"type": "object", "properties": {
            f"p{i}": {"type": "string", "minLength": 999_000 + i, "maxLength": 1_000_000},
            "list": {"type": "array", "items": {"type": "string", "maxLength": 999_999 - i}, "maxItems": 999_999}}}))
        assert kept.status_code == 200, kept.text[:300]
    grown = (memory(proc.pid)[0] >> 20) - before
    print(f"RSS {before} MiB before, +{grown} MiB after fourteen huge-bound schemas")
    assert grown < 100, grown  # was ~540 MB for seven of them (a 50 MB grammar each, kept)


@pytest.mark.model
def test_tools_that_would_hold_the_model_for_a_minute_are_refused_and_a_modest_set_is_answered(server):
    many = [_tool(f"tool_{i}", {"type": "string", "maxLength": 1000}) for i in range(90)]  # 18.7 kB
    r = _post(server, {"tools": many, "tool_choice": "required"})
    assert r.status_code == 400, r.text[:300]  # was 200 after 57-70 s of prompt on demo-small here
    error = r.json()["error"]
    assert error["param"] == "tools" and "server.max_tool_tokens" in error["message"], error
    few = _post(server, {"tools": many[:8], "tool_choice": "required"})
    assert few.status_code == 200, few.text[:300]
    assert few.json()["choices"][0]["finish_reason"] in ("length", "tool_calls")
