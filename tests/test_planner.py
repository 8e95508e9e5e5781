"""KV / weights accounting and the planner's policy. Fast: metadata only, no model loads."""

import argparse
import json
import subprocess

import gguf
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.models import kv_math
from engine.models.catalog import load_catalog
from engine.cli.plan import cmd_plan, parse_budget
from engine.models.gguf_info import read_gguf
from engine.models.kv_math import MIB, facts_from_catalog, facts_from_gguf, kv_bytes, kv_bytes_per_token, kv_cells
from engine.models.planner import Plan, PlanError, plan

from tests.conftest import MODELS
from tests.util import cli, cli_env

CATALOG = load_catalog()
SMOL = facts_from_gguf(read_gguf(MODELS["demo-small"]), "demo-small")
GEMMA = facts_from_gguf(read_gguf(MODELS["demo-int4"]), "demo-int4")
QWEN7 = facts_from_catalog(CATALOG.get("qwen2.5-7b-instruct-q4_k_m"))
QWEN15 = facts_from_catalog(CATALOG.get("qwen2.5-1.5b-instruct-q4_k_m"))
ALL = [SMOL, GEMMA, QWEN7, QWEN15, facts_from_catalog(CATALOG.get("demo-int4"))]
KV_RANK = {t: i for i, t in enumerate(kv_math.KV_ORDER)}  # higher = more quantised


# ---- KV accounting, by hand

def test_gqa_bytes_per_token_smollm2():
    # 30 layers x 3 KV heads x (64 key + 64 value) x 2 bytes (f16) = 23040
    assert kv_bytes_per_token(SMOL) == 30 * 3 * (64 + 64) * 2 == 23040
    # q8_0: a 192-wide row is 6 blocks of 32 at 34 bytes = 204 bytes, for K and for V
    assert kv_bytes_per_token(SMOL, "q8_0", "q8_0", True) == 30 * (204 + 204) == 12240
    # q4_0: 6 blocks of 18 bytes = 108
    assert kv_bytes_per_token(SMOL, "q4_0", "q4_0", True) == 30 * (108 + 108) == 6480
    assert kv_math.mha_ratio(SMOL) == 3.0  # 9 query heads share 3 KV heads


def test_mqa_bytes_per_token_and_sliding_window_gemma3():
    # 18 layers x 1 KV head x (256 + 256) x 2 bytes = 18432 before any window
    assert kv_bytes_per_token(GEMMA) == 18 * 1 * (256 + 256) * 2 == 18432
    assert kv_bytes_per_token(GEMMA, "q8_0", "q8_0", True) == 18 * (272 + 272) == 9792  # 256/32*34 = 272
    assert kv_math.mha_ratio(GEMMA) == 4.0  # 4 query heads, 1 KV head
    # llama.cpp's gemma3 pattern (n_pattern 6, dense last): layers 5, 11, 17 see the whole context
    assert [il for il, swa in enumerate(GEMMA.swa_layers) if not swa] == [5, 11, 17]
    # SWA cache: GGML_PAD(min(4096, 512 window + 512 ubatch), 256) = 1024 cells
    assert kv_cells(GEMMA, 4096) == (4096, 1024)
    assert kv_bytes(GEMMA, 4096) == 3 * 4096 * 1024 + 15 * 1024 * 1024  # 12 MiB + 15 MiB
    assert kv_cells(GEMMA, 4096, swa_full=True) == (4096, 4096)
    assert kv_cells(GEMMA, 4096, n_ubatch=128) == (4096, 768)  # 640 padded to 768
    assert kv_cells(GEMMA, 200) == (256, 256)  # n_ctx padded to 256, window capped by it


def test_catalog_facts_agree_with_the_gguf_on_kv():
    for entry_id, facts in (("demo-small", SMOL), ("demo-int4", GEMMA)):
        est = facts_from_catalog(CATALOG.get(entry_id))
        assert est.source == "catalog" and "estimated from the file size" in est.notes[0]
        for n_ctx in (256, 4096, 32768):
            assert kv_bytes(est, n_ctx) == kv_bytes(facts, n_ctx)
        # the weight estimate errs high on the GPU side
        full = facts.n_layers + 1
        for ngl in range(1, full + 1):
            assert kv_math.weights_split(est, ngl)[0] >= kv_math.weights_split(facts, ngl)[0]


