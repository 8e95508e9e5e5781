"""Stored token ids, not re-tokenized text, rebuild a conversation for the model that made them."""

from engine.inference.backend import LoadParams
from engine.api import Assistant, EngineConfig
from engine.chat.session import Message, Session
from engine.inference.templates import CHATML_TEMPLATE, ChatTemplate

from .helpers import THREADS, turn


def test_stored_ids_are_used_for_their_model_only(assistant):
    cid = assistant.new_conversation()
    done = turn(assistant, cid, "Say something about the moon.")
    original = assistant.session(cid).render(assistant.session(cid).messages, False)
    with assistant.db._conn:  # simulate text that would re-tokenize differently
        assistant.db._conn.execute("UPDATE messages SET content = 'XYZ' WHERE id = ?", (done.message_id,))
    fresh = Assistant(assistant.db, EngineConfig(model=assistant.model_id, load=LoadParams(n_ctx=512, n_threads=THREADS)))
    try:
        s = fresh.session(cid)
        assert s.messages[-1].ids == {fresh.backend.identity: done.token_ids}
        assert s.render(s.messages, False) == original
        with assistant.db._conn:
            assistant.db._conn.execute("UPDATE messages SET token_model = 'other:1' WHERE id = ?", (done.message_id,))
        fresh._conversations.clear()
        s = fresh.session(cid)
        assert fresh.backend.identity not in s.messages[-1].ids  # ids of another model are never trusted
        assert s.content_ids(s.messages[-1]) == fresh.vocab.tokenize("XYZ", special=False)
    finally:
        fresh.close()


def test_bos_once_when_the_model_wants_one(assistant):
    """A model that wants BOS (Gemma) gets exactly one at the start, whether its template writes it
    or not; a model that does not (SmolLM2) gets exactly what the template wrote, nothing added."""
    b = assistant.vocab  # what turns render with (the model's own tokenizer, any thread)
    assert b.add_bos == {"demo-int4": True, "demo-small": False}[assistant.model_id]  # both cases covered
    user = Message("user", "hi")
    for template in (assistant.template, ChatTemplate(CHATML_TEMPLATE, "chatml")):  # ChatML writes no BOS
        ids = Session(b, template).prompt(user)
        written = []
        for piece in template.render(["user"], add_generation_prompt=True).pieces:
            written += b.tokenize(piece, special=True) if isinstance(piece, str) else b.tokenize("hi", special=False)
        if b.add_bos:
            assert ids == (written if written[0] == b.bos_id else [b.bos_id] + written), template.name
            assert ids[0] == b.bos_id and ids.count(b.bos_id) == 1, template.name
        else:
            assert ids == written, template.name
