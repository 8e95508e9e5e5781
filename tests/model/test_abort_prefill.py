"""Stop in the middle of a prompt piece (issue 25): on the CPU a prompt goes in whole n_batch
pieces, and a stop() that turns true while one runs aborts it inside llama.cpp. The cache then
holds exactly the whole pieces before it, and finishing the prompt gives the logits an
uninterrupted evaluation gives, within the bound measured across CPU kernels (helpers.py)."""

import threading

from engine.inference.backend import ABORT_WATCH_THREAD, Backend, LoadParams

from .helpers import THREADS, assert_logits_agree

N_BATCH = 128


def _prompt(backend: Backend, n: int) -> list[int]:
    text = " ".join(f"Line {i}: the river carries silt to the delta, where reeds grow." for i in range(400))
    ids = backend.tokenize(text, special=False)
    assert len(ids) >= n
    return ids[:n]


def test_stop_aborts_a_running_piece_and_the_cache_keeps_the_whole_pieces(model_paths):
    backend = Backend(model_paths["demo-small"], LoadParams(n_ctx=2048, n_batch=N_BATCH, n_threads=THREADS))
    try:
        assert backend.abortable  # no GPU here
        prompt = _prompt(backend, 6 * N_BATCH)
        # Between pieces the model's thread hears "go on"; only the abort watch hears "stop", so the
        # stop can only land inside a running piece (every ABORT_POLL_S, from the watch's thread).
        watch_asked = threading.Event()

        def stop() -> bool:
            if threading.current_thread().name == ABORT_WATCH_THREAD:
                watch_asked.set()
                return True
            return False

        done = backend.eval(prompt, N_BATCH, stop)
        assert watch_asked.is_set()
        assert done < len(prompt) and done % N_BATCH == 0  # the aborted piece was dropped whole
        assert backend.kv_tokens == prompt[:done]
        assert backend.eval(prompt[done:], N_BATCH) == len(prompt) - done
        resumed = backend.first_logits()
        backend.reset()
        backend.eval(prompt, N_BATCH)
        assert_logits_agree(backend.first_logits()[None, :], resumed[None, :], "resumed after an abort")
        # The flag was lowered: a later decode with no stop runs to the end.
        assert backend.eval([prompt[-1]]) == 1
    finally:
        backend.close()
