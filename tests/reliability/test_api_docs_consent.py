"""The user's documents over the API are the user's to grant (server.allow_docs, off by default),
as the memory is: a client asking (`x_docs`) is not the user agreeing. When granted, a source names
its file, never the path (where the user keeps files, their account name in it). Before: any key
holder got the excerpts and absolute paths under any `user`."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from engine.api import Settings
from engine.server import ServerConfig
from tests.fake_backend import fakes, make_assistant  # noqa: F401
from tests.server_util import KEY, serve  # noqa: F401
from tests.test_docs_index import embedder  # noqa: F401
from tests.test_docs_turns import docs  # noqa: F401

HEADERS = {"Authorization": f"Bearer {KEY}"}
ASK = {"model": "L1", "messages": [{"role": "user", "content": "How long is the Zephyr kettle warranty?"}]}


def post(server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/chat/completions", json=body, headers=HEADERS, timeout=30)


def test_x_docs_needs_the_users_consent_and_sources_name_files_not_paths(serve, fakes, make_assistant,
                                                                          docs, tmp_path):  # noqa: F811
    a = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=400)
    # The window's (and terminal's) own chats need no setting, and know where each source is: they open it.
    cid = a.new_conversation()
    (done,) = [e for e in a.send(cid, ASK["messages"][0]["content"], docs=True) if hasattr(e, "sources")]
    assert Path(done.sources[0]["path"]).is_absolute() and Path(done.sources[0]["path"]).is_file()

    server = serve(a)
    for asked in (True, "work", "no-such-collection"):
        r = post(server, ASK | {"x_docs": asked, "user": "anyone"})
        assert r.status_code == 403, r.text[:300]
        assert r.json()["error"]["code"] == "docs_not_allowed" and r.json()["error"]["param"] == "x_docs"
        assert "server.allow_docs" in r.json()["error"]["message"]
    r = post(server, ASK | {"x_docs": False})
    assert r.status_code == 200 and "x_sources" not in r.json()
    server.stop()

    allowed = serve(a, allow_docs=True)
    r = post(allowed, ASK | {"x_docs": True})
    assert r.status_code == 200
    (first, *_) = r.json()["x_sources"]
    assert (first["path"], first["page"]) == ("manual.pdf", 3)
    assert str(tmp_path) not in r.text and "corpus" not in r.text  # no folder in the reply
    with httpx.stream("POST", allowed.url + "/chat/completions", json=ASK | {"x_docs": True, "stream": True},
                      headers=HEADERS, timeout=30) as s:
        events = [json.loads(line[5:]) for line in s.iter_lines() if line.startswith("data: {")]
    (last,) = [e for e in events if "x_sources" in e]
    assert last["x_sources"] and all(src["path"] == Path(src["path"]).name for src in last["x_sources"])



def test_the_setting_is_off_by_default_and_reaches_the_server(assistant_home):
    settings = Settings()
    assert settings.get("server.allow_docs") is False
    assert ServerConfig.from_settings(settings).allow_docs is False
    settings.set("server.allow_docs", True)
    assert ServerConfig.from_settings(settings).allow_docs is True
