"""The summary chain: background jobs on the L1 model that never cost the chat its KV cache."""

from engine.inference.backend import LoadParams
from engine.api import Assistant, EngineConfig
from engine.config.paths import db_path
from engine.storage import Database

from .helpers import THREADS, USER_TURNS, turn

OVERHEAD = 16


def test_background_summary_chain_keeps_foreground_kv(model_paths):
    a = Assistant(Database(db_path()), EngineConfig(model="demo-small", load=LoadParams(n_ctx=4096, n_threads=THREADS), summary_every=2))
    try:
        cid = a.new_conversation("You are a concise assistant.")
        for text in USER_TURNS[:4]:  # 2 to summarise + 2 recent ones kept out
            turn(a, cid, text, max_tokens=16)
        a.wait_for_summaries(120)
        [first] = a.summaries(cid)
        rows = a.db.messages(cid)
        assert (first["first_message_id"], first["last_message_id"]) == (rows[0]["id"], rows[3]["id"])
        assert first["model"] == "demo-small" and first["text"] and first["previous_id"] is None
        # The summary borrowed the context and gave it back: the next turn evaluates only new tokens.
        after = turn(a, cid, USER_TURNS[4], max_tokens=16)
        n_new = len(a.vocab.tokenize(USER_TURNS[4], special=False))
        assert after.stats.cache_mode == "append"
        assert after.stats.prompt_tokens_evaluated <= n_new + OVERHEAD + 1
        # A foreground turn right after scheduling pre-empts the summary; the chain still grows.
        turn(a, cid, USER_TURNS[5], max_tokens=16)
        chat = turn(a, cid, "One more question: what is 2+2?", max_tokens=16)
        assert chat.stats.cache_mode == "append"
        a.wait_for_summaries(120)
        chain = a.summaries(cid)
        assert len(chain) == 2 and chain[1]["previous_id"] == chain[0]["id"]
        assert chain[1]["first_message_id"] == chain[0]["last_message_id"] + 1
        a.edit_summary(chain[1]["id"], "User asked about Paris; edited by the user.")
        assert a.summaries(cid)[1]["edited"] == 1
    finally:
        a.close()
