"""The catalog's current instruction-tuned models: planner facts, GGUF files per quant, hubs,
tiers per size class, vision models and their projectors, quant copies, and `assistant models --json`."""

import json

import pytest

from engine.cli.main import main
from engine.models.catalog import HUBS, SIZE_CLASSES, ModelEntry, load_catalog
from engine.models.planner import plan

CATALOG = load_catalog()
INSTRUCT = [e for e in CATALOG.entries if e.instruct]
REAL = [e for e in CATALOG.entries if not e.demo]
TEXT = [e for e in REAL if not CATALOG.vision_only(e)]  # vision models without a tier: their own rules below
VISION = [e for e in REAL if e.projector]


def test_at_least_twelve_instruct_models_and_the_demo_base_model_says_so():
    assert len([e for e in INSTRUCT if not e.demo]) >= 12
    assert CATALOG.get("demo-int4").instruct is False
    assert CATALOG.get("demo-small").instruct is True
    assert ModelEntry(id="x", name="x", file="x.gguf").instruct is False  # never claimed by default


@pytest.mark.parametrize("entry", CATALOG.entries, ids=lambda e: e.id)
def test_every_entry_has_planner_facts(entry):
    for name in ("n_layers", "n_heads", "n_kv_heads", "head_dim_k", "head_dim_v", "context_length"):
        value = getattr(entry, name)
        assert isinstance(value, int) and value > 0, name
    assert entry.n_heads % entry.n_kv_heads == 0
    assert entry.head_dim_k % 32 == 0 and entry.head_dim_v % 32 == 0  # KV rows quantise in blocks of 32
    assert entry.sliding_window < entry.context_length
    assert entry.params_b > 0 and entry.family and entry.license and entry.size_bytes > 0


@pytest.mark.parametrize("entry", TEXT, ids=lambda e: e.id)
def test_every_real_entry_has_a_q4_k_m_file_sizes_and_both_hubs(entry):
    assert entry.files["Q4_K_M"].endswith(".gguf")
    assert entry.files[entry.quant] == entry.file
    assert set(entry.sizes) == set(entry.files) and all(v > 0 for v in entry.sizes.values())
    assert entry.sizes[entry.quant] == entry.size_bytes
    assert set(entry.sources) == set(HUBS) and all("/" in r for r in entry.sources.values())
    assert entry.source_repo == entry.sources["huggingface"]
    assert entry.instruct


def test_each_size_class_has_a_cpu_and_a_gpu_pick():
    for size_class, _ in SIZE_CLASSES:
        tiers = {e.tier for e in TEXT if e.size_class == size_class and not CATALOG.draft_only(e)}
        assert tiers == {"L1", "L2"}, size_class


def test_vision_models_come_with_their_projector_on_both_hubs():
    """SmolVLM2 256M and 500M for the CPU, Gemma 3 4B and Qwen2.5-VL 3B for a 6 GB GPU, InternVL3 1B
    for Chinese text in images (issue 41); none of the vision-only ones is a text pick."""
    assert {"smolvlm2-256m-video-instruct", "smolvlm2-500m-video-instruct", "gemma-3-4b-it",
            "internvl3-1b-instruct", "qwen2.5-vl-3b-instruct"} <= {e.id for e in VISION}
    for e in VISION:
        assert e.projector.startswith("mmproj-") and e.projector.endswith(".gguf") and e.projector != e.file
        assert e.projector_bytes > 0 and e.image_tokens > 0 and e.instruct
        assert set(e.sources) == set(HUBS) and e.files[e.quant] == e.file and e.sizes[e.quant] == e.size_bytes
        proj = e.projector_entry()
        assert (proj.file, proj.sources, proj.size_bytes) == (e.projector, e.sources, e.projector_bytes)
        p = plan(e.id, 6144, 4096)
        assert p.projector_gpu_bytes == e.projector_bytes and p.gpu_bytes_total <= 6144 * 2**20
        assert p.image_tokens == e.image_tokens and f"a photo takes ~{e.image_tokens}" in p.explanation
        assert plan(e.id, 0, 4096).projector_gpu_bytes == 0
    assert all(CATALOG.vision_only(e) == (e.tier == "") for e in VISION)


