"""Regenerate the last answer and edit-and-resend the last message: the old turn stays in the
record (superseded), leaves the context, and the cache keeps what still matches."""

from engine.inference.backend import LoadParams
from engine.api import Assistant, EngineConfig, InputError, TurnDone
from engine.config.paths import db_path
from engine.storage import Database

import pytest

from .helpers import THREADS, greedy, turn


@pytest.fixture
def a(model_paths):
    assistant = Assistant(Database(db_path()), EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)))
    yield assistant
    assistant.close()
    assistant.db.close()


def finish(items):
    return [x for x in items if isinstance(x, TurnDone)][-1]


def test_regenerate_supersedes_the_last_answer(a):
    cid = a.new_conversation("You are brief.")
    with pytest.raises(InputError, match="nothing to regenerate"):
        finish(a.regenerate(cid, greedy(8)))
    first = turn(a, cid, "Name a fruit.", max_tokens=8)
    again = finish(a.regenerate(cid, greedy(12)))
    rows = a.db.messages(cid)
    assert [r["role"] for r in rows] == ["user", "assistant", "assistant"]
    assert rows[1]["id"] == first.message_id and rows[1]["superseded_by"] == again.message_id
    assert [m.id for m in a.conversation(cid).messages] == [rows[0]["id"], again.message_id]
    # Only the new answer is in the cache's history: the old answer's tokens were rolled back.
    assert again.stats.cache_mode == "rollback"
    nxt = turn(a, cid, "Another?", max_tokens=8)
    assert nxt.stats.cache_mode == "append"
    fresh = Assistant(a.db, EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)), manager=a.manager)
    assert [m.id for m in fresh.conversation(cid).messages][:2] == [rows[0]["id"], again.message_id]


def test_edit_and_resend_replaces_the_last_turn(a):
    cid = a.new_conversation("You are brief.")
    turn(a, cid, "Name a fruit.", max_tokens=8)
    old = turn(a, cid, "Name a colour.", max_tokens=8)
    with pytest.raises(InputError, match="empty"):
        finish(a.resend_edited(cid, "   ", greedy(8)))
    assert len(a.conversation(cid).messages) == 4  # a refused edit changes nothing
    new = finish(a.resend_edited(cid, "Name an animal.", greedy(8)))
    rows = a.db.messages(cid)
    by_id = {r["id"]: r for r in rows}
    new_user = [r for r in rows if r["role"] == "user"][-1]
    assert new_user["content"] == "Name an animal."
    assert by_id[old.message_id]["superseded_by"] == new_user["id"]
    assert by_id[old.message_id - 1]["superseded_by"] == new_user["id"]  # the old question too
    texts = [m.content for m in a.conversation(cid).messages]
    assert texts[2:] == ["Name an animal.", new.text] and "Name a colour." not in texts
    fresh = Assistant(a.db, EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)), manager=a.manager)
    assert [m.content for m in fresh.conversation(cid).messages] == texts
