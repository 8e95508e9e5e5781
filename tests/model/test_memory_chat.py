"""Memory inside chat turns: retrieved memories ride in the new user turn (after the cached
prefix), pinned facts in the stable block, finished messages indexed, citations in `done`."""

import pytest

from engine.inference.backend import LoadParams
from engine.api import Assistant, EngineConfig
from engine.memory import Embedder, MemoryService
from engine.config.paths import db_path
from engine.storage import Database

from .helpers import THREADS, kv_tokens, turn

OVERHEAD = 16  # template tokens around a new user turn (measured ≤ 11 in bench/kv_reuse.py)
CAT = "My cat is called Miso and she is three years old."


@pytest.fixture
def chat(model_paths, ready_embedder):
    db = Database(db_path())
    memory = MemoryService(db, ready_embedder).start()
    a = Assistant(db, EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)), memory=memory)
    yield a, memory
    a.close()
    memory.close()
    db.close()


def kv_text(a: Assistant) -> str:
    return a.vocab.detokenize(kv_tokens(a))


def test_recalled_memory_is_inside_the_user_turn_and_the_cache_still_extends(chat):
    a, memory = chat
    cat_id = memory.add(CAT)
    assert memory.flush(120)
    cid = a.new_conversation("You are a helpful assistant.")
    first = turn(a, cid, "Hello there, how are you today?", max_tokens=8)
    assert first.stats.memory["retrieval"] == "skipped: small talk"
    assert all(h["id"] != cat_id for h in first.stats.memories_used)

    ask = "What is my cat called?"
    done = turn(a, cid, ask, max_tokens=8)
    used = {h["id"]: h for h in done.stats.memories_used}
    assert cat_id in used and used[cat_id]["source"] == "memory" and used[cat_id]["text"] == CAT
    row = [m for m in a.db.messages(cid) if m["role"] == "user"][-1]
    assert row["content"] == ask  # what the user typed is what is shown and stored as content
    assert CAT in row["model_text"] and row["model_text"].endswith(ask)
    assert row["token_ids"] == a.vocab.tokenize(row["model_text"], special=False)
    # The memory sits after the cached prefix: only the new turn is evaluated...
    assert done.stats.cache_mode == "append"
    assert done.stats.prompt_tokens_evaluated <= len(row["token_ids"]) + OVERHEAD
    assert CAT in kv_text(a)
    # ...and the next turn extends exactly what the cache holds.
    nxt = turn(a, cid, "Thanks!", max_tokens=8)
    assert nxt.stats.cache_mode == "append"
    assert nxt.stats.prompt_tokens_evaluated <= len(a.vocab.tokenize("Thanks!", special=False)) + OVERHEAD

    # A new process sees the same turn: the stored model text and ids, not a re-retrieval.
    b = Assistant(a.db, EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)), manager=a.manager)
    reloaded = [m for m in b.conversation(cid).messages if m.id == row["id"]][0]
    assert reloaded.model_text == row["model_text"] and reloaded.content == ask


def test_finished_messages_are_indexed_and_cited_across_conversations(chat):
    a, memory = chat
    cid = a.new_conversation()
    turn(a, cid, "My sister Aiko lives in Osaka and teaches piano.", max_tokens=8)
    turn(a, cid, "What is the tallest mountain in Japan?", max_tokens=8)
    assert memory.flush(120)
    rows = a.db.messages(cid)
    chunks = memory.list(("message",))
    assert {c.message_id for c in chunks} == {r["id"] for r in rows}  # user and assistant, each turn
    # The same conversation does not retrieve what its window already shows.
    again = turn(a, cid, "Where does my sister Aiko live?", max_tokens=8)
    assert not any(isinstance(h["source"], dict) and h["source"]["conversation_id"] == cid
                   for h in again.stats.memories_used)
    # Another conversation does, with the source to cite.
    other = a.new_conversation()
    done = turn(a, other, "Where does my sister Aiko live?", max_tokens=8)
    cited = [h["source"] for h in done.stats.memories_used if isinstance(h["source"], dict)]
    assert cited and all(c["conversation_id"] == cid and c["date"] for c in cited)
    assert rows[0]["id"] in {c["message_id"] for c in cited}  # the message that said it


def test_remember_pins_a_fact_for_every_later_conversation(chat):
    a, memory = chat
    cid = a.new_conversation()
    done = turn(a, cid, "Please remember that my favourite colour is teal.", max_tokens=8)
    remembered = done.stats.memory["remembered"]
    assert remembered["text"] == "my favourite colour is teal"
    [pinned] = memory.pinned()
    user_row = a.db.messages(cid)[0]
    assert (pinned.id, pinned.conversation_id, pinned.message_id) == (remembered["id"], cid, user_row["id"])
    # A new conversation (no system prompt of its own) starts with the pinned fact in its stable block.
    other = a.new_conversation()
    first = turn(a, other, "Hi!", max_tokens=8)
    assert first.stats.memory["pinned_in_prompt"] == 1
    assert "my favourite colour is teal" in kv_text(a)
    # Pinned facts already in the prompt are not retrieved a second time into the turn.
    asked = turn(a, other, "What is my favourite colour?", max_tokens=8)
    assert all(h["id"] != pinned.id for h in asked.stats.memories_used)
    assert asked.stats.cache_mode == "append"


def test_turns_skip_retrieval_until_the_embedder_is_ready(model_paths):
    db = Database(db_path())
    memory = MemoryService(db, Embedder())  # not started: the app's first seconds
    a = Assistant(db, EngineConfig(model="demo-small", load=LoadParams(n_ctx=2048, n_threads=THREADS)), memory=memory)
    try:
        cid = a.new_conversation()
        done = turn(a, cid, "What is my cat called?", max_tokens=8)
        assert done.stats.memory["retrieval"] == "skipped: embedder not started"
        assert done.stats.memories_used == []
        assert a.db.messages(cid)[0]["model_text"] is None
    finally:
        a.close()
        db.close()


def test_deleting_a_conversation_forgets_its_messages(chat):
    a, memory = chat
    cid = a.new_conversation()
    turn(a, cid, "My neighbour Tomasz repairs clocks.", max_tokens=8)
    assert memory.flush(120) and memory.list(("message",))
    a.delete_conversation(cid)
    assert memory.list(("message",)) == []
    assert memory.search("Who repairs clocks?").status == "ok" and not memory.search("Who repairs clocks?")
