"""The plan against what llama.cpp actually allocates when the demo models load (CPU only here).

The plan is made at budget 0 (CPU only) with the KV type pinned, the Backend is loaded with the
plan's own LoadParams, and Backend.memory_report (llama.cpp's logged buffer sizes) is the truth.
Run with `-o log_cli=true --log-cli-level=INFO` to see the errors recorded in docs/planner.md.
"""

import logging

import pytest

from engine.inference.backend import Backend, LoadParams
from engine.models.kv_math import MIB, kv_cells
from engine.models.planner import load_facts, plan

from .helpers import THREADS

log = logging.getLogger(__name__)

CASES = [(2048, "f16"), (4096, "f16"), (8192, "f16"), (4096, "q8_0"), (8192, "q8_0")]


@pytest.mark.parametrize("n_ctx,kv", CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_planned_kv_weights_and_compute_match_the_real_allocation(model_paths, model_id, n_ctx, kv, capfd):
    facts = load_facts(model_paths[model_id])
    p = plan(facts, 0, n_ctx, kv_type=kv)
    assert p.offload == "cpu" and p.flash_attn == (kv != "f16")
    backend = Backend(model_paths[model_id], LoadParams(**p.load_kwargs(), n_threads=THREADS))
    try:
        report = backend.memory_report
    finally:
        backend.close()
    assert capfd.readouterr().err == ""  # the captured llama.cpp log never reaches the user's stderr

    kv_real = report["kv_bytes"]
    # A mapped file holds every tensor, and CPU_REPACK re-laid-out copies of some beside it; a
    # CPU load reads the weights instead (engine/inference/backend.py `_load`), and the CPU and
    # CPU_REPACK buffers then hold each tensor once.
    mapped = any(buft.endswith("_Mapped") for buft in report["weights"])
    weights_real = report["weights_bytes"] - (report["weights_repack_bytes"] if mapped else 0)
    compute_real = report["compute_bytes"]
    kv_err = (p.kv_bytes_total - kv_real) / kv_real
    w_err = (p.weights_bytes_total - weights_real) / weights_real
    c_err = (p.compute_buffer_bytes_estimate - compute_real) / compute_real
    log.info("%s n_ctx=%d %s: KV plan %.2f / real %.2f MiB (%+.3f%%); weights %.2f / %.2f MiB (%+.3f%%); "
             "compute est %.2f / %.2f MiB (%+.1f%%); repack %.2f MiB", model_id, n_ctx, kv,
             p.kv_bytes_total / MIB, kv_real / MIB, 100 * kv_err, p.weights_bytes_total / MIB,
             weights_real / MIB, 100 * w_err, p.compute_buffer_bytes_estimate / MIB, compute_real / MIB,
             100 * c_err, report["weights_repack_bytes"] / MIB)

    assert abs(kv_err) < 0.05 and abs(w_err) < 0.05
    assert report["model_size_bytes"] == facts.file_weights_bytes  # Σ tensor bytes: exact
    # cells per cache, as llama.cpp logged them: full-attention cache first, then the SWA cache
    full, swa = kv_cells(facts, n_ctx)
    expected = [(full, facts.n_layers - sum(facts.swa_layers))] + ([(swa, sum(facts.swa_layers))] if facts.has_swa else [])
    assert [(c["cells"], c["layers"]) for c in report["kv_caches"]] == expected
    assert all(c["type_k"] == c["type_v"] == kv for c in report["kv_caches"])
    # the compute buffer is an estimate; on the CPU backend it lands within a few per cent
    assert abs(c_err) < 0.10
