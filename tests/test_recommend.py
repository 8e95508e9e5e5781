"""The first-start recommendation: an L1/L2 pair per machine, from synthetic device snapshots and a
synthetic catalog (Qwen2.5-shaped rows: the planner works from their facts, nothing is loaded)."""

import dataclasses

import pytest

from engine.models.catalog import Catalog, ModelEntry
from engine.models.devices import DeviceSnapshot, GPUInfo
from engine.models.recommend import (CPU_BANDWIDTH, FAST_TOKS, Pick, bandwidth, candidates, recommend_models,
                                     speed_class)

GB = 10**9
GIB = 1 << 30
_FIELDS = {f.name for f in dataclasses.fields(ModelEntry)}


def entry(id, size, layers, heads, kv, params, tier="L1", **kw):
    row = dict(id=id, name=id, file=f"{id}.gguf", tier=tier, size_bytes=size, quant="Q4_K_M", arch="qwen2",
               n_layers=layers, n_heads=heads, n_kv_heads=kv, head_dim_k=128, head_dim_v=128,
               context_length=32768, params_b=params, instruct=True, **kw)
    return ModelEntry(**{k: v for k, v in row.items() if k in _FIELDS})  # params_b/instruct: the new catalog


CATALOG = Catalog([
    entry("demo", 98_000_000, 30, 9, 3, 0.135, demo=True),
    entry("q0.5b", 398_000_000, 24, 14, 2, 0.5),
    entry("q1.5b", 1_117_000_000, 28, 12, 2, 1.5),
    entry("q3b", 1_930_000_000, 36, 16, 2, 3.1),
    entry("q7b", 4_683_000_000, 28, 28, 4, 7.6, tier="L2"),
    entry("q14b", 8_990_000_000, 48, 40, 8, 14.7, tier="L2"),
    entry("q32b", 19_850_000_000, 64, 40, 8, 32.8, tier="L2"),
])


def machine(ram_total_gb, ram_free_gb, gpus=()):
    return DeviceSnapshot(0.0, 8, 4, int(ram_total_gb * GIB), int(ram_free_gb * GIB), 200 << 20, gpus=tuple(gpus))


def nvidia(total_gb, free_gb, name="NVIDIA GeForce RTX 3060"):
    return GPUInfo(0, name, "nvidia", int(total_gb * GIB), int(free_gb * GIB), int((total_gb - free_gb) * GIB),
                   backend="cuda", device="CUDA0", kind="gpu", memory_from="nvml")


def pair(rec):
    return (rec.l1.id if rec.l1 else None, rec.l2.id if rec.l2 else None)


def test_no_gpu_32gb_desktop_gets_a_fast_l1_and_a_larger_cpu_l2():
    rec = recommend_models(machine(32, 16), CATALOG)
    assert pair(rec) == ("q1.5b", "q3b")  # L2 on the CPU: the catalog's CPU picks first
    assert rec.gpu is None and rec.l1.vram_bytes == 0 and rec.l2.vram_bytes == 0
    # speeds from the bandwidth rule: 20 GB/s over the weights
    assert rec.l1.tok_s == pytest.approx(CPU_BANDWIDTH / 1_117_000_000, abs=0.1) and rec.l1.speed == "fast"
    assert rec.l2.tok_s == pytest.approx(CPU_BANDWIDTH / 1_930_000_000, abs=0.1) and rec.l2.speed == "usable"
    # needs: the planner's CPU load, weights plus KV and compute, a little above the file
    assert 1_117_000_000 < rec.l1.ram_bytes < 1_117_000_000 + 600 * 2**20
    assert rec.l1.ram_bytes + rec.l2.ram_bytes < 16 * GIB
    assert "no usable GPU" in rec.l2.why
    # without a larger CPU pick, the GPU picks come next; the 7B's 4.3 tok/s is "slow" but above the floor,
    # the 14B's 2.2 tok/s is not offered
    no_3b = Catalog([e for e in CATALOG.entries if e.id != "q3b"])
    rec = recommend_models(machine(32, 16), no_3b)
    assert pair(rec) == ("q1.5b", "q7b") and rec.l2.speed == "slow" and rec.l2.tok_s == pytest.approx(4.3, abs=0.1)


