"""A GPU that cannot take the plan never fails a turn: the load falls back to fewer layers or the
CPU, and done.fallback / done.stats.offload say why. Scripted machine (FakeGPU) and fake backends:
these are the engine's decisions, not llama.cpp's (tests/model/test_vulkan.py runs the real one)."""

from engine.models.planner import plan
from engine.models.devices import DEFAULT_MARGIN_MB
from tests.fake_backend import FakeGPU, dones, fakes, make_assistant, send  # noqa: F401


def _l2_turn(a):
    cid = a.new_conversation()
    (done,) = dones(send(a, cid, "Explain a hash map.", route="L2"))
    (w,) = [w for w in a.manager.loaded() if w.model.path.stem == "l2"]
    return done, w


def _partial_free_mb(fakes) -> float:
    """Free MiB on the card for which the planner puts some, not all, of l2's layers on it."""
    path = fakes.model_file("l2", n_layers=8)
    budget = next(b / 8 for b in range(1, 8 * 64) if plan(path, b / 8).offload == "partial")
    return budget + DEFAULT_MARGIN_MB


def _tiers(fakes, **options):
    return {"L1": str(fakes.model_file("l1")), "L2": str(fakes.model_file("l2", n_layers=8, **options))}


def test_everything_on_the_gpu_when_it_fits(fakes, make_assistant):
    a = make_assistant(tiers=_tiers(fakes), vram_budget_mb=None, devices=FakeGPU(free_mb=8192))
    done, w = _l2_turn(a)
    assert w.plan.offload == "full" and w.backend.params.gpu_device == "FakeGPU0"
    assert done.stats.offload == {"backend": "fake", "device": "FakeGPU0", "n_gpu_layers": 9, "n_layers": 0,
                                     "note": None}
    assert done.fallback is None
    # the CPU tier stays off the device
    (l1,) = [w for w in a.manager.loaded() if w.model.path.stem == "l1"] or [a.manager.get(a.tiers["L1"], gpu=False)]
    assert l1.backend.params.n_gpu_layers == 0 and l1.backend.params.gpu_device is None


def test_out_of_device_memory_at_load_retries_with_fewer_layers(fakes, make_assistant):
    a = make_assistant(tiers=_tiers(fakes, gpu_layers_fit=3), vram_budget_mb=None)
    done, w = _l2_turn(a)
    tried = [p.n_gpu_layers for stem, p in fakes.loads if stem == "l2"]
    assert tried == [9, 4, 2]  # full, half, half again: the first that fits
    assert w.plan.n_gpu_layers == 2 and done.stats.offload["n_gpu_layers"] == 2
    assert "out of device memory" in done.fallback and "2 layers on the GPU" in done.fallback
    assert done.stats.offload["note"] == done.fallback and done.text


def test_a_broken_gpu_driver_loads_on_the_cpu(fakes, make_assistant):
    a = make_assistant(tiers=_tiers(fakes, gpu_error="ggml_vulkan: device lost"), vram_budget_mb=None)
    done, w = _l2_turn(a)
    assert [p.n_gpu_layers for stem, p in fakes.loads if stem == "l2"] == [9, 0]
    assert w.plan.offload == "cpu" and done.stats.offload["backend"] == "cpu"
    assert "device lost" in done.fallback and "running on the CPU" in done.fallback


def test_a_device_too_small_gets_the_layers_that_fit_and_says_so(fakes, make_assistant):
    a = make_assistant(tiers=_tiers(fakes), vram_budget_mb=None, devices=FakeGPU(free_mb=_partial_free_mb(fakes)))
    done, w = _l2_turn(a)
    assert w.plan.offload == "partial" and 0 < w.plan.n_gpu_layers < 9, w.plan.explanation
    assert f"only {w.plan.n_gpu_layers} of 9 layers fit on Fake GPU (FakeGPU0)" in done.fallback
    assert done.stats.offload["n_gpu_layers"] == w.plan.n_gpu_layers


def test_vram_taken_by_another_app_replans_the_next_load_with_fewer_layers(fakes, make_assistant):
    gpu = FakeGPU(free_mb=8192)
    a = make_assistant(tiers=_tiers(fakes), vram_budget_mb=None, devices=gpu)
    first, w = _l2_turn(a)
    assert w.plan.offload == "full" and first.fallback is None
    a.manager.close()  # unloaded (evicted, settings change); meanwhile another app fills the card
    gpu.free_mb = _partial_free_mb(fakes)
    done, w2 = _l2_turn(a)
    assert 0 < w2.plan.n_gpu_layers < w.plan.n_gpu_layers
    assert "less free memory on Fake GPU (FakeGPU0) than at the last load" in done.fallback
    assert f"{w2.plan.n_gpu_layers} layers on the GPU instead of 9" in done.fallback


def test_no_gpu_at_all_is_quiet_but_a_missing_vulkan_loader_is_said(fakes, make_assistant):
    a = make_assistant(tiers=_tiers(fakes), vram_budget_mb=None, devices=FakeGPU(gpu=False))
    done, w = _l2_turn(a)
    assert w.plan.offload == "cpu" and done.fallback is None and done.stats.offload["backend"] == "cpu"
    why = "libvulkan.so.1: cannot open shared object file: No such file or directory"
    b = make_assistant(tiers=_tiers(fakes), vram_budget_mb=None, devices=FakeGPU(gpu=False, skipped=(("vulkan", why),)))
    done, w = _l2_turn(b)
    assert w.plan.offload == "cpu" and "running on the CPU" in done.fallback and why in done.fallback


def test_n_gpu_layers_overrides_the_plan_for_every_local_model(fakes, make_assistant):
    a = make_assistant(tiers=_tiers(fakes), vram_budget_mb=None, n_gpu_layers=5)
    done, w = _l2_turn(a)
    assert w.plan.n_gpu_layers == 5 and "set by the user" in w.plan.explanation
    l1 = a.manager.get(a.tiers["L1"], gpu=False)
    assert l1.backend.params.n_gpu_layers == 3  # min(5, all 3 of the tiny L1)
    cpu = make_assistant(tiers=_tiers(fakes), vram_budget_mb=None, n_gpu_layers=0)
    done, w = _l2_turn(cpu)
    assert w.plan.offload == "cpu" and w.backend.params.gpu_device is None


def test_a_fallback_plan_says_why_it_has_fewer_layers(fakes, make_assistant):
    a = make_assistant(tiers=_tiers(fakes, gpu_layers_fit=3), vram_budget_mb=None)
    _, w = _l2_turn(a)
    assert "n_gpu_layers 2 after the gpu load failed" in w.plan.explanation.lower()
    assert "set by the user" not in w.plan.explanation and "over the budget" not in w.plan.explanation
