"""KV state tiers with real models: switching chats restores from RAM, a restart from disk, and a
damaged or foreign snapshot is never loaded."""

import json
import struct
import time

import pytest

from engine.inference.backend import LoadParams
from engine.api import Assistant, EngineConfig
from engine.kv.tiers import MAGIC
from engine.config.paths import db_path, user_dir
from engine.storage import Database

from engine.api import TurnDone

from .helpers import THREADS, greedy, kv_tokens, turn

OVERHEAD = 16
# A system prompt long enough that the chat is worth a cold file (≥ 256 tokens).
SYSTEM = "You are a careful assistant. " + " ".join(
    f"Rule {i}: answer briefly, cite facts, and never invent numbers or names." for i in range(30))


def new_tokens(a: Assistant, text: str) -> int:
    return len(a.vocab.tokenize(text, special=False))


def open_assistant(model="demo-small", **kw) -> Assistant:
    config = EngineConfig(model=model, load=LoadParams(n_ctx=2048, n_threads=THREADS), **kw)
    return Assistant(Database(db_path()), config)


def close(a: Assistant) -> None:
    a.close()
    a.db.close()


@pytest.mark.parametrize("model", ["demo-small", "demo-int4"])
def test_interleaved_conversations_evaluate_only_new_tokens(model_paths, model):
    a = open_assistant(model)
    try:
        convs = [a.new_conversation(SYSTEM), a.new_conversation(SYSTEM.replace("careful", "terse"))]
        texts = ["Hi! Name a fruit.", "Another one?", "And a vegetable?", "Thanks, one more?"]
        first = [turn(a, c, texts[0], max_tokens=8) for c in convs]  # first visits: everything new
        assert all(d.stats.restored_from is None for d in first)
        for text in texts[1:]:
            for c in convs:  # A, B, A, B: each visit finds the other conversation in the context
                d = turn(a, c, text, max_tokens=8)
                assert d.stats.restored_from == "warm", d.stats
                assert d.stats.cache_mode == "append"
                assert d.stats.prompt_tokens_evaluated <= new_tokens(a, text) + OVERHEAD
                assert d.stats.restore_ms > 0 and d.stats.ttft_ms >= d.stats.restore_ms
        same = turn(a, convs[1], "Last one.", max_tokens=8)  # staying in a conversation: hot
        assert same.stats.restored_from == "hot"
        pages = a.kv_pages()[a.backend.identity]
        assert pages["used"] >= 1 and pages["capacity"] == 2048 // 256
        assert pages["conversations"][str(convs[1])]["hot"] >= 1
        assert pages["conversations"][str(convs[0])]["warm"] >= 1
    finally:
        close(a)


def run_two_turns(home, monkeypatch):
    monkeypatch.setenv("ASSISTANT_HOME", str(home))
    a = open_assistant()
    cid = a.new_conversation(SYSTEM)
    for text in ("Hello! What is the capital of Italy?", "And its most famous fountain?"):
        turn(a, cid, text, max_tokens=16)
    return a, cid


def test_demo_model_states_have_the_layout_the_cold_segments_split(model_paths):
    """engine/kv/state_format.py pinned on a state llama.cpp wrote: it parses, goes back byte for
    byte, and splits by position into two states that join back into it."""
    from engine.kv import state_format
    from .conftest import open_backend

    backend = open_backend(model_paths["demo-small"], n_ctx=1024)
    try:
        backend.eval(backend.tokenize(SYSTEM, special=False)[:300])
        data, tokens = backend.save_sequence()
    finally:
        backend.close()
    state = state_format.parse(data)
    assert state is not None and state.n_cells == len(tokens) and bytes(state_format.to_bytes(state)) == bytes(data)
    pos = state.positions()
    parts = [state_format.parse(state_format.to_bytes(state_format.select(state, keep))) for keep in (pos < 200, pos >= 200)]
    assert bytes(state_format.to_bytes(state_format.join(parts))) == bytes(data)


def test_an_exit_after_a_short_turn_appends_that_turn_to_the_cold_file(assistant_home, monkeypatch):
    first, cid = run_two_turns(assistant_home, monkeypatch)
    close(first)  # the first exit writes the chat whole
    [path] = (user_dir() / "kv").glob("c*.kvs")
    size = path.stat().st_size
    again = open_assistant()
    try:
        done = turn(again, cid, "One more thing?", max_tokens=8)
        assert done.stats.restored_from == "cold"
    finally:
        close(again)
    assert again.kv.cold.stats.appended == 1 and again.kv.cold.stats.written == 0
    assert path.stat().st_size - size < size // 4  # the turn's cells, not the chat again
    third = open_assistant()
    try:
        done = turn(third, cid, "And another?", max_tokens=8)
        assert done.stats.restored_from == "cold"  # joined from both segments
        assert done.stats.prompt_tokens_evaluated <= new_tokens(third, "And another?") + OVERHEAD
    finally:
        close(third)


@pytest.mark.numerics
def test_cold_restore_after_restart_continues_exactly_as_never_evicted(tmp_path, monkeypatch):
    third = "Give me one tip for visiting it."
    # Never evicted: the same process goes on.
    ref, cid = run_two_turns(tmp_path / "ref", monkeypatch)
    expected = turn(ref, cid, third, max_tokens=24)
    close(ref)
    # Restarted: the first process exits (its state goes to disk), a new one resumes.
    first, cid2 = run_two_turns(tmp_path / "cold", monkeypatch)
    history = len(kv_tokens(first))
    close(first)
    files = list((user_dir() / "kv").glob("c*.kvs"))
    assert len(files) == 1
    again = open_assistant()
    try:
        done = turn(again, cid2, third, max_tokens=24)
        assert done.stats.restored_from == "cold"
        assert done.stats.prompt_tokens_cached >= history - 1
        assert done.stats.prompt_tokens_evaluated <= new_tokens(again, third) + OVERHEAD
        # The state restored from disk is the never-evicted one bit for bit, and the new turn's tokens
        # are evaluated in the same pieces: the one case where the very same answer is guaranteed.
        assert (done.stats.prompt_tokens_cached, done.stats.prompt_tokens_evaluated) == (
            expected.stats.prompt_tokens_cached, expected.stats.prompt_tokens_evaluated)
        assert (done.token_ids, done.text) == (expected.token_ids, expected.text)  # token for token
    finally:
        close(again)


