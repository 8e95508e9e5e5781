"""A turn whose reader goes away (an error while storing it, a closed generator) stops the model:
it must not decode on to max_tokens while the next turn waits behind it."""

import threading
import time

from engine.inference.backend import LoadParams, SamplingParams
from engine.api import Assistant, EngineConfig
from engine.inference.events import GenerateParams
from engine.config.paths import db_path
from engine.storage import Database

from .helpers import THREADS


def test_closing_a_turn_midway_stops_the_model(model_paths):
    a = Assistant(Database(db_path()), EngineConfig(model="demo-small", load=LoadParams(n_ctx=4096, n_threads=THREADS), kv_tiers=False))
    try:
        cid = a.new_conversation()
        worker = a.manager.loaded()[0]
        # The model holds at its fourth decoded token until the reader has gone: how many tokens it
        # decodes after that is then the engine's doing, not a race with how fast this machine is.
        closed, decoded, evaluate = threading.Event(), [], worker.backend.eval

        def held_eval(tokens, *args, **kwargs):
            if len(tokens) == 1:  # a decoded token read back (the prompt goes in one call)
                decoded.append(tokens[0])
                if len(decoded) == 4:
                    assert closed.wait(120), "the test never closed the turn"
            return evaluate(tokens, *args, **kwargs)

        worker.backend.eval = held_eval
        params = GenerateParams(max_tokens=2000, sampling=SamplingParams(temperature=0.8, seed=1))
        turn = a.send(cid, "Tell me a very long story about the sea.", params)
        try:
            for n, _chunk in enumerate(turn, 1):
                if n == 3:
                    break
            turn.close()
        finally:
            closed.set()
        deadline = time.monotonic() + 60
        while worker.busy and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not worker.busy
        stored = [m for m in a.db.messages(cid) if m["role"] == "assistant"][0]
        assert stored["status"] == "done" and stored["stats"]["finish_reason"] == "interrupted"
        # The context holds the prompt, the shown tokens and at most a few decoded before the
        # cancel was seen: not the 2000 the turn allowed. Held as above, the model reads back the
        # token it was given and samples one more, then sees the cancel: five decoded at most.
        session = a.session(cid)
        prompt = session.render(session.messages[:-1], True)
        kv = list(worker.view.kv_tokens)
        assert kv[:len(prompt)] == prompt and len(kv) - len(prompt) <= 5, (len(prompt), len(kv))
        assert len(worker.view.kv_tokens) < 200, len(worker.view.kv_tokens)  # as its thread published it
    finally:
        a.close()
        a.db.close()
