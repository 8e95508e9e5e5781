"""The KV prompt cache as a side channel between clients (issue 22): a client that guesses another's
text one token at a time must learn nothing from `usage.prompt_tokens_details.cached_tokens`.

The probe that found it: client A (`user` "alice") tells the model a PIN; client B (`user` "bob")
sends prompts that end in each guess of the next digit. Before the fix the warm tier served B the
longest prefix from *any* conversation, so the right digit came back with one more cached token than
the nine wrong ones and the PIN fell out in 40 requests. Now another conversation's KV state serves
a turn only inside its trust domain (the window; an API key and `user`): what B sees is exactly what
a client sees when nobody told a PIN, while A resending its own history still reuses all of it. Real
demo-small model, real server on loopback, bounded loops (4 digits x 10 requests per probe).
"""

from __future__ import annotations

import httpx
import pytest

from engine.api import Assistant, EngineConfig, GenerateParams, LoadParams
from engine.config.paths import db_path
from engine.server import ApiServer, ServerConfig
from engine.storage import Database

pytestmark = pytest.mark.model

PARAMS = LoadParams(n_ctx=1024, n_threads=1)  # one thread: the machine is shared; speed is not tested
KEY = "side-channel-test-key-0123456789"
PIN = "4821"
SAYS = "Note for later: my bank card PIN is "  # then the digits, spaced (one token each)


def spaced(digits: str) -> str:
    return " ".join(digits)


def chat(server: ApiServer, user: str, messages: list[dict]) -> dict:
    body = {"model": "L1", "max_tokens": 1, "temperature": 0, "messages": messages, "user": user}
    r = httpx.post(server.url + "/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def cached(response: dict) -> int:
    return response["usage"]["prompt_tokens_details"]["cached_tokens"]


def probe(server: ApiServer, user: str) -> tuple[str, list[list[int]]]:
    """Guess the PIN digit by digit from cached_tokens, as the probe did: (the best guess, the
    cached counts of the ten guesses at each position; each digit is a token of its own)."""
    known, counts = "", []
    for _ in range(len(PIN)):
        row = [cached(chat(server, user, [{"role": "user", "content": SAYS + spaced(known + str(d))}]))
               for d in range(10)]
        counts.append(row)
        known += str(row.index(max(row)))
    return known, counts


@pytest.fixture
def assistant(assistant_home, model_paths):
    a = Assistant(Database(db_path()), EngineConfig(model="demo-small", load=PARAMS))  # KV tiers on, as the app runs
    yield a
    a.close()


def serve(assistant) -> ApiServer:
    return ApiServer(assistant, ServerConfig(host="127.0.0.1", port=0, api_key=KEY)).start()


def test_another_api_client_learns_nothing_of_a_pin_from_cached_tokens(assistant):
    server = serve(assistant)
    try:
        told = [{"role": "user", "content": SAYS + spaced(PIN) + ". Keep it safe."}]
        first = chat(server, "alice", told)
        seen = probe(server, "bob")
        assert seen[0] != PIN, f"the probe read the PIN: cached_tokens {seen[1]}"
        # What a client sees that shares nothing with either: the same counts, digit for digit.
        control = probe(server, "carol")
        assert seen == control
        # The owner's own history is still reused whole (the stateless client's KV reuse).
        again = told + [{"role": "assistant", "content": first["choices"][0]["message"]["content"]},
                        {"role": "user", "content": "What did I tell you?"}]
        assert cached(chat(server, "alice", again)) >= first["usage"]["prompt_tokens"]
        # So is a fork of it: another conversation of the same client shares its prefix.
        fork = [{"role": "user", "content": SAYS + spaced(PIN) + ". Forget it."}]
        assert cached(chat(server, "alice", fork)) > max(control[1][-1])  # past the digits others could not learn
    finally:
        server.stop()


def test_an_api_client_learns_nothing_of_a_window_chat(assistant):
    # The window's chat first (this thread drives the assistant until the server starts).
    cid = assistant.new_conversation()
    list(assistant.send(cid, SAYS + spaced(PIN) + ". Keep it safe.", GenerateParams(max_tokens=1)))
    server = serve(assistant)
    try:
        seen = probe(server, "")  # no `user`: every client of the key
        assert seen[0] != PIN, f"the probe read the window's PIN: cached_tokens {seen[1]}"
        assert seen == probe(server, "carol")
    finally:
        server.stop()