@pytest.mark.parametrize("entry", REAL, ids=lambda e: e.id)
def test_the_planner_plans_every_model_from_catalog_facts(entry):
    cpu = plan(entry.id, 0, 4096)
    assert cpu.offload == "cpu" and cpu.source == "catalog" and cpu.n_layers == entry.n_layers
    gpu = plan(entry.id, 6144, 4096)
    assert gpu.gpu_bytes_total <= 6144 * 2**20
    # Sliding-window layers cap their cache (at 4096 tokens Gemma's KV is under half of a
    # full-attention model's); every other model keeps all 4096 tokens in every layer.
    full = cpu.kv_bytes_per_token * cpu.n_ctx
    assert (cpu.kv_bytes_total < full / 2) if entry.sliding_window else cpu.kv_bytes_total == full


def test_with_quant_copies_the_entry_at_another_quant():
    e = CATALOG.get("qwen3-4b")
    q8 = e.with_quant("q8_0")
    assert (q8.id, q8.quant, q8.file, q8.size_bytes) == ("qwen3-4b@q8_0", "Q8_0", "Qwen3-4B-Q8_0.gguf",
                                                          e.sizes["Q8_0"])
    assert q8.sha256 == "" and q8.n_layers == e.n_layers and q8.sources == e.sources
    assert e.with_quant("Q4_K_M") is e  # the default quant keeps the id settings store
    assert CATALOG.get("qwen3-4b@q8_0") == q8 and CATALOG.get("qwen3-4b@q2_k") is None
    with pytest.raises(ValueError, match="no Q2_K file"):
        e.with_quant("Q2_K")
    legacy = CATALOG.get("qwen2.5-1.5b-instruct-q4_k_m").with_quant("Q8_0")
    assert legacy.url.endswith("/qwen2.5-1.5b-instruct-q8_0.gguf") and legacy.file == "qwen2.5-1.5b-instruct-q8_0.gguf"


def test_a_default_file_that_is_not_its_quants_file_is_refused():
    with pytest.raises(ValueError, match="not files"):
        ModelEntry(id="x", name="x", file="a.gguf", quant="Q4_K_M", files={"Q4_K_M": "b.gguf"})


def test_repo_for_each_hub():
    e = CATALOG.get("qwen2.5-3b-instruct")
    assert e.repo_for("huggingface") == e.repo_for("hf-mirror") == "Qwen/Qwen2.5-3B-Instruct-GGUF"
    assert e.repo_for("modelscope") == "qwen/Qwen2.5-3B-Instruct-GGUF"
    demo = CATALOG.get("demo-int4")
    assert demo.repo_for("modelscope") == demo.source_repo  # no ModelScope repo: the fallback


def test_names_leave_demo_to_the_flag():
    assert not [e.id for e in CATALOG.entries if "(demo)" in e.name]


def test_models_json_lists_every_model_with_its_fit(capsys):
    assert main(["models", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [e.id for e in CATALOG.entries]
    keys = {"id", "name", "family", "params_b", "quant", "size_bytes", "license", "instruct", "tier", "sources",
            "demo", "downloaded", "fits"}
    for r in rows:
        assert keys <= set(r), r["id"]
        assert r["fits"] in ("gpu", "partial", "cpu", "too_big", "unknown")
    by_id = {r["id"]: r for r in rows}
    assert by_id["demo-int4"]["instruct"] is False
    assert by_id["qwen3-8b"]["sources"]["modelscope"] == "unsloth/Qwen3-8B-GGUF"
    assert by_id["llama-3.2-1b-instruct"]["fits"] in ("cpu", "too_big")  # an L1 model is planned without a GPU


def test_models_without_json_prints_a_table(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "qwen3-8b" in out and "SmolLM2 135M Instruct (demo)" in out and "(demo) (demo)" not in out