def test_6gb_gpu_gets_the_7b_whole_on_the_gpu():
    rec = recommend_models(machine(16, 10, [nvidia(6, 5.6)]), CATALOG)
    assert pair(rec) == ("q1.5b", "q7b")
    assert rec.gpu is not None and rec.gpu.device == "CUDA0"
    budget = int(5.6 * GIB) - 512 * 2**20  # free minus the planner's margin
    assert 4_683_000_000 < rec.l2.vram_bytes <= budget
    # Everything on the GPU: host memory is only what llama.cpp keeps on the CPU (the token
    # embedding, ~290 MiB here) and the vocabulary's two copies (~55 MiB), no weights of a layer.
    assert rec.l2.ram_bytes < 400 * 2**20
    assert rec.l2.speed == "fast" and rec.l2.tok_s == pytest.approx(250e9 / 4_683_000_000, abs=0.1)
    assert "RTX 3060" in rec.l2.why


def test_24gb_gpu_gets_the_32b():
    rec = recommend_models(machine(64, 48, [nvidia(24, 23, "NVIDIA GeForce RTX 4090")]), CATALOG)
    assert pair(rec) == ("q1.5b", "q32b")
    assert rec.l2.vram_bytes <= 23 * GIB - 512 * 2**20 and rec.l2.speed == "usable"


def test_8gb_laptop_gets_a_pair_that_fits_its_ram():
    rec = recommend_models(machine(8, 4.5), CATALOG)
    assert pair(rec) == ("q1.5b", "q3b")  # the 7B does not fit beside L1 in 4.5 GiB
    assert rec.l1.ram_bytes + rec.l2.ram_bytes <= 4.5 * GIB
    assert rec.l2.speed == "usable"


def test_too_little_ram_gets_the_smallest_or_nothing():
    assert pair(recommend_models(machine(2, 1.6), CATALOG)) == ("q0.5b", None)
    assert pair(recommend_models(machine(1, 0.3), CATALOG)) == (None, None)


def test_a_software_gpu_or_a_small_one_falls_back_to_the_cpu():
    lavapipe = GPUInfo(0, "llvmpipe (LLVM 15.0.7, 256 bits)", "", 8 * GIB, 8 * GIB, 0, backend="vulkan",
                       device="Vulkan0", kind="gpu", software=True, memory_from="ggml")
    assert recommend_models(machine(32, 16, [lavapipe]), CATALOG).gpu is None
    tiny = recommend_models(machine(32, 16, [nvidia(2, 1.0)]), CATALOG)
    assert tiny.gpu is None and pair(tiny) == ("q1.5b", "q3b")  # nothing larger than L1 fits 0.5 GiB whole


@pytest.mark.skipif("instruct" not in _FIELDS, reason="the catalog has no instruct flag yet")
def test_only_instruct_non_demo_models_are_candidates():
    base = ModelEntry(id="base7b", name="base", file="b.gguf", size_bytes=9 * GB, instruct=False)
    ids = [e.id for e in candidates(Catalog(CATALOG.entries + [base]))]
    assert "demo" not in ids and "base7b" not in ids and ids[0] == "q32b"


def test_speed_classes_and_bandwidth_by_device_kind():
    assert [speed_class(x) for x in (FAST_TOKS, 14.9, 5.0, 4.9)] == ["fast", "usable", "usable", "slow"]
    assert bandwidth(None) == CPU_BANDWIDTH
    igpu = dataclasses.replace(nvidia(2, 2), vendor="intel", kind="igpu")
    apple = dataclasses.replace(nvidia(16, 10), vendor="apple", kind="igpu")
    assert bandwidth(igpu) < bandwidth(apple) < bandwidth(nvidia(6, 6))


def test_the_real_catalog_and_machine_give_a_pick_or_none():
    rec = recommend_models()
    for pick in (rec.l1, rec.l2):
        assert pick is None or (isinstance(pick, Pick) and not pick.entry.demo and pick.ram_bytes > 0)
    assert rec.cpu_name


def test_the_vision_pick_is_a_tier_that_reads_images_else_a_fast_vision_model_that_fits():
    """Issue 41: the welcome's sentence on images comes from here."""
    from engine.models.catalog import load_catalog
    from engine.models.recommend import Pick, vision_pick

    catalog = load_catalog()
    gemma = Pick(catalog.get("gemma-3-4b-it"), 0, 0, 0.0, "usable", "")
    qwen = Pick(catalog.get("qwen2.5-1.5b-instruct-q4_k_m"), 0, 0, 0.0, "fast", "")
    assert vision_pick(catalog, qwen, gemma, 8 * 10**9) is gemma  # L2 reads images itself
    pick = vision_pick(catalog, qwen, None, 8 * 10**9)
    assert catalog.vision_only(pick.entry) and pick.speed == "fast" and pick.ram_bytes <= 8 * 10**9
    assert vision_pick(catalog, qwen, None, 10**8) is None  # nothing fits in 100 MB
