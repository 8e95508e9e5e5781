"""Draft models (issue 40) on the catalog's side: the pairs the catalog names, finding a target's
draft on disk (`resolve_draft`), and the draft's place in the plan (GPU beside the target within the
budget, else the CPU). Fast: catalog facts and the demo GGUFs' headers, nothing is loaded."""

import pytest

from engine.models.catalog import Catalog, ModelEntry, ResolvedModel, load_catalog, resolve_draft, resolve_model
from engine.models.devices import DeviceSnapshot, GPUInfo, default_vram_budget_mb
from engine.models.draft_pair import vocab_mismatch
from engine.models.kv_math import MIB, facts_from_catalog, kv_bytes
from engine.models.planner import plan, ram_bytes
from engine.models.recommend import N_CTX, candidates, recommend_models
from tests.conftest import MODELS

CATALOG = load_catalog()
PAIRS = [(e, CATALOG.draft_of(e)) for e in CATALOG.entries if e.draft]
QWEN7, QWEN05 = "qwen2.5-7b-instruct-q4_k_m", "qwen2.5-0.5b-instruct"


def test_the_catalog_pairs_each_l2_line_with_a_small_draft_of_its_family():
    assert {(t.id, d.id) for t, d in PAIRS} == {(QWEN7, QWEN05), ("qwen3-8b", "qwen3-0.6b"),
                                                ("gemma-3-4b-it", "gemma-3-270m-it"),
                                                ("gemma-3-12b-it", "gemma-3-270m-it")}
    for target, draft in PAIRS:
        assert draft is not None and draft.family == target.family and draft.arch == target.arch, target.id
        assert draft.params_b * 10 < target.params_b and draft.instruct and not draft.draft
        # No tier: offered beside its targets, never picked for a chat tier by itself.
        assert draft.tier == "" and CATALOG.draft_only(draft) and draft not in candidates(CATALOG)
        assert target in CATALOG.targets_of(draft) and not CATALOG.draft_only(target)
    # a quant copy of a target keeps its draft
    assert CATALOG.get(f"{QWEN7}@q8_0").draft == QWEN05


def test_vocabulary_sizes_in_the_catalog_are_within_llama_cpps_slack():
    for target, draft in PAIRS:
        if target.n_vocab and draft.n_vocab:
            assert abs(target.n_vocab - draft.n_vocab) <= 128, target.id


def _installed(tmp_path, monkeypatch, *entries: ModelEntry):
    """A models folder holding `entries` (the demo model's bytes under their file names)."""
    folder = tmp_path / "models"
    folder.mkdir(exist_ok=True)
    monkeypatch.setenv("ASSISTANT_MODELS_DIR", str(folder))
    for e in entries:
        (folder / e.file).symlink_to(MODELS["demo-small"])
    return folder


def test_resolve_draft_finds_the_downloaded_draft_and_says_why_not_otherwise(tmp_path, monkeypatch):
    target_entry, draft_entry = CATALOG.get(QWEN7), CATALOG.get(QWEN05)
    folder = _installed(tmp_path, monkeypatch, target_entry)
    target = resolve_model(QWEN7)
    assert resolve_draft(target) == (None, "the draft model Qwen2.5 0.5B Instruct is not downloaded; "
                                           "Models downloads it")
    (folder / draft_entry.file).symlink_to(MODELS["demo-small"])
    draft, why = resolve_draft(target)
    assert why == "" and draft == ResolvedModel(QWEN05, folder / draft_entry.file, draft_entry)
    # the file behind it is checked separately; here both are the demo model: same vocabulary
    assert vocab_mismatch(target.path, draft.path) is None
    # a quant copy of the target resolves the same draft
    (folder / target_entry.files["Q8_0"]).symlink_to(MODELS["demo-small"])
    assert resolve_draft(resolve_model(f"{QWEN7}@q8_0"))[0] == draft


def test_resolve_draft_without_a_pair(tmp_path, monkeypatch):
    _installed(tmp_path, monkeypatch)
    assert resolve_draft(resolve_model(str(MODELS["demo-int4"]))) == \
        (None, "gemma-3-270m-q4_k_m.gguf is not a catalog model, so it has no draft model")
    small = ResolvedModel("demo-small", MODELS["demo-small"], CATALOG.get("demo-small"))
    assert resolve_draft(small) == (None, "SmolLM2 135M Instruct has no draft model in the catalog")
    broken = ModelEntry(id="t", name="T", file="t.gguf", draft="nowhere")
    assert resolve_draft(ResolvedModel("t", MODELS["demo-small"], broken), Catalog([broken])) == \
        (None, "the catalog names no usable draft model for T")


