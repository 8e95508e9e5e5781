"""CPU threads on a real model: a load without a count calibrates once and keeps it, a manual
count is what llama.cpp runs, and a count changed between decodes leaves what the model computes
within the bound reuse guarantees (tests/model/helpers.py)."""

from __future__ import annotations

import json

from engine.inference import backend as backend_module, llama_seam, thread_calibration
from engine.inference.backend import Backend, LoadParams
from engine.inference.thread_calibration import FILE, CalibrationStore
from tests.model.helpers import assert_logits_agree, forced_logits


def _running(backend: Backend) -> tuple[int, int]:
    ctx = backend._ctx.ptr
    return llama_seam._C.llama_n_threads(ctx), llama_seam._C.llama_n_threads_batch(ctx)


def test_an_automatic_load_calibrates_once_and_runs_its_best(model_paths, assistant_home, monkeypatch):
    store = CalibrationStore()  # not the process's: an earlier test's load may have calibrated it
    monkeypatch.setattr(backend_module, "STORE", store)
    # Kept even if other programs are busy now (what a busy calibration does is tests/test_thread_calibration.py's).
    monkeypatch.setattr(thread_calibration, "QUIET_CPUS", float("inf"))
    backend = Backend(model_paths["demo-small"], LoadParams(n_ctx=512))
    try:
        t = backend.threads
        assert t.reason == "calibrated" and (t.decode, t.batch) == (t.best_decode, t.best_batch)
        assert _running(backend) == (t.decode, t.batch)
        assert backend.kv_tokens == []  # calibration leaves nothing behind
        kept = json.loads((assistant_home / FILE).read_text())
        (key, entry), = kept.items()
        assert key.startswith(backend.identity + "|") and entry["decode"] and entry["batch"]
        assert CalibrationStore().get(assistant_home / FILE, key).cached
        again = Backend(model_paths["demo-small"], LoadParams(n_ctx=512))  # the same model: not measured again
        again.close()
        assert json.loads((assistant_home / FILE).read_text()) == kept
    finally:
        backend.close()


def test_a_manual_count_is_what_llama_cpp_runs(model_paths, assistant_home):
    backend = Backend(model_paths["demo-small"], LoadParams(n_ctx=512, n_threads=1))
    try:
        assert _running(backend) == (1, 1)
        assert backend.threads.reason == "manual"
        assert not (assistant_home / FILE).exists()  # nothing measured
    finally:
        backend.close()


def test_changing_threads_between_decodes_keeps_the_logits(model_paths):
    backend = Backend(model_paths["demo-small"], LoadParams(n_ctx=512, n_threads=2))
    try:
        prompt = backend.tokenize("The history of the printing press begins in", special=False)
        answer = backend.tokenize(" the fifteenth century, when movable type reached Europe and spread", special=False)
        ref = forced_logits(backend, prompt, answer)
        backend.reset()
        backend._ctx.set_threads(1, 1)  # as the policy does, between decodes
        got = forced_logits(backend, prompt, answer)
        assert _running(backend) == (1, 1)
        assert_logits_agree(ref, got, "one thread against two")
    finally:
        backend.close()
