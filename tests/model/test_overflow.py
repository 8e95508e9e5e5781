"""A long chat on a small window: never an error, every prompt fits, re-evaluation only at shift points."""

import logging

from engine.inference.backend import LoadParams
from engine.api import Assistant, EngineConfig
from engine.config.paths import db_path
from engine.storage import Database

from .helpers import THREADS, turn

log = logging.getLogger(__name__)
N_TURNS = 100
N_CTX = 1024
MAX_TOKENS = 24
OVERHEAD = 16


def test_hundred_turns_at_n_ctx_1024(model_id, model_paths):
    a = Assistant(Database(db_path()), EngineConfig(model=model_id, load=LoadParams(n_ctx=N_CTX, n_threads=THREADS)))
    try:
        cid = a.new_conversation("You are a helpful assistant. Keep answers short.")
        shifts, heavy = [], []
        for i in range(N_TURNS):
            text = f"Question {i}: tell me one fact about the number {i}."
            done = turn(a, cid, text, max_tokens=MAX_TOKENS)
            s, ctx = done.stats, done.stats.context
            assert s.prompt_tokens <= ctx["budget"] <= N_CTX - MAX_TOKENS
            assert ctx["used"] == s.prompt_tokens and 0 < ctx["water_level"] <= 1
            n_new = len(a.vocab.tokenize(text, special=False))
            if ctx["context_shift"]:
                shifts.append((i, ctx["context_shift"], s.prompt_tokens_evaluated))
            elif i > 0 and s.prompt_tokens_evaluated > n_new + OVERHEAD + 1:
                heavy.append((i, s.prompt_tokens_evaluated, s.cache_mode))
        log.info("%s: shift points %s", model_id, shifts)
        assert shifts, "100 turns must overflow a 1024-token window"
        assert not heavy, f"full re-evaluations outside shift points: {heavy}"
        # Shift points are occasional: each frees a good part of the window.
        assert len(shifts) <= N_TURNS // 4
        kinds = {k for _, k, _ in shifts}
        if a.backend.n_swa:  # Gemma-3's sliding-window cache cannot shift: re-evaluate, and say so
            assert kinds == {"reeval"}
        else:
            assert kinds == {"kv"} and all(n <= 40 + OVERHEAD for _, _, n in shifts)
        rows = a.db.messages(cid)
        assert len([r for r in rows if r["role"] == "user"]) == N_TURNS  # nothing dropped from storage
    finally:
        a.close()
