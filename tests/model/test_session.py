"""Stored token ids, not re-tokenized text, rebuild a conversation for the model that made them."""

from engine.inference.backend import LoadParams
from engine.api import Assistant
from engine.chat.session import Message

from .helpers import THREADS, turn


def test_stored_ids_are_used_for_their_model_only(assistant):
    cid = assistant.new_conversation()
    done = turn(assistant, cid, "Say something about the moon.")
    original = assistant.session(cid).render(assistant.session(cid).messages, False)
    with assistant.db._conn:  # simulate text that would re-tokenize differently
        assistant.db._conn.execute("UPDATE messages SET content = 'XYZ' WHERE id = ?", (done.message_id,))
    fresh = Assistant(assistant.db, assistant.model_id, LoadParams(n_ctx=512, n_threads=THREADS))
    try:
        s = fresh.session(cid)
        assert s.messages[-1].ids == {fresh.backend.identity: done.token_ids}
        assert s.render(s.messages, False) == original
        with assistant.db._conn:
            assistant.db._conn.execute("UPDATE messages SET token_model = 'other:1' WHERE id = ?", (done.message_id,))
        fresh._conversations.clear()
        s = fresh.session(cid)
        assert fresh.backend.identity not in s.messages[-1].ids  # ids of another model are never trusted
        assert s.content_ids(s.messages[-1]) == fresh.backend.tokenize("XYZ", special=False)
    finally:
        fresh.close()


def test_bos_once_when_the_model_wants_one(assistant):
    s = assistant.session(assistant.new_conversation())
    ids = s.prompt(Message("user", "hi"))
    b = assistant.backend
    if b.add_bos:  # Gemma: the template writes <bos>; the engine must not add a second one
        assert ids[0] == b.bos_id and ids.count(b.bos_id) == 1
