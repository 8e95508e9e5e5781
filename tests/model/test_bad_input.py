"""Odd and hostile text into every store (messages, memory index, summaries) and the budgeter:
a clear error or a faithful record, never a crash, never a half-written turn."""

import pytest

from engine.inference.backend import LoadParams
from engine.api import Assistant, EngineConfig, InputError
from engine.memory import MemoryService
from engine.storage import Database

from .helpers import THREADS, turn

REFUSED = [
    ("", "empty message"),
    (" \n\t\u3000 ", "empty message"),
    ("word " * 210_000, "message too long"),                 # ~1 MB paste
    ("🙂" * 10_000, "too long for this model"),              # fits the characters, not the context
]
ACCEPTED = [
    ("你好，世界！" * 80, "你好，世界！" * 80),                  # CJK
    ("مرحبا بالعالم \u202eevil\u202c שלום", "مرحبا بالعالم \u202eevil\u202c שלום"),  # RTL + overrides
    ("a\x00b\x00c", "abc"),                                    # NULs dropped
    ("x\ud800y", "x?y"),                                       # a lone surrogate replaced
    ("e\u0301\u0301\u0301 ﷽ 𝕏 " * 20, ("e\u0301\u0301\u0301 ﷽ 𝕏 " * 20).strip()),  # combining marks, astral
]


@pytest.fixture(scope="module")
def chat(model_paths, ready_embedder, tmp_path_factory):
    db = Database(tmp_path_factory.mktemp("bad") / "assistant.db")
    memory = MemoryService(db, ready_embedder).start()
    a = Assistant(db, EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)), memory=memory)
    yield a, memory
    a.close()
    memory.close()
    db.close()


@pytest.mark.parametrize("text,why", REFUSED, ids=["empty", "whitespace", "1MB", "10k-emoji"])
def test_refused_input_leaves_nothing_half_done(chat, text, why):
    a, _ = chat
    cid = a.new_conversation()
    with pytest.raises(InputError, match=why):
        turn(a, cid, text)
    assert a.db.messages(cid) == []  # nothing committed: the text is still the user's to edit
    ok = turn(a, cid, "Hello!", max_tokens=4)  # and the conversation goes on
    assert ok.stats.finish_reason in ("stop", "length")


@pytest.mark.parametrize("text,stored", ACCEPTED, ids=["cjk", "rtl", "nul", "surrogate", "marks"])
def test_odd_text_is_stored_indexed_and_searchable(chat, text, stored):
    a, memory = chat
    cid = a.new_conversation()
    done = turn(a, cid, text, max_tokens=4)
    user = a.db.messages(cid)[0]
    assert user["content"] == stored and user["token_ids"]
    assert memory.flush(120)
    assert {c.message_id for c in memory.list(("message",))} >= {user["id"], done.message_id}
    assert memory.search(text).status == "ok"  # the query path takes it too
    assert a.db.integrity_check() == "ok"


def test_summary_edits_are_checked(chat):
    a, _ = chat
    cid = a.new_conversation()
    first = a.db.add_message(cid, "user", "hi")
    sid = a.db.add_summary(cid, first, first, "User said hi.", "demo-small", None)
    for bad, why in (("", "empty"), ("\x00 \n", "empty"), ("x" * 5_000, "too long")):
        with pytest.raises(InputError, match=why):
            a.edit_summary(sid, bad)
    with pytest.raises(LookupError, match="no summary"):
        a.edit_summary(sid + 99, "text")
    a.edit_summary(sid, "Nutzer grüßte. 用户打招呼。\x00")
    assert a.summaries(cid)[0]["text"] == "Nutzer grüßte. 用户打招呼。"
