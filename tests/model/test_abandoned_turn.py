"""A turn whose reader goes away (an error while storing it, a closed generator) stops the model:
it must not decode on to max_tokens while the next turn waits behind it."""

import time

from engine.inference.backend import LoadParams, SamplingParams
from engine.api import Assistant
from engine.inference.generate import GenerateParams
from engine.config.paths import db_path
from engine.storage import Database

from .helpers import THREADS


def test_closing_a_turn_midway_stops_the_model(model_paths):
    a = Assistant(Database(db_path()), "demo-small", LoadParams(n_ctx=4096, n_threads=THREADS), kv_tiers=False)
    try:
        cid = a.new_conversation()
        params = GenerateParams(max_tokens=2000, sampling=SamplingParams(temperature=0.8, seed=1))
        turn = a.send(cid, "Tell me a very long story about the sea.", params)
        for n, _chunk in enumerate(turn, 1):
            if n == 3:
                break
        turn.close()
        worker = a.manager.loaded()[0]
        deadline = time.monotonic() + 60
        while worker.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not worker.busy
        stored = [m for m in a.db.messages(cid) if m["role"] == "assistant"][0]
        assert stored["status"] == "done" and stored["stats"]["finish_reason"] == "interrupted"
        # The context holds the prompt, the shown tokens and at most a few decoded before the
        # cancel was seen: not the 2000 the turn allowed.
        assert len(worker.backend.kv_tokens) < 200, len(worker.backend.kv_tokens)
    finally:
        a.close()
        a.db.close()
