"""Documents in chat turns, on the scripted fake backend with the real documents index and
embedder: excerpts inside the new user turn (the cache still extends), `done.sources` and the
tokens they added, the per-conversation toggle, the budget, and turns with documents kept off
the remote tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.docs.service import DocumentService
from engine.inference.remote import RemoteConfig
from engine.storage import Database
from tests.fake_backend import dones, fakes, make_assistant, send  # noqa: F401
from tests.test_docs_index import embedder, write_corpus  # noqa: F401


@pytest.fixture
def docs(tmp_path, embedder):  # noqa: F811
    db = Database(tmp_path / "docs.db")
    service = DocumentService(db, embedder)
    service.add([write_corpus(tmp_path / "corpus")]).result()
    yield service
    service.close()
    db.close()


def test_excerpts_ride_in_the_user_turn_and_the_next_turn_still_extends_the_cache(fakes, make_assistant, docs):
    a = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=400)
    fake = fakes.backend("m")
    cid = a.new_conversation()
    (done,) = dones(send(a, cid, "How long is the Zephyr kettle warranty?", docs=True))
    src = done.sources
    assert src and src[0]["n"] == 1 and Path(src[0]["path"]).name == "manual.pdf" and src[0]["page"] == 3
    assert {"path", "page", "text", "score"} <= set(src[0])
    prompt = fake.vocab.detokenize(fake.prompts[-1])
    assert "[1] manual.pdf, page 3: The warranty of the Zephyr kettle lasts three years." in prompt
    assert prompt.index("[1] manual.pdf") < prompt.index("How long is the Zephyr kettle warranty?")
    r = done.stats.retrieval
    assert 0 < r.document_tokens <= r.max_tokens == 400 and done.stats.documents == "ok"
    # What the model read is stored, so the next turn's prompt extends the KV cache exactly.
    stored = a.transcript(cid)[0]
    assert stored["content"] == "How long is the Zephyr kettle warranty?"
    kv = fake.kv
    (done2,) = dones(send(a, cid, "thanks", docs=False))
    assert done2.stats.cache_mode == "append" and fake.prompts[-1][:len(kv)] == kv
    assert done2.sources == [] and done2.stats.documents == "off"


def test_the_conversation_toggle_and_a_collection(fakes, make_assistant, docs):
    a = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=400)
    cid = a.new_conversation()
    assert a.conversation_docs(cid) is None
    (done,) = dones(send(a, cid, "What is the daily meal allowance abroad?"))
    assert done.sources == []
    a.set_conversation_docs(cid, True)
    assert a.conversation_docs(cid) == "*"
    (done,) = dones(send(a, cid, "What is the daily meal allowance abroad?"))
    assert Path(done.sources[0]["path"]).name == "policy.md"
    a.set_conversation_docs(cid, "nonexistent-collection")
    (done,) = dones(send(a, cid, "What is the daily meal allowance abroad?"))
    assert done.sources == []


def test_excerpts_are_trimmed_by_rank_to_the_budget(fakes, make_assistant, docs):
    a = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=60)
    cid = a.new_conversation()
    (done,) = dones(send(a, cid, "Zephyr kettle: boiling, descaling and warranty", docs=True))
    assert done.stats.retrieval.document_tokens <= 60
    assert len(done.sources) < 3
    b = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=5)
    (done,) = dones(send(b, b.new_conversation(), "Zephyr kettle warranty", docs=True))
    assert done.sources == [] and done.stats.documents.startswith("skipped: no excerpt fits")


def test_a_turn_with_documents_stays_off_the_remote_tier_unless_allowed(fakes, make_assistant, docs):
    remote = RemoteConfig("http://127.0.0.1:9/v1", connect_timeout_s=0.2, retries=0)
    a = make_assistant(str(fakes.model_file("m")), docs=docs, remote=remote, retrieval_max_tokens=400)
    cid = a.new_conversation()
    (done,) = dones(send(a, cid, "How long is the Zephyr kettle warranty?", docs=True, route="L3"))
    assert done.level in ("L1", "L2") and "documents stay on this computer" in done.route_reason
    assert done.sources
    # Without excerpts the same route goes to L3 (unreachable here: it falls back with a note).
    (done,) = dones(send(a, cid, "hello there", docs=False, route="L3"))
    assert "documents" not in done.route_reason and done.fallback and "L3" in done.fallback


def test_a_regenerated_answer_cites_the_same_sources(fakes, make_assistant, docs):
    a = make_assistant(str(fakes.model_file("m")), docs=docs, retrieval_max_tokens=400)
    cid = a.new_conversation()
    (first,) = dones(send(a, cid, "How long is the Zephyr kettle warranty?", docs=True))
    (again,) = dones(a.regenerate(cid))
    assert again.sources == first.sources and again.stats.retrieval == first.stats.retrieval