def test_per_layer_head_counts_as_arrays(tmp_path):
    path = tmp_path / "tiny.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(3)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_array("llama.attention.head_count_kv", [1, 2, 4])
    w.add_key_length(32)
    w.add_value_length(32)
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float16))
    for i in range(3):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((64, 64), dtype=np.float32))
    w.add_tensor("output_norm.weight", np.zeros(64, dtype=np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    f = facts_from_gguf(read_gguf(path))
    assert f.n_kv_heads == (1, 2, 4) and f.n_vocab == 100
    assert f.layer_bytes == (64 * 64 * 4,) * 3 and f.input_bytes == 100 * 64 * 2
    assert f.output_copy_bytes == 100 * 64 * 2  # no output.weight: tied to the embedding
    # flash attention: K and V per layer = (1 + 2 + 4) heads x 32 x 2 bytes each
    assert kv_bytes_per_token(f, flash_attn=True) == 2 * (1 + 2 + 4) * 32 * 2 == 896
    # without it V is stored transposed at the widest layer's width (4 heads) on every layer
    assert kv_bytes_per_token(f) == (1 + 2 + 4) * 32 * 2 + 3 * 4 * 32 * 2 == 1216


def test_layer_placement_follows_llama_cpp():
    full = SMOL.n_layers + 1
    assert list(kv_math.gpu_layer_ids(SMOL, 0)) == []
    assert list(kv_math.gpu_layer_ids(SMOL, 1)) == []  # the output layer goes first
    assert list(kv_math.gpu_layer_ids(SMOL, 3)) == [28, 29]
    assert list(kv_math.gpu_layer_ids(SMOL, full)) == list(range(30))
    gpu, cpu = kv_math.weights_split(SMOL, 0)
    assert gpu == 0 and cpu == SMOL.file_weights_bytes == 96576768  # Σ tensor bytes of the file
    gpu, cpu = kv_math.weights_split(SMOL, full)
    assert cpu == SMOL.input_bytes  # token embedding stays on the CPU
    assert gpu + cpu == SMOL.file_weights_bytes + SMOL.output_copy_bytes  # tied output copied to the GPU


# ---- policy

def test_6144_mb_fits_qwen25_7b_fully_with_at_least_4096_context():
    p = plan(QWEN7, 6144, 4096)
    assert p.offload == "full" and p.fits and p.n_gpu_layers == 29 and p.n_ctx >= 4096
    assert p.gpu_bytes_total <= 6144 * MIB and p.source == "catalog"
    assert p.kv_bytes_per_token == 28 * 4 * (128 + 128) * 2  # 57344: GQA 28 query / 4 KV heads
    assert p.mha_ratio == 7.0


def test_3_gb_gives_partial_offload():
    p = plan(QWEN7, 3072, 4096)
    assert p.offload == "partial" and 1 <= p.n_gpu_layers < p.n_layers + 1 and not p.fits
    assert p.type_k == p.type_v == "q4_0" and p.flash_attn and p.n_ctx == 2048
    assert "partial offload" in p.explanation and p.gpu_bytes_total <= 3072 * MIB


def test_zero_budget_is_cpu_only_with_f16_kv_and_the_asked_context():
    for f in ALL:
        p = plan(f, 0, 4096)
        assert p.offload == "cpu" and p.n_gpu_layers == 0 and p.gpu_bytes_total == 0
        assert p.type_k == p.type_v == "f16" and not p.flash_attn and p.n_ctx == min(4096, f.context_length)


def test_shrink_order_kv_q8_then_context_then_q4_then_layers():
    stages = []
    for budget in range(8000, 0, -5):
        p = plan(QWEN7, budget, 8192)
        ctx = "asked" if p.n_ctx == 8192 else "floor" if p.n_ctx == 2048 else "between"
        stage = (p.offload, p.type_k, ctx)
        if not stages or stages[-1] != stage:
            stages.append(stage)
    assert stages == [("full", "f16", "asked"), ("full", "q8_0", "asked"), ("full", "q8_0", "between"),
                      ("full", "q8_0", "floor"), ("full", "q4_0", "floor"), ("partial", "q4_0", "floor"),
                      ("cpu", "q4_0", "floor")]


def test_bad_budget_and_context_are_refused():
    for bad in ("6144", float("nan"), float("inf"), [1]):  # the CLI parses text with parse_budget first
        with pytest.raises(PlanError):
            plan(SMOL, bad)
    with pytest.raises(PlanError):
        plan(SMOL, 100, 0)
    for text in ("-1", "abc", "inf", ""):
        with pytest.raises(PlanError):
            parse_budget(text)
    assert parse_budget("6144") == 6144.0 and parse_budget(None) is None


@pytest.mark.parametrize("model,budget,code,words", [
    ("demo-small", "-5", 2, "0 or more"), ("demo-small", "lots", 2, "a number"),
    ("no-such-model", "100", 3, "unknown model"), ("/nonexistent/m.gguf", "100", 3, "not found"),
])
def test_cli_plan_bad_input_is_a_message_and_an_exit_code(capsys, model, budget, code, words):
    args = argparse.Namespace(model=model, vram_budget_mb=budget, n_ctx=4096, json=False)
    assert cmd_plan(args) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and "Traceback" not in err


def test_cli_plan_works_for_a_catalog_model_that_is_not_downloaded(capsys):
    args = argparse.Namespace(model="qwen2.5-7b-instruct-q4_k_m", vram_budget_mb="6144", n_ctx=4096, json=False)
    assert cmd_plan(args) == 0
    out = capsys.readouterr().out
    assert "n_gpu_layers 29 of 29" in out and "catalog facts" in out


def test_cli_end_to_end_json_and_errors(tmp_path):
    ok = subprocess.run(cli("plan", "--model", "qwen2.5-7b-instruct-q4_k_m", "--vram-budget-mb", "3072", "--json"),
                        capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert ok.returncode == 0, ok.stderr
    p = json.loads(ok.stdout)
    assert p["offload"] == "partial" and p["gpu_bytes_total"] <= 3072 * MIB and p["budget_source"] == "given"
    bad = subprocess.run(cli("plan", "--model", "demo-small", "--vram-budget-mb", "-3"),
                         capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert bad.returncode == 2 and "0 or more" in bad.stderr and "Traceback" not in bad.stderr
    dev = subprocess.run(cli("devices", "--json"), capture_output=True, text=True, env=cli_env(tmp_path), timeout=60)
    assert dev.returncode == 0 and "default_vram_budget_mb" in json.loads(dev.stdout)


# ---- properties

models = st.sampled_from(ALL)
budgets = st.floats(min_value=1, max_value=9000, allow_nan=False)
contexts = st.integers(min_value=1, max_value=40000)


def _recount(f, p: Plan) -> int:
    """GPU bytes of a plan, counted again from kv_math rather than trusted from the plan."""
    w, _ = kv_math.weights_split(f, p.n_gpu_layers)
    kv = kv_bytes(f, p.n_ctx, p.type_k, p.type_v, p.flash_attn, layers=kv_math.gpu_layer_ids(f, p.n_gpu_layers))
    compute = kv_math.compute_buffer_estimate(f, p.n_ctx, 512, p.flash_attn) if p.n_gpu_layers else 0
    return w + kv + compute


@settings(max_examples=300, deadline=None)
@given(models, st.one_of(st.just(0.0), budgets), contexts)
def test_plan_never_exceeds_the_budget(f, budget, n_ctx):
    p = plan(f, budget, n_ctx)
    assert p.gpu_bytes_total == _recount(f, p) <= int(budget * MIB)
    assert 0 <= p.n_gpu_layers <= p.n_layers + 1 and 1 <= p.n_ctx <= n_ctx
    assert p.type_v == "f16" or p.flash_attn  # llama.cpp needs flash attention for a quantised V
    assert p.explanation.endswith(".") and "Plan:" in p.explanation


# Budgets from 1 MiB: a budget <= 0 is not a tiny GPU but "no GPU", planned as CPU only with f16 KV and
# the asked context (tested above) -- the one place where less budget gives a roomier KV cache.
@settings(max_examples=300, deadline=None)
@given(models, budgets, budgets, contexts)
def test_more_budget_never_means_fewer_layers_less_context_or_more_quantised_kv(f, b1, b2, n_ctx):
    lo, hi = plan(f, min(b1, b2), n_ctx), plan(f, max(b1, b2), n_ctx)
    assert lo.n_gpu_layers <= hi.n_gpu_layers
    assert lo.n_ctx <= hi.n_ctx
    assert KV_RANK[lo.type_k] >= KV_RANK[hi.type_k]


@settings(max_examples=100, deadline=None)
@given(models, st.one_of(st.just(0.0), budgets), contexts, st.sampled_from(kv_math.KV_ORDER))
def test_quantised_v_always_comes_with_flash_attention(f, budget, n_ctx, kv):
    p = plan(f, budget, n_ctx, kv_type=kv)
    assert p.type_k == p.type_v == kv and p.flash_attn == (kv != "f16")
    assert p.gpu_bytes_total <= int(budget * MIB)