def rewrite_header(path, change):
    raw = path.read_bytes()
    n = struct.unpack("<I", raw[4:8])[0]
    header = json.loads(raw[8:8 + n])
    change(header)
    blob = json.dumps(header).encode()
    path.write_bytes(MAGIC + struct.pack("<I", len(blob)) + blob + raw[8 + n:])


def flip(path, at):
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0xFF
    path.write_bytes(bytes(raw))


DAMAGE = {
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    # in the first segment, the whole state (a damaged later, appended one only shortens the file:
    # tests/test_kv_state_format.py)
    "payload byte": lambda p: flip(p, p.stat().st_size // 2),
    "token id": lambda p: flip(p, p.stat().st_size // 3),
    "other model": lambda p: rewrite_header(p, lambda h: h["facts"].update(model_size=h["facts"]["model_size"] + 1)),
    "other n_ctx": lambda p: rewrite_header(p, lambda h: h["facts"].update(n_ctx=4096)),
    "other llama.cpp": lambda p: rewrite_header(p, lambda h: h["facts"].update(llama_cpp="0.0.1")),
    "garbage": lambda p: p.write_bytes(b"\x00" * 64),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_or_foreign_snapshot_is_rejected_and_rebuilt(assistant_home, monkeypatch, damage):
    first, cid = run_two_turns(assistant_home, monkeypatch)
    close(first)
    [path] = (user_dir() / "kv").glob("c*.kvs")
    DAMAGE[damage](path)
    again = open_assistant()
    try:
        done = turn(again, cid, "One more thing?", max_tokens=8)
        assert done.stats.restored_from is None  # never loaded: the history is re-evaluated
        assert done.stats.prompt_tokens_cached == 0
        assert sum(again.kv.cold.stats.rejected.values()) == 1 and not path.exists()
        assert again.kv_pages()["_tiers"]["cold"]["rejected"]
    finally:
        close(again)
    assert path.exists()  # rebuilt at exit from the re-evaluated state


def test_switching_while_evicted_states_are_written_in_the_background(assistant_home):
    # A warm tier too small for one state: every switch sends the parked one to disk, in the background.
    a = open_assistant(kv_warm_mb=0.001)
    try:
        convs = [a.new_conversation(SYSTEM.replace("careful", word)) for word in ("kind", "terse", "witty")]
        for c in convs:
            turn(a, c, "Hi! Name a colour.", max_tokens=8)
        for c in convs:
            d = turn(a, c, "Another colour?", max_tokens=8)
            assert d.stats.restored_from in ("cold", "hot"), d.stats
            assert d.stats.prompt_tokens_evaluated <= new_tokens(a, "Another colour?") + OVERHEAD
        a.kv.flush()
        assert a.kv.cold.stats.written >= 3 and a.kv.cold.stats.loaded >= 2
    finally:
        close(a)


def test_a_model_swap_keeps_the_unloaded_models_conversation(assistant_home):
    from engine.inference.manager import ModelManager, ram_bytes

    params = LoadParams(n_ctx=2048, n_threads=THREADS)
    probe = ModelManager(params=params)
    sizes = [ram_bytes(probe.plan_for(probe.resolve(m), gpu=False)) for m in ("demo-small", "demo-int4")]
    manager = ModelManager(budget_bytes=max(sizes) + 1, params=params)  # one model at a time
    a = Assistant(Database(db_path()), EngineConfig(load=params, tiers={"L1": "demo-small", "L2": "demo-int4"}, base_models=True), manager=manager)
    try:
        cid = a.new_conversation(SYSTEM)
        list(a.send(cid, "Hi! Name a fruit.", greedy(8), route="L1"))
        # The turn is told before its job has ended on the model's thread (niced, on two busy cores
        # it may lag): a model still serving is never evicted, so wait until it is not.
        l1, deadline = manager.find_loaded("demo-small"), time.monotonic() + 10
        while l1.serving and time.monotonic() < deadline:
            time.sleep(0.01)
        other = a.new_conversation()
        list(a.send(other, "Hello", greedy(4), route="L2"))  # loading L2 unloads L1
        assert manager.evictions == 1
        # L1 again: reloaded, its conversation's state comes back from RAM.
        [back] = [x for x in a.send(cid, "Another one?", greedy(8), route="L1") if isinstance(x, TurnDone)]
        assert back.level == "L1" and back.stats.restored_from == "warm"
        assert back.stats.prompt_tokens_evaluated <= new_tokens(a, "Another one?") + OVERHEAD
    finally:
        close(a)


def test_deleting_a_conversation_deletes_its_snapshots(assistant_home, monkeypatch):
    first, cid = run_two_turns(assistant_home, monkeypatch)
    close(first)
    assert list((user_dir() / "kv").glob(f"c{cid}-*.kvs"))
    a = open_assistant()
    try:
        a.delete_conversation(cid)
        assert not list((user_dir() / "kv").glob(f"c{cid}-*.kvs")) and a.db.conversation(cid) is None
    finally:
        close(a)