def test_a_draft_goes_on_the_gpu_beside_the_target_when_it_fits():
    alone = plan(QWEN7, 6144, 4096)
    p = plan(QWEN7, 6144, 4096, draft=QWEN05)
    d = p.draft
    # the target's plan is what it was without a draft
    assert (p.n_gpu_layers, p.n_ctx, p.type_k, p.gpu_bytes_total) == \
        (alone.n_gpu_layers, alone.n_ctx, alone.type_k, alone.gpu_bytes_total) and alone.draft is None
    assert d.placement == "gpu" and d.n_gpu_layers == 25 and d.n_ctx == p.n_ctx and d.type_k == p.type_k
    # its weights, its KV cache at the target's context, its compute buffer: all within the budget
    f = facts_from_catalog(CATALOG.get(QWEN05))
    assert d.kv_bytes == kv_bytes(f, 4096) == 24 * 2 * (64 + 64) * 2 * 4096  # 48 MiB
    assert d.gpu_bytes == d.weights_bytes - f.input_bytes + d.kv_bytes + d.compute_buffer_bytes_estimate
    assert p.gpu_bytes_total + d.gpu_bytes <= 6144 * MIB
    assert "Draft qwen2.5-0.5b-instruct: on the GPU beside the target" in p.explanation
    assert d.load_kwargs() == dict(n_ctx=4096, n_gpu_layers=25, n_batch=512, type_k="f16", type_v="f16",
                                   flash_attn=False, swa_full=False)
    # on the GPU, RAM holds only its token embedding and its vocabulary
    assert ram_bytes(p) - ram_bytes(alone) == d.host_bytes < 120 * MIB
    assert p.as_dict()["draft"]["placement"] == "gpu"


def test_a_draft_that_does_not_fit_beside_the_target_goes_to_the_cpu():
    p = plan(QWEN7, 5400, 4096, draft=QWEN05)  # the target fits, 857 MiB more does not
    d = p.draft
    assert p.offload == "full" and d.placement == "cpu" and d.n_gpu_layers == 0 and d.gpu_bytes == 0
    assert "it needs 857 MiB on the GPU, the target leaves" in d.explanation
    assert d.type_k == "f16" and not d.flash_attn and d.kv_bytes == 48 * MIB
    assert ram_bytes(p) - ram_bytes(plan(QWEN7, 5400, 4096)) == d.host_bytes > d.weights_bytes + d.kv_bytes
    cpu = plan(QWEN7, 0, 4096, draft=QWEN05)
    assert cpu.offload == "cpu" and cpu.draft.placement == "cpu" and "nothing of the VRAM budget" in cpu.explanation


@pytest.mark.parametrize("budget", [0, 800, 3000, 5300, 6144, 12000])
def test_the_pair_never_exceeds_the_budget(budget):
    for target, draft in PAIRS:
        p = plan(target.id, budget, 8192, draft=draft.id)
        assert p.gpu_bytes_total + p.draft.gpu_bytes <= budget * MIB, (target.id, budget)
        assert p.draft.n_ctx == p.n_ctx


def test_a_draft_with_a_shorter_training_context_says_so():
    p = plan("gemma-3-12b-it", 24000, 65536, draft="gemma-3-270m-it")
    assert p.draft.n_ctx == p.n_ctx == 65536 and "training context is shorter" in p.draft.explanation


def test_the_recommendation_counts_the_draft_that_comes_with_a_pick():
    gib = 1 << 30
    gpu = GPUInfo(0, "RTX", "nvidia", int(8.5 * gib), 8 * gib, gib // 2, backend="cuda", device="CUDA0", kind="gpu",
                  memory_from="nvml")
    snap = DeviceSnapshot(0.0, 8, 4, 32 * gib, 24 * gib, 200 << 20, gpus=(gpu,))
    rec = recommend_models(snap, CATALOG)
    draft = CATALOG.draft_of(rec.l2.entry)
    assert (rec.l2.id, draft.id) == ("qwen3-8b", "qwen3-0.6b")
    p = plan(rec.l2.entry, default_vram_budget_mb(snap, want="CUDA0"), N_CTX, draft=draft)
    assert p.draft.placement == "gpu" and rec.l2.vram_bytes == p.gpu_bytes_total + p.draft.gpu_bytes
    assert rec.l2.ram_bytes == ram_bytes(p)
